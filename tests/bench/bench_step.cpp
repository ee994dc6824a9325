// bench_step: compute-only timing of one fnvlp-pretrain training step (issue 3 benchmark).
//
// Builds the model, losses and AdamW through libfnvlp exactly as src/fnvlp/train/trainer.cpp
// does, and repeats its train_step on one fixed in-memory batch: pairs 0..B-1 of a shard
// directory, normalised by Augmenter::eval (no random augmentation, no loader), so the timed loop
// is the model step alone. tests/bench/pytorch_albef.py --mode compute reads the same pairs.
// The step below mirrors Trainer::train_step line for line (the trainer's is private to
// trainer.cpp): ITC against the all-gathered batch with pseudo-soft targets, ITM with hard
// negatives, MLM at masked positions, the agreed finite check, backward, bucketed gradient
// averaging, clipping and AdamW. Runs under mpirun at any rank count (each rank its own batch
// rows b*r..b*r+b-1) or stand-alone as one rank.
//
// With --falcon-reward every timed step is followed by FALCON's reward pass (Trainer::
// falcon_update: L_MLM at θ_{k+1} on the step's batch and masks, in inference mode), timed on its
// own: the reward pass against the step it follows is the part of FALCON's overhead the issue
// fixes exactly (issue 4 benchmark). Where tests/bench/gemm_flops.c is preloaded, the BLAS FLOPs
// of the step and of the reward pass are counted too: their ratio is what the reward pass costs
// whatever its kernels' speed.
//
//   bench_step --config jobs/configs/tiny.yaml --data SHARDS [--steps 20] [--warmup 3]
//              [--falcon-reward] [--set train.batch_size=32 ...]
// Prints one JSON line (rank 0): mean/median/min step seconds and samples/s (global).
#include <torch/torch.h>

#include <dlfcn.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cxxopts.hpp>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "fnvlp/comm/flat_gradients.hpp"
#include "fnvlp/comm/job_main.hpp"
#include "fnvlp/comm/tensors.hpp"
#include "fnvlp/comm/watchdog.hpp"
#include "fnvlp/core/blas.hpp"
#include "fnvlp/core/config.hpp"
#include "fnvlp/data/augment.hpp"
#include "fnvlp/data/dataset.hpp"
#include "fnvlp/data/sampler.hpp"
#include "fnvlp/loss/itc.hpp"
#include "fnvlp/loss/itm.hpp"
#include "fnvlp/loss/mlm.hpp"
#include "fnvlp/model/albef.hpp"
#include "fnvlp/train/fused_adamw.hpp"
#include "fnvlp/train/non_finite.hpp"
#include "fnvlp/train/pretrain_config.hpp"
#include "fnvlp/train/schedule.hpp"

namespace {

using namespace fnvlp;

torch::Generator step_generator(int64_t seed, int64_t step, int rank, uint64_t stream) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>();
  gen.set_current_seed(data::hash_key({static_cast<uint64_t>(seed), static_cast<uint64_t>(step),
                                       static_cast<uint64_t>(rank), stream}));
  return gen;
}

class StepBench {
 public:
  StepBench(const Comm& comm, const train::PretrainConfig& cfg, int64_t total_steps,
            const data::SpecialTokens& special)
      : comm_(comm), cfg_(cfg), total_steps_(total_steps), special_(special), model_(nullptr) {
    torch::set_num_threads(static_cast<int>(cfg_.train.threads));
    set_blas_threads(static_cast<int>(cfg_.train.threads));
    torch::manual_seed(static_cast<uint64_t>(cfg_.train.seed));
    model_ = model::Albef(cfg_.model);
    train::broadcast_module(comm_, *model_);
    std::vector<torch::Tensor> decay, no_decay;
    for (auto& p : model_->parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
    params_ = model_->parameters();
    grads_ = std::make_unique<FlatGradients>(params_);
    auto adamw = [&](double wd) {
      return torch::optim::AdamWOptions(cfg_.optim.lr)
          .betas({cfg_.optim.beta1, cfg_.optim.beta2})
          .eps(cfg_.optim.eps)
          .weight_decay(wd);
    };
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(
        decay, std::make_unique<torch::optim::AdamWOptions>(adamw(cfg_.optim.weight_decay)));
    groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(adamw(0.0)));
    optimizer_ =
        std::make_unique<torch::optim::AdamW>(std::move(groups), adamw(cfg_.optim.weight_decay));
  }

  int64_t parameters() const { return model_->num_parameters(); }

