#include "fnvlp/train/trainer.hpp"

#include <dlfcn.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>

#include "fnvlp/core/log.hpp"
#include "fnvlp/data/dataset.hpp"
#include "fnvlp/data/embeddings.hpp"
#include "fnvlp/data/prefetch.hpp"
#include "fnvlp/data/sampler.hpp"
#include "fnvlp/eval/retrieval.hpp"
#include "fnvlp/loss/itc.hpp"
#include "fnvlp/loss/itm.hpp"
#include "fnvlp/loss/mlm.hpp"
#include "fnvlp/model/albef.hpp"
#include "fnvlp/train/grad_sync.hpp"
#include "fnvlp/train/pretrained.hpp"
#include "fnvlp/train/run_dir.hpp"
#include "fnvlp/train/schedule.hpp"
#include "fnvlp/train/signals.hpp"

namespace fnvlp::train {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr int64_t kPadId = 0, kClsId = 101, kSepId = 102, kMaskId = 103;

// Per-step seeding: every random draw of step s on rank r comes from a generator seeded by
// (seed, s, r, stream), so a resumed run draws exactly what the uninterrupted one drew without
// saving generator states.
torch::Generator step_generator(int64_t seed, int64_t step, int rank, uint64_t stream) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>();
  gen.set_current_seed(data::hash_key({static_cast<uint64_t>(seed), static_cast<uint64_t>(step),
                                       static_cast<uint64_t>(rank), stream}));
  return gen;
}

// torch::set_num_threads does not reach OpenBLAS's own pool; without this a rank spawns one BLAS
// thread per core and ranks fight over cores (1.4-2.2x slower steps measured here).
void set_blas_threads(int n) {
  using Fn = void (*)(int);
  if (auto fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) fn(n);
}

struct StepLosses {
  double itc = 0, itm = 0, mlm = 0, total = 0;
};

