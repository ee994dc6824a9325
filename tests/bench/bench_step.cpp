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
//   bench_step --config jobs/configs/tiny.yaml --data SHARDS [--steps 20] [--warmup 3]
//              [--set train.batch_size=32 ...]
// Prints one JSON line (rank 0): mean/median/min step seconds and samples/s (global).
#include <mpi.h>
#include <torch/torch.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cxxopts.hpp>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "fnvlp/comm/job_main.hpp"
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
#include "fnvlp/train/grad_sync.hpp"
#include "fnvlp/train/pretrain_config.hpp"
#include "fnvlp/train/schedule.hpp"
#include "fnvlp/train/watchdog.hpp"

namespace {

using namespace fnvlp;
constexpr int64_t kPadId = 0, kClsId = 101, kSepId = 102, kMaskId = 103;

torch::Generator step_generator(int64_t seed, int64_t step, int rank, uint64_t stream) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>();
  gen.set_current_seed(data::hash_key({static_cast<uint64_t>(seed), static_cast<uint64_t>(step),
                                       static_cast<uint64_t>(rank), stream}));
  return gen;
}

class StepBench {
 public:
  StepBench(const Comm& comm, const train::PretrainConfig& cfg, int64_t total_steps)
      : comm_(comm), cfg_(cfg), total_steps_(total_steps), model_(nullptr) {
    torch::set_num_threads(static_cast<int>(cfg_.train.threads));
    set_blas_threads(static_cast<int>(cfg_.train.threads));
    torch::manual_seed(static_cast<uint64_t>(cfg_.train.seed));
    model_ = model::Albef(cfg_.model);
    train::broadcast_module(comm_, *model_);
    std::vector<torch::Tensor> decay, no_decay;
    for (auto& p : model_->parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
    params_ = model_->parameters();
    grads_ = std::make_unique<train::FlatGradients>(params_);
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
    in.soft = loss::parse_soft_targets(cfg_.loss.soft_targets);
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
    const torch::Tensor fused = model_->fuse_cls(text_hidden.index_select(0, pairs.text_index),
                                                 mask.index_select(0, pairs.text_index),
                                                 image_tokens.index_select(0, pairs.image_index));
    const torch::Tensor itm = loss::itm_loss(model_->itm_logits(fused), pairs.labels);

    auto mlm_gen = step_generator(cfg_.train.seed, step_, comm_.rank(), 3);
    const loss::MlmMasking m =
        loss::mask_tokens(ids, mask, cfg_.loss.mlm_probability, cfg_.model.vocab_size, kMaskId,
                          {kPadId, kClsId, kSepId}, mlm_gen);
    const torch::Tensor mlm =
        loss::mlm_loss(model_->mlm_logits(model_->fuse_at(model_->encode_text(m.input_ids, mask),
                                                          mask, image_tokens, m.positions)),
                       m.targets);

    torch::Tensor total =
        cfg_.loss.itc_weight * itc.loss + cfg_.loss.itm_weight * itm + cfg_.loss.mlm_weight * mlm;
    (void)itc.loss.item<double>();
    (void)itm.item<double>();
    (void)mlm.item<double>();
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
    if (cfg_.optim.grad_clip > 0) torch::nn::utils::clip_grad_norm_(params_, cfg_.optim.grad_clip);
    train::fused_adamw_step(*optimizer_);
    return total_value;
  }

 private:
  void sum_rows(torch::Tensor& t) {
    t = t.contiguous();
    comm_.allreduce(t.data_ptr<float>(), static_cast<size_t>(t.numel()), MPI_SUM);
  }

  const Comm& comm_;
  train::PretrainConfig cfg_;
  int64_t total_steps_;
  int64_t step_ = 0;
  model::Albef model_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<train::FlatGradients> grads_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
};

int run(Comm& comm, int argc, char** argv) {
  std::string config_path, data_dir;
  std::vector<std::string> overrides;
  int64_t steps = 20, warmup = 3;
  cxxopts::Options cli("bench_step", "compute-only timing of the fnvlp-pretrain step");
  cli.add_options()("config", "YAML config", cxxopts::value(config_path))(
      "data", "shard directory (pairs 0.. form the fixed batch)", cxxopts::value(data_dir))(
      "steps", "timed steps", cxxopts::value(steps))("warmup", "untimed steps first",
                                                     cxxopts::value(warmup))(
      "set", "config override k=v (repeatable)", cxxopts::value(overrides))("h,help", "help");
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
  const torch::Tensor images = augment.eval(batch.images);

  StepBench bench(comm, cfg, warmup + steps);
  for (int64_t s = 0; s < warmup; ++s) bench.step(images, batch);
  // CPU seconds of this process (all its threads): unlike wall time, unaffected by other jobs
  // sharing the cores, so it compares implementations on a busy machine.
  auto cpu_now = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  std::vector<double> times, cpu;
  double last = 0;
  for (int64_t s = 0; s < steps; ++s) {
    comm.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_now();
    last = bench.step(images, batch);
    cpu.push_back(cpu_now() - c0);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  // A step of the job lasts as long as its slowest rank.
  comm.allreduce(times.data(), times.size(), MPI_MAX);
  comm.allreduce(cpu.data(), cpu.size(), MPI_MAX);
  const double mean = std::accumulate(times.begin(), times.end(), 0.0) / times.size();
  const double cpu_mean = std::accumulate(cpu.begin(), cpu.end(), 0.0) / cpu.size();
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
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
                          {"step_s_median", sorted[sorted.size() / 2]},
                          {"step_s_min", sorted.front()},
                          {"step_cpu_s_mean", cpu_mean},
                          {"samples_per_s", b * comm.size() / mean},
                          {"last_loss", last}};
    std::cout << out.dump() << std::endl;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return fnvlp::job_main(argc, argv, "bench_step", run); }