  // Trainer::train_step with `images` already augmented/normalised.
  double step(const torch::Tensor& images, const data::Batch& batch) {
    model_->train();
    const uint64_t seed = static_cast<uint64_t>(cfg_.train.seed);
    const double lr = train::lr_at(step_, total_steps_, cfg_.optim.warmup_steps, cfg_.optim.lr,
                                   cfg_.optim.min_lr);
    for (auto& group : optimizer_->param_groups())
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
    torch::manual_seed(data::hash_key(
        {seed, static_cast<uint64_t>(step_), static_cast<uint64_t>(comm_.rank()), 0}));
    const torch::Tensor ids = batch.tokens, mask = batch.attention_mask;

    const torch::Tensor image_tokens = model_->encode_image(images);
    const torch::Tensor text_hidden = model_->encode_text(ids, mask);
    const torch::Tensor img = model_->image_embed(image_tokens);
    const torch::Tensor txt = model_->text_embed(text_hidden);
    loss::ItcInputs in;
    in.img = img;
    in.txt = txt;
    in.img_all = train::allgather_rows(comm_, img, &in.offset);
    in.txt_all = train::allgather_rows(comm_, txt, nullptr);
    in.temp = model_->temp();
    in.image_id = batch.image_id;
    {
      std::vector<int64_t> mine(batch.image_id.data_ptr<int64_t>(),
                                batch.image_id.data_ptr<int64_t>() + batch.size());
      in.image_id_all = torch::tensor(comm_.allgatherv(mine), torch::kLong);
    }
    in.soft = cfg_.loss.soft_targets == negatives::SoftTargetsKind::kNone
                  ? loss::SoftTargets::kNone
                  : loss::SoftTargets::kPseudo;
    in.soft_weight = cfg_.loss.soft_weight;
    in.cross_rank_grad = comm_.size() > 1;
    const loss::ItcResult itc = loss::itc_loss(in);

    const int64_t b = batch.size();
    auto itm_gen = step_generator(cfg_.train.seed, step_, comm_.rank(), 2);
    const auto local = torch::indexing::Slice(in.offset, in.offset + b);
    const auto negatives = loss::sample_itm_negatives(
        itc.sim_i2t.index({torch::indexing::Slice(), local}),
        itc.sim_t2i.index({torch::indexing::Slice(), local}), batch.image_id, {}, {},
        loss::parse_itm_negative_mode(cfg_.loss.itm_negatives), itm_gen);
    const loss::ItmPairs pairs = loss::itm_pairs(negatives);
    const std::vector<torch::Tensor> image_keys = model_->image_keys(image_tokens);
    const torch::Tensor fused =
        model_->fuse_cls(text_hidden, mask, image_keys, {pairs.text_index, pairs.image_index});
    const torch::Tensor itm = loss::itm_loss(model_->itm_logits(fused), pairs.labels);

    auto mlm_gen = step_generator(cfg_.train.seed, step_, comm_.rank(), 3);
    masking_ =
        loss::mask_tokens(ids, mask, cfg_.loss.mlm_probability, cfg_.model.vocab_size,
                          special_.mask, {special_.pad, special_.cls, special_.sep}, mlm_gen);
    const torch::Tensor mlm = masked_lm_loss(image_keys, mask);

    torch::Tensor total =
        cfg_.loss.itc_weight * itc.loss + cfg_.loss.itm_weight * itm + cfg_.loss.mlm_weight * mlm;
    (void)itc.loss.item<double>();
    (void)itm.item<double>();
    mlm_before_ = mlm.item<double>();
    const double total_value = total.item<double>();
    const bool finite = train::all_finite(comm_, total_value);
    if (in.cross_rank_grad && finite) {
      loss::ItcGatheredGrads g = loss::itc_gathered_grads(itc);
      sum_rows(g.img_all);
      sum_rows(g.txt_all);
      total = total + cfg_.loss.itc_weight * loss::itc_cross_rank_term(in, g);
    }
    grads_->zero();
    ++step_;
    if (!finite) return total_value;
    total.backward();
    grads_->allreduce_mean(comm_);
    train::adamw_step(*optimizer_, *grads_, cfg_.optim.grad_clip);
    return total_value;
  }