class Trainer {
 public:
  Trainer(const Comm& comm, const PretrainConfig& cfg, const PretrainOptions& opt)
      : comm_(comm),
        cfg_(cfg),
        opt_(opt),
        run_(opt.run_dir, comm),
        dataset_(opt.data_dir),
        partition_(dataset_.num_pairs(), comm.size()),
        sampler_(partition_, cfg.train.batch_size, static_cast<uint64_t>(cfg.train.seed),
                 comm.rank()),
        model_(nullptr),
        augment_(cfg.augment, cfg.model.image_size),
        ckpt_(run_, comm, cfg.checkpoint),
        skips_(cfg.non_finite.max_consecutive) {
    cfg_.model.validate();
    if (!opt.val_dir.empty()) val_ = std::make_unique<data::PairDataset>(opt.val_dir);
    FNVLP_CHECK(dataset_.max_len() <= cfg_.model.max_len,
                opt.data_dir << ": captions of " << dataset_.max_len()
                             << " tokens exceed model.max_len " << cfg_.model.max_len);
    torch::set_num_threads(static_cast<int>(cfg_.train.threads));
    set_blas_threads(static_cast<int>(cfg_.train.threads));
    torch::manual_seed(static_cast<uint64_t>(cfg_.train.seed));
    model_ = model::Albef(cfg_.model);
    if (!opt.init_checkpoint.empty()) load_pretrained_weights(comm_, opt.init_checkpoint, *model_);
    broadcast_module(comm_, *model_);
    std::vector<torch::Tensor> decay, no_decay;
    for (auto& p : model_->parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
    params_ = model_->parameters();
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

    // Every rank must run the same number of steps: blocks differ in size by at most one pair.
    steps_per_epoch_ = comm_.allreduce_min(sampler_.batches_per_epoch());
    FNVLP_CHECK(steps_per_epoch_ > 0,
                opt.data_dir << ": " << dataset_.num_pairs() << " pairs over " << comm_.size()
                             << " ranks give no full batch of " << cfg_.train.batch_size);
    total_steps_ =
        cfg_.train.max_steps > 0 ? cfg_.train.max_steps : cfg_.train.epochs * steps_per_epoch_;
  }

  int run() {
    StopRequest::install();
    // Room for two checkpoints (model + AdamW's two moments) before any step is spent.
    ckpt_.check_free_space(module_bytes(*model_) + optimizer_state_bytes(*optimizer_) +
                           2 * module_bytes(*model_));
    json sampler_state;
    bool resumed = maybe_resume(&sampler_state);
    MetricsWriter metrics(run_.metrics_path(), comm_,
                          resumed ? std::optional<int64_t>(step_) : std::nullopt);
    run_.write_config(opt_.config_yaml);
    Watchdog dog(comm_, cfg_.watchdog.timeout_s);
    data::Prefetcher loader(dataset_, sampler_, static_cast<int>(cfg_.train.prefetch));
    if (resumed && !sampler_state.is_null())
      loader.resume(sampler_state);
    else
      loader.start_epoch(epoch_);
    if (comm_.is_root())
      spdlog::info(
          "pretrain: {} pairs, {} ranks x batch {}, {} steps/epoch, {} steps, model {:.1f} M "
          "params",
          dataset_.num_pairs(), comm_.size(), cfg_.train.batch_size, steps_per_epoch_, total_steps_,
          model_->num_parameters() / 1e6);

    const auto t0 = std::chrono::steady_clock::now();
    auto window_start = t0;
    int64_t window_steps = 0, samples = 0;
    StepLosses window{};
    int exit_code = 0;
    RunStatus status = RunStatus::kCompleted;
    while (step_ < total_steps_) {
      data::Batch batch;
      dog.beat(step_, "data");
      // Epochs end on an agreed step count, never on one rank's loader running dry: blocks may
      // differ by a pair, and a rank alone at an epoch end would deadlock the collectives.
      if (step_in_epoch_ == steps_per_epoch_) {
        finish_epoch(dog, metrics);
        loader.start_epoch(++epoch_);
        step_in_epoch_ = 0;
        continue;
      }
      FNVLP_CHECK(loader.next(batch), "rank " << comm_.rank() << ": loader ended epoch " << epoch_
                                              << " after " << step_in_epoch_ << " of "
                                              << steps_per_epoch_ << " steps");
      dog.beat(step_, "step");
      const StepLosses l = train_step(batch);
      samples += batch.size() * comm_.size();
      window.itc += l.itc;
      window.itm += l.itm;
      window.mlm += l.mlm;
      window.total += l.total;
      ++window_steps;
      ++step_;
      ++step_in_epoch_;
      if (step_ % cfg_.train.log_every == 0 || step_ == total_steps_) {
        log_progress(metrics, window, window_steps, window_start, t0, loader);
        window = {};
        window_steps = 0;
        window_start = std::chrono::steady_clock::now();
      }
      sampler_state = loader.state();
      if (step_ == cfg_.train.inject_stop_step && comm_.is_root())
        StopRequest::raise_for_test(SIGUSR1);
      if (agree_stop(comm_)) {
        save_checkpoint(dog, sampler_state);
        status = RunStatus::kPreempted;
        exit_code = kExitRequeue;
        if (comm_.is_root())
          spdlog::warn(
              "pretrain: stop requested (signal {}), checkpointed at step {}; exiting with {} for "
              "requeue",
              StopRequest::signal_number(), step_, kExitRequeue);
        break;
      }
      if (cfg_.checkpoint.every_steps > 0 && step_ % cfg_.checkpoint.every_steps == 0 &&
          step_ < total_steps_)
        save_checkpoint(dog, sampler_state);
    }
    if (status == RunStatus::kCompleted) {
      if (last_exported_epoch_ < epoch_ && cfg_.train.export_embeddings)
        export_embeddings(dog, metrics);
      call_epoch_hook(dog, metrics);
      save_checkpoint(dog, loader.state());
    }
    dog.stop();
    metrics.close();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    RunSummary s;
    s.status = status;
    s.exit_code = exit_code;
    s.steps = step_;
    s.samples = samples;
    s.seconds = seconds;
    s.skipped_steps = skips_.total();
    s.final_metrics = last_metrics_;
    s.extra = {{"samples_per_second", seconds > 0 ? samples / seconds : 0.0},
               {"epochs_completed", epoch_},
               {"data_wait_seconds_rank0", loader.wait_seconds()}};
    run_.write_summary(s);
    return exit_code;
  }

 private:
  // One optimizer step (or a skipped one). Returns this rank's losses.
  StepLosses train_step(const data::Batch& batch) {
    model_->train();
    const uint64_t seed = static_cast<uint64_t>(cfg_.train.seed);
    const double lr =
        lr_at(step_, total_steps_, cfg_.optim.warmup_steps, cfg_.optim.lr, cfg_.optim.min_lr);
    for (auto& group : optimizer_->param_groups())
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
    last_lr_ = lr;

    // Dropout draws from torch's global generator: reseed it per step for exact resumes.
    torch::manual_seed(data::hash_key(
        {seed, static_cast<uint64_t>(step_), static_cast<uint64_t>(comm_.rank()), 0}));
    FNVLP_CHECK(
        !(step_ == cfg_.train.inject_throw_step && comm_.rank() == cfg_.train.inject_throw_rank),
        "injected failure at step " << step_ << " (train.inject_throw_step)");
    auto aug_gen = step_generator(cfg_.train.seed, step_, comm_.rank(), 1);
    const torch::Tensor images = augment_.train(batch.images, aug_gen);
    const torch::Tensor ids = batch.tokens, mask = batch.attention_mask;

    // ITC against the global batch (embeddings all-gathered without gradient, exact gradient
    // restored through the cross-rank term, see loss/itc.hpp).
    const torch::Tensor image_tokens = model_->encode_image(images);
    const torch::Tensor text_hidden = model_->encode_text(ids, mask);
    const torch::Tensor img = model_->image_embed(image_tokens);
    const torch::Tensor txt = model_->text_embed(text_hidden);
    loss::ItcInputs in;
    in.img = img;
    in.txt = txt;
    in.img_all = allgather_rows(comm_, img, &in.offset);
    in.txt_all = allgather_rows(comm_, txt, nullptr);
    in.temp = model_->temp();
    in.image_id = batch.image_id;
    in.image_id_all = allgather_ids(batch.image_id);
    in.soft = loss::parse_soft_targets(cfg_.loss.soft_targets);
    const int64_t ramp =
        cfg_.loss.soft_warmup_steps < 0 ? steps_per_epoch_ : cfg_.loss.soft_warmup_steps;
    in.soft_weight =
        cfg_.loss.soft_weight *
        (ramp > 0 ? std::min(1.0, static_cast<double>(step_) / static_cast<double>(ramp)) : 1.0);
    in.cross_rank_grad = comm_.size() > 1;
    const loss::ItcResult itc = loss::itc_loss(in);

    // ITM with hard negatives from the local batch (the fusion encoder needs their tokens).
    const int64_t b = batch.size();
    auto itm_gen = step_generator(cfg_.train.seed, step_, comm_.rank(), 2);
    const auto local = torch::indexing::Slice(in.offset, in.offset + b);
    const auto negatives = loss::sample_itm_negatives(
        itc.sim_i2t.index({torch::indexing::Slice(), local}),
        itc.sim_t2i.index({torch::indexing::Slice(), local}), batch.image_id, {}, {},
        loss::parse_itm_negative_mode(cfg_.loss.itm_negatives), itm_gen);
    const loss::ItmPairs pairs = loss::itm_pairs(negatives);
    const torch::Tensor fused = model_->fuse(text_hidden.index_select(0, pairs.text_index),
                                             mask.index_select(0, pairs.text_index),
                                             image_tokens.index_select(0, pairs.image_index));
    const torch::Tensor itm = loss::itm_loss(model_->itm_logits(fused), pairs.labels);

    // MLM on a masked copy of the captions, conditioned on the image (skipped at weight 0, as in
    // retrieval fine-tuning: a third of the step's compute).
    torch::Tensor mlm = torch::zeros({});
    if (cfg_.loss.mlm_weight != 0) {
      auto mlm_gen = step_generator(cfg_.train.seed, step_, comm_.rank(), 3);
      const loss::MlmMasking m =
          loss::mask_tokens(ids, mask, cfg_.loss.mlm_probability, cfg_.model.vocab_size, kMaskId,
                            {kPadId, kClsId, kSepId}, mlm_gen);
      const torch::Tensor masked_fused =
          model_->fuse(model_->encode_text(m.input_ids, mask), mask, image_tokens);
      mlm = loss::mlm_loss(model_->mlm_logits(loss::gather_positions(masked_fused, m.positions)),
                           m.targets);
    }

    torch::Tensor total =
        cfg_.loss.itc_weight * itc.loss + cfg_.loss.itm_weight * itm + cfg_.loss.mlm_weight * mlm;
    StepLosses out{itc.loss.item<double>(), itm.item<double>(), mlm.item<double>(), 0};
    out.total = total.item<double>();
    if (step_ == cfg_.train.inject_nonfinite_step &&
        comm_.rank() == cfg_.train.inject_nonfinite_rank)
      out.total = std::nan("");
    // Every rank takes the same decision: a NaN on one rank would otherwise poison the
    // averaged gradient of all.
    const bool finite = all_finite(comm_, out.total);
    if (in.cross_rank_grad && finite) {
      loss::ItcGatheredGrads g = loss::itc_gathered_grads(itc);
      sum_rows(g.img_all);
      sum_rows(g.txt_all);
      total = total + cfg_.loss.itc_weight * loss::itc_cross_rank_term(in, g);
    }
    optimizer_->zero_grad();
    skips_.record(!finite, step_);
    if (!finite) {
      if (comm_.is_root())
        spdlog::warn("pretrain: non-finite loss at step {}: optimizer step skipped ({} in a row)",
                     step_, skips_.consecutive());
      return out;
    }
    total.backward();
    allreduce_gradients(comm_, params_);
    if (cfg_.optim.grad_clip > 0) torch::nn::utils::clip_grad_norm_(params_, cfg_.optim.grad_clip);
    optimizer_->step();
    return out;
  }

  torch::Tensor allgather_ids(const torch::Tensor& ids) {
    std::vector<int64_t> mine(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
    std::vector<int64_t> all = comm_.allgatherv(mine);
    return torch::tensor(all, torch::kLong);
  }

  void sum_rows(torch::Tensor& t) {
    t = t.contiguous();
    comm_.allreduce(t.data_ptr<float>(), static_cast<size_t>(t.numel()), MPI_SUM);
  }

  void log_progress(MetricsWriter& metrics, const StepLosses& sum, int64_t n,
                    std::chrono::steady_clock::time_point window_start,
                    std::chrono::steady_clock::time_point t0, const data::Prefetcher& loader) {
    std::vector<double> v = {sum.itc / n, sum.itm / n, sum.mlm / n, sum.total / n,
                             loader.wait_fraction()};
    comm_.allreduce_mean(v);
    const auto now = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(now - window_start).count();
    const double sps = dt > 0 ? n * cfg_.train.batch_size * comm_.size() / dt : 0;
    const double elapsed = std::chrono::duration<double>(now - t0).count();
    const double eta = dt > 0 ? (total_steps_ - step_) * dt / n : 0;
    last_metrics_ = {{"step", step_},        {"epoch", epoch_},
                     {"itc", v[0]},          {"itm", v[1]},
                     {"mlm", v[2]},          {"loss", v[3]},
                     {"lr", last_lr_},       {"temp", model_->temp().item<double>()},
                     {"samples_per_s", sps}, {"samples_per_s_per_rank", sps / comm_.size()},
                     {"data_wait", v[4]},    {"skipped_steps", skips_.total()},
                     {"elapsed_s", elapsed}};
    metrics.write(last_metrics_);
    if (comm_.is_root())
      spdlog::info(
          "step={} epoch={} itc={:.4f} itm={:.4f} mlm={:.4f} lr={:.3e} samples/s={:.1f} "
          "samples/s/rank={:.1f} eta={:.0f}s data_wait={:.1f}%",
          step_, epoch_, v[0], v[1], v[2], last_lr_, sps, sps / comm_.size(), eta, 100 * v[4]);
  }

  void finish_epoch(Watchdog& dog, MetricsWriter& metrics) {
    if (cfg_.train.export_embeddings) export_embeddings(dog, metrics);
    call_epoch_hook(dog, metrics);
  }

  void call_epoch_hook(Watchdog& dog, MetricsWriter& metrics) {
    if (!opt_.on_epoch_end) return;
    auto guard = dog.long_phase("epoch-end hook");
    json rec = opt_.on_epoch_end(*model_, epoch_, step_);
    model_->train();
    if (rec.is_object() && !rec.empty()) {
      rec["step"] = step_;
      rec["epoch"] = epoch_;
      metrics.write(rec);
    }
  }

  // Embeddings of every pair of `ds` (no augmentation): each rank encodes its block, every rank
  // receives them all in pair_id order (blocks are contiguous and in rank order).
  data::Embeddings embed_dataset(const data::PairDataset& ds) {
    torch::NoGradGuard no_grad;
    model_->eval();
    const data::BlockPartition part(ds.num_pairs(), comm_.size());
    const data::PairRange block = part.block(comm_.rank());
    std::vector<float> img, txt;
    std::vector<int64_t> pid, iid, lab;
    for (int64_t first = block.begin; first < block.end; first += cfg_.train.export_batch) {
      std::vector<int64_t> ids;
      for (int64_t p = first; p < std::min(block.end, first + cfg_.train.export_batch); ++p)
        ids.push_back(p);
      const data::Batch b = ds.read(ids);
      const auto x = augment_.eval(b.images);
      const auto ie = model_->image_embed(model_->encode_image(x)).contiguous();
      const auto te =
          model_->text_embed(model_->encode_text(b.tokens, b.attention_mask)).contiguous();
      img.insert(img.end(), ie.data_ptr<float>(), ie.data_ptr<float>() + ie.numel());
      txt.insert(txt.end(), te.data_ptr<float>(), te.data_ptr<float>() + te.numel());
      pid.insert(pid.end(), ids.begin(), ids.end());
      iid.insert(iid.end(), b.image_id.data_ptr<int64_t>(),
                 b.image_id.data_ptr<int64_t>() + b.size());
      const auto l = b.label.to(torch::kLong).contiguous();
      lab.insert(lab.end(), l.data_ptr<int64_t>(), l.data_ptr<int64_t>() + b.size());
    }
    model_->train();
    data::Embeddings e;
    e.epoch = epoch_;
    e.step = step_;
    e.dim = cfg_.model.embed_dim;
    e.image_emb = comm_.allgatherv(img);
    e.text_emb = comm_.allgatherv(txt);
    e.pair_id = comm_.allgatherv(pid);
    e.image_id = comm_.allgatherv(iid);
    const auto labels = comm_.allgatherv(lab);
    e.label.assign(labels.begin(), labels.end());
    return e;
  }

  void export_embeddings(Watchdog& dog, MetricsWriter& metrics) {
    auto guard = dog.long_phase("export embeddings");
    const data::Embeddings e = embed_dataset(dataset_);
    comm_.collective([&] {
      if (comm_.is_root()) data::write_embeddings(run_.embeddings_path(epoch_), e);
    });
    last_exported_epoch_ = epoch_;
    if (!val_) return;
    // Zero-shot ITC retrieval on held-out pairs: the learning signal a user watches.
    const data::Embeddings v = embed_dataset(*val_);
    const auto r = eval::retrieval_from_embeddings(v.image_emb, v.text_emb, v.dim, v.image_id);
    json rec = r.to_json("val_");
    rec["step"] = step_;
    rec["epoch"] = epoch_;
    rec["val_pairs"] = v.size();
    metrics.write(rec);
    if (comm_.is_root())
      spdlog::info(
          "val epoch={} txt_r1={:.1f} txt_r5={:.1f} img_r1={:.1f} img_r5={:.1f} r_mean={:.1f} "
          "({} pairs, ITC only)",
          epoch_, r.txt_r1, r.txt_r5, r.img_r1, r.img_r5, r.r_mean(), v.size());
    comm_.collective([&] {
      if (comm_.is_root())
        data::write_embeddings(run_.embeddings_dir() + "/val-" +
                                   fs::path(run_.embeddings_path(epoch_)).filename().string(),
                               v);
    });
  }

  void save_checkpoint(Watchdog& dog, const json& sampler_state) {
    auto guard = dog.long_phase("checkpoint", cfg_.checkpoint.save_timeout_s);
    const json state = {{"step", step_},
                        {"epoch", epoch_},
                        {"step_in_epoch", step_in_epoch_},
                        {"world_size", comm_.size()},
                        {"skipped_steps", skips_.total()},
                        {"last_exported_epoch", last_exported_epoch_}};
    const std::string sampler_text = sampler_state.dump();
    ckpt_.save(step_, [&](const std::string& dir) {
      write_file((fs::path(dir) / rank_file("sampler", comm_.rank())).string(), sampler_text);
      if (!comm_.is_root()) return;
      save_module(dir, "model", *model_);
      write_model_config(dir, cfg_.model);  // fnvlp-eval / --init read the architecture from here
      save_optimizer(dir, "optimizer", *optimizer_);
      write_file((fs::path(dir) / "trainer.json").string(), state.dump(2));
    });
  }

  bool maybe_resume(json* sampler_state) {
    if (opt_.resume.empty()) return false;
    std::optional<CheckpointInfo> info;
    if (opt_.resume == "auto")
      info = ckpt_.latest_committed();
    else
      info = ckpt_.open(opt_.resume);
    if (!info) {
      if (comm_.is_root())
        spdlog::info("pretrain: --resume auto found no committed checkpoint: fresh start");
      return false;
    }
    load_module(info->dir, "model", *model_);
    load_optimizer(info->dir, "optimizer", *optimizer_);
    const json state = json::parse(read_file((fs::path(info->dir) / "trainer.json").string()));
    step_ = state.at("step").get<int64_t>();
    epoch_ = state.at("epoch").get<int64_t>();
    last_exported_epoch_ = state.value("last_exported_epoch", int64_t{-1});
    // The sampler's cursor is per rank; with another rank count the current epoch restarts
    // from a fresh permutation (data order differs, model and optimizer state do not).
    const auto sampler_file = fs::path(info->dir) / rank_file("sampler", comm_.rank());
    if (info->world_size == comm_.size() && fs::exists(sampler_file)) {
      *sampler_state = json::parse(read_file(sampler_file.string()));
      step_in_epoch_ = state.at("step_in_epoch").get<int64_t>();
    }
    if (comm_.is_root())
      spdlog::info("pretrain: resumed from {} (step {}, epoch {}, written by {} ranks)", info->dir,
                   step_, epoch_, info->world_size);
    return true;
  }

  const Comm& comm_;
  PretrainConfig cfg_;
  std::unique_ptr<data::PairDataset> val_;
  PretrainOptions opt_;
  RunDir run_;
  data::PairDataset dataset_;
  data::BlockPartition partition_;
  data::UniformSampler sampler_;
  model::Albef model_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  data::Augmenter augment_;
  CheckpointManager ckpt_;
  SkipCounter skips_;
  int64_t steps_per_epoch_ = 0;
  int64_t total_steps_ = 0;
  int64_t step_ = 0;
  int64_t epoch_ = 0;
  int64_t step_in_epoch_ = 0;
  int64_t last_exported_epoch_ = -1;
  double last_lr_ = 0;
  json last_metrics_ = json::object();
};

}  // namespace

int run_pretraining(const Comm& comm, const PretrainConfig& cfg, const PretrainOptions& opt) {
  log::init(comm.rank(), comm.size(), opt.run_dir + "/logs");
  Trainer trainer(comm, cfg, opt);
  return trainer.run();
}

}  // namespace fnvlp::train