  // Trainer::falcon_update's reward pass after the step above: Δ_k = L_MLM(θ_k) - L_MLM(θ_{k+1})
  // on the same batch and masks (falcon.txt §3.3, Alg. 2 line 7).
  double reward_pass(const torch::Tensor& images, const data::Batch& batch) {
    c10::InferenceMode inference;
    torch::manual_seed(
        data::hash_key({static_cast<uint64_t>(cfg_.train.seed), static_cast<uint64_t>(step_ - 1),
                        static_cast<uint64_t>(comm_.rank()), 0}));
    return mlm_before_ -
           masked_lm_loss(model_->image_keys(model_->encode_image(images)), batch.attention_mask)
               .item<double>();
  }

 private:
  // L_MLM of the current weights on masking_, at its masked positions only.
  torch::Tensor masked_lm_loss(const std::vector<torch::Tensor>& image_keys,
                               const torch::Tensor& mask) {
    const auto at_masked = model_->fuse_at(model_->encode_text(masking_.input_ids, mask), mask,
                                           image_keys, {}, masking_.positions);
    return loss::linear_cross_entropy(model_->mlm_hidden(at_masked), model_->mlm_decoder_weight(),
                                      model_->mlm_bias(), masking_.targets);
  }

  void sum_rows(torch::Tensor& t) {
    t = t.contiguous();
    comm_.allreduce(t.data_ptr<float>(), static_cast<size_t>(t.numel()), ReduceOp::kSum);
  }

  const Comm& comm_;
  train::PretrainConfig cfg_;
  int64_t total_steps_;
  data::SpecialTokens special_;
  int64_t step_ = 0;
  model::Albef model_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<FlatGradients> grads_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  loss::MlmMasking masking_;  // the last step's, for the reward pass
  double mlm_before_ = 0;
};

// A counter of tests/bench/gemm_flops.c (fnvlp_gemm_flops, fnvlp_gemm_ns) when it is
// preloaded, else null.
using BlasCounter = unsigned long long (*)();
BlasCounter preloaded_counter(const char* name) {
  return reinterpret_cast<BlasCounter>(dlsym(RTLD_DEFAULT, name));
}

template <typename T>
T median_of(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// CPU seconds of this process (all its threads): unlike wall time, unaffected by other jobs
// sharing the cores, so it compares implementations on a busy machine.
double cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Per measured call: wall and CPU seconds, and, where gemm_flops.c is preloaded, BLAS FLOPs and
// nanoseconds inside BLAS.
struct Series {
  std::vector<double> wall, cpu;
  std::vector<unsigned long long> flops, blas_ns;

  template <typename F>
  auto measure(BlasCounter count_flops, BlasCounter count_ns, F&& call) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_now();
    const unsigned long long f0 = count_flops ? count_flops() : 0, n0 = count_ns ? count_ns() : 0;
    auto result = call();
    cpu.push_back(cpu_now() - c0);
    wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (count_flops) flops.push_back(count_flops() - f0);
    if (count_ns) blas_ns.push_back(count_ns() - n0);
    return result;
  }
};

int run(Comm& comm, int argc, char** argv) {
  std::string config_path, data_dir;
  std::vector<std::string> overrides;
  int64_t steps = 20, warmup = 3;
  bool falcon_reward = false;
  cxxopts::Options cli("bench_step", "compute-only timing of the fnvlp-pretrain step");
  cli.add_options()("config", "YAML config", cxxopts::value(config_path))(
      "data", "shard directory (pairs 0.. form the fixed batch)", cxxopts::value(data_dir))(
      "steps", "timed steps", cxxopts::value(steps))("warmup", "untimed steps first",
                                                     cxxopts::value(warmup))(
      "falcon-reward", "after every timed step, time FALCON's reward pass on its own",
      cxxopts::value(falcon_reward))("set", "config override k=v (repeatable)",
                                     cxxopts::value(overrides))("h,help", "help");
  const auto args = cli.parse(argc, argv);
  if (args.count("help")) {
    if (comm.is_root()) std::cout << cli.help() << "\n";
    return 0;
  }
  FNVLP_CHECK(!config_path.empty() && !data_dir.empty(), "--config and --data are required");
  FNVLP_CHECK(steps > 0 && warmup >= 0, "--steps must be > 0 and --warmup >= 0");
  const auto cfg = config::load_typed<train::PretrainConfig>(config_path, overrides);
  const int64_t b = cfg.train.batch_size;

  data::PairDataset dataset(data_dir);
  FNVLP_CHECK(dataset.num_pairs() >= b * comm.size(),
              data_dir << ": " << dataset.num_pairs() << " pairs, need " << b * comm.size());
  std::vector<int64_t> ids(static_cast<size_t>(b));
  std::iota(ids.begin(), ids.end(), b * comm.rank());
  const data::Batch batch = dataset.read(ids);
  const data::Augmenter augment(cfg.augment, cfg.model.image_size);
  const torch::Tensor images = augment.eval(batch);

  StepBench bench(comm, cfg, warmup + steps, dataset.special_tokens());
  for (int64_t s = 0; s < warmup; ++s) bench.step(images, batch);
  const BlasCounter flops = preloaded_counter("fnvlp_gemm_flops");
  const BlasCounter blas_ns = preloaded_counter("fnvlp_gemm_ns");
  Series step, reward;
  std::vector<double> rewards;
  double last = 0;
  for (int64_t s = 0; s < steps; ++s) {
    comm.barrier();
    last = step.measure(flops, blas_ns, [&] { return bench.step(images, batch); });
    if (!falcon_reward) continue;
    comm.barrier();
    rewards.push_back(
        reward.measure(flops, blas_ns, [&] { return bench.reward_pass(images, batch); }));
  }
  // A step of the job lasts as long as its slowest rank.
  comm.allreduce(step.wall.data(), step.wall.size(), ReduceOp::kMax);
  comm.allreduce(step.cpu.data(), step.cpu.size(), ReduceOp::kMax);
  if (falcon_reward) {
    comm.allreduce(reward.wall.data(), reward.wall.size(), ReduceOp::kMax);
    comm.allreduce(reward.cpu.data(), reward.cpu.size(), ReduceOp::kMax);
  }
  const double mean = std::accumulate(step.wall.begin(), step.wall.end(), 0.0) / step.wall.size();
  const double cpu_mean = std::accumulate(step.cpu.begin(), step.cpu.end(), 0.0) / step.cpu.size();
  if (comm.is_root()) {
    nlohmann::json out = {{"impl", "fnvlp"},
                          {"mode", "compute"},
                          {"ranks", comm.size()},
                          {"batch", b},
                          {"config", config_path},
                          {"image_size", cfg.model.image_size},
                          {"threads", cfg.train.threads},
                          {"params", bench.parameters()},
                          {"steps", steps},
                          {"step_s_mean", mean},
                          {"step_s_median", median_of(step.wall)},
                          {"step_s_min", *std::min_element(step.wall.begin(), step.wall.end())},
                          {"step_cpu_s_mean", cpu_mean},
                          {"samples_per_s", b * comm.size() / mean},
                          {"last_loss", last}};
    if (falcon_reward) {
      // Per step, the reward pass against the step it follows; the median of those ratios.
      std::vector<double> ratio(step.wall.size()), cpu_ratio(step.wall.size());
      for (size_t i = 0; i < step.wall.size(); ++i) {
        ratio[i] = reward.wall[i] / step.wall[i];
        cpu_ratio[i] = reward.cpu[i] / step.cpu[i];
      }
      out["reward_s_median"] = median_of(reward.wall);
      out["reward_over_step_median"] = median_of(ratio);
      out["reward_over_step_cpu_median"] = median_of(cpu_ratio);
      out["reward_mean"] = std::accumulate(rewards.begin(), rewards.end(), 0.0) / rewards.size();
    }
    if (flops && blas_ns) {
      // Rank 0's counts (every rank runs the same shapes but for its own masked-token count)
      // against the slowest rank's times, so the time shares err low.
      auto sum = [](const std::vector<unsigned long long>& v) {
        return static_cast<double>(std::accumulate(v.begin(), v.end(), 0ULL));
      };
      const double step_s = std::accumulate(step.wall.begin(), step.wall.end(), 0.0);
      out["step_gemm_gflop_median"] = 1e-9 * static_cast<double>(median_of(step.flops));
      out["step_blas_time_share"] = 1e-9 * sum(step.blas_ns) / step_s;
      if (falcon_reward) {
        out["reward_gemm_gflop_median"] = 1e-9 * static_cast<double>(median_of(reward.flops));
        out["reward_over_step_gemm_flops"] = sum(reward.flops) / sum(step.flops);
        // The reward pass's time inside BLAS alone, against the whole step: the overhead left if
        // everything else of the reward pass cost nothing.
        out["reward_blas_over_step"] = 1e-9 * sum(reward.blas_ns) / step_s;
        out["reward_blas_time_share"] =
            1e-9 * sum(reward.blas_ns) /
            std::accumulate(reward.wall.begin(), reward.wall.end(), 0.0);
      }
    }
    std::cout << out.dump() << std::endl;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return fnvlp::job_main(argc, argv, "bench_step", run); }
