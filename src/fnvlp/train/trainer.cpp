#include "fnvlp/train/trainer.hpp"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>

#include "fnvlp/comm/job_main.hpp"
#include "fnvlp/core/blas.hpp"
#include "fnvlp/core/fault.hpp"
#include "fnvlp/core/host.hpp"
#include "fnvlp/core/intraop.hpp"
#include "fnvlp/core/log.hpp"
#include "fnvlp/data/dataset.hpp"
#include "fnvlp/data/embeddings.hpp"
#include "fnvlp/data/shard_job.hpp"
#include "fnvlp/loss/itc.hpp"
#include "fnvlp/loss/itm.hpp"
#include "fnvlp/loss/mlm.hpp"
#include "fnvlp/model/albef.hpp"
#include "fnvlp/model/autocast.hpp"
#include "fnvlp/negatives/fn_rate.hpp"
#include "fnvlp/negatives/grouped_sampler.hpp"
#include "fnvlp/negatives/momentum_method.hpp"
#include "fnvlp/store/components.hpp"
#include "fnvlp/store/pretrained.hpp"
#include "fnvlp/store/run_dir.hpp"
#include "fnvlp/store/weights_io.hpp"
#include "fnvlp/train/batch_source.hpp"
#include "fnvlp/train/embed_export.hpp"
#include "fnvlp/train/failure.hpp"
#include "fnvlp/train/fused_adamw.hpp"
#include "fnvlp/train/grad_buckets.hpp"
#include "fnvlp/train/grad_sync.hpp"
#include "fnvlp/train/methods.hpp"
#include "fnvlp/train/schedule.hpp"
#include "fnvlp/train/signals.hpp"
#include "fnvlp/train/step_graphs.hpp"
#include "fnvlp/train/step_profiler.hpp"
#include "fnvlp/train/step_telemetry.hpp"
#include "fnvlp/train/trainer_impl.hpp"

namespace fnvlp::train {

namespace fs = std::filesystem;
using json = nlohmann::json;
using negatives::Method;
using negatives::StepContext;

namespace {

std::unique_ptr<torch::optim::AdamW> make_adamw(const OptimConfig& o,
                                                const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> decay, no_decay;  // weight decay on >= 2-d parameters only
  for (auto& p : params) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  auto options = [&](double wd) {
    return torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(wd);
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(options(o.weight_decay)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(options(0.0)));
  return std::make_unique<torch::optim::AdamW>(std::move(groups), options(o.weight_decay));
}

// The shards pass data.verify before libhdf5 opens any of them (PairDataset checks sizes).
const std::string& verified(const Comm& comm, const DataConfig& cfg, const std::string& dir) {
  if (cfg.verify == ShardVerify::kFull) data::verify_shard_checksums(comm, dir);
  return dir;
}

// The configuration's fault.* knobs as core/fault entries: the step has one injection mechanism,
// the sites of core/fault.hpp, whether a test sets FNVLP_FAULT or the configuration.
void configure_faults(const FaultConfig& f) {
  std::string entries;
  auto add = [&](const char* site, int64_t step, int64_t rank) {
    if (step < 0) return;
    entries += std::string(entries.empty() ? "" : ",") + site + ":" + std::to_string(step) + ":" +
               std::to_string(rank);
  };
  add("step.nan", f.nonfinite_step, f.nonfinite_rank);
  add("step.throw", f.throw_step, f.throw_rank);
  add("step.stop", f.stop_step, 0);
  add("step.export", f.export_step, 0);
  fault::set_configured(entries, "the configuration's fault.* settings");
}

}  // namespace

Trainer::Trainer(const Comm& comm, const PretrainConfig& cfg, const PretrainOptions& opt)
    : comm_(comm),
      cfg_(cfg),
      opt_(opt),
      run_(opt.run_dir, comm),
      dataset_(verified(comm, cfg.data, opt.data_dir)),
      partition_(dataset_.num_pairs(), comm.size()),
      augment_(cfg.augment, cfg.model.image_size),
      ckpt_(run_, comm, cfg.checkpoint),
      skips_(cfg.non_finite.max_consecutive),
      telemetry_(comm) {
  configure_faults(cfg_.fault);
  fault::point("startup.sleep");
  cfg_.model.validate();
  validate_methods(cfg_);
  if (!opt.val_dir.empty())
    val_ = std::make_unique<data::PairDataset>(verified(comm_, cfg_.data, opt.val_dir));
  FNVLP_CHECK(dataset_.max_len() <= cfg_.model.max_len,
              opt.data_dir << ": captions of " << dataset_.max_len()
                           << " tokens exceed model.max_len " << cfg_.model.max_len);
  torch::set_num_threads(static_cast<int>(cfg_.train.threads));
  set_blas_threads(static_cast<int>(cfg_.train.threads));
  if (const int cpus = usable_cpus(); cpus > 0 && cfg_.train.threads > cpus)
    spdlog::warn(
        "rank {}: train.threads is {} but this process may run on {} CPU(s) (its affinity mask, "
        "from the launcher's binding): the threads and the loader share them. Give each rank "
        "train.threads CPUs: srun --cpus-per-task, mpirun --bind-to none or --map-by slot:PE=N",
        comm_.rank(), cfg_.train.threads, cpus);
  if (const int team = intraop_threads(); team != cfg_.train.threads)
    spdlog::warn(
        "rank {}: fnvlp's own loops (augmentation, LayerNorm, GELU, attention, MLM loss, AdamW) "
        "run on {} thread(s), not train.threads {}: this build's OpenMP runtime is not the one "
        "torch::set_num_threads sets (CMakeLists.txt: FNVLP_INTRAOP_SOURCES)",
        comm_.rank(), team, cfg_.train.threads);
  torch::manual_seed(static_cast<uint64_t>(cfg_.train.seed));
  device_ = choose_device(comm_, cfg_.train.device);
  upload_ = BatchUpload(device_.device);
  check_precision(comm_, cfg_.train.precision, device_.device);
  configure_cuda_math(device_.device, cfg_.train.deterministic);
  model::set_attention_kernel(cfg_.train.attention);
  nccl_ = make_device_comm(comm_, device_, cfg_.comm.backend, cfg_.comm.timeout_s);
  set_device_collectives(comm_, nccl_.get());
  if (comm_.is_root())
    spdlog::info("pretrain: device {}, precision {}, device collectives {}", device_.describe(),
                 config::enum_to_name(cfg_.train.precision),
                 nccl_ ? "nccl" : (device_.device.is_cuda() ? "mpi (host copies)" : "mpi"));
  // Initialised on the host (the same draws as a CPU run), then moved.
  model_ = model::Albef(cfg_.model);
  if (!opt.init_checkpoint.empty()) {
    store::refuse_other_vocabulary(opt.init_checkpoint, dataset_.manifest().vocab_sha256,
                                   opt.data_dir);
    load_pretrained_weights(comm_, opt.init_checkpoint, *model_);
  }
  if (!opt.init_from.empty())
    store::import_initial_weights(
        comm_, opt.init_from, *model_,
        (std::filesystem::path(opt.run_dir) / "init_weights.json").string());
  broadcast_module(comm_, *model_);
  model_->to(device_.device);
  params_ = model_->parameters();
  grads_ = std::make_unique<FlatGradients>(params_);
  // auto (-1): buckets of 25 MiB on NCCL only; over MPI the overlap measured slower
  // (tests/bench/README.md, "Communication overlap").
  const double bucket_mb = cfg_.comm.bucket_mb >= 0 ? cfg_.comm.bucket_mb : (nccl_ ? 25.0 : 0.0);
  if (bucket_mb > 0 && GradBuckets::applies(comm_, grads_->buffer(), nccl_.get()))
    buckets_ = std::make_unique<GradBuckets>(comm_, *grads_, params_, bucket_mb,
                                             cfg_.comm.timeout_s, nccl_.get());
  if (comm_.is_root() && comm_.size() > 1)
    spdlog::info("pretrain: gradient all-reduce {}",
                 buckets_ ? fmt::format("in {} buckets of ~{} MiB during the backward",
                                        buckets_->ranges().size(), bucket_mb)
                          : std::string("after the backward (one all-reduce)"));
  optimizer_ = make_adamw(cfg_.optim, params_);
  env_ = std::make_unique<negatives::MethodEnv>(negatives::MethodEnv{
      comm_, model_, cfg_.model, partition_, augment_, dataset_.num_pairs(), cfg_.train.batch_size,
      cfg_.train.epochs, static_cast<uint64_t>(cfg_.train.seed), device_.device, bf16()});
  if (cfg_.negatives.method == negatives::NegativesKind::kOracle)
    require_labels(comm_, dataset_, partition_.block(comm_.rank()));
  methods_ = make_methods(cfg_, *env_);
  if (!opt.init_from.empty())  // ALBEF checkpoints carry the momentum model's own weights too
    for (auto& m : methods_)
      if (auto* mm = dynamic_cast<negatives::MomentumMethod*>(m.get()))
        mm->init_from(opt.init_from,
                      (std::filesystem::path(opt.run_dir) / "init_weights_momentum.json").string());
  for (auto& m : methods_)
    if (m->sampler()) sampler_ = m->sampler();
  if (!sampler_) {
    uniform_ = std::make_unique<data::UniformSampler>(
        partition_, cfg_.train.batch_size, static_cast<uint64_t>(cfg_.train.seed), comm_.rank());
    sampler_ = uniform_.get();
  }
  grouped_ = dynamic_cast<negatives::GroupedSampler*>(sampler_);
  // Every rank must run the same number of steps: blocks differ in size by at most one pair.
  uniform_steps_ = comm_.allreduce_min(grouped_ ? grouped_->uniform_batches_per_epoch()
                                                : sampler_->batches_per_epoch());
  grouped_steps_ =
      grouped_ ? comm_.allreduce_min(grouped_->grouped_batches_per_epoch()) : uniform_steps_;
  FNVLP_CHECK(uniform_steps_ > 0 && grouped_steps_ > 0,
              opt.data_dir << ": " << dataset_.num_pairs() << " pairs over " << comm_.size()
                           << " ranks give no full batch of " << cfg_.train.batch_size
                           << " (search spaces of " << cfg_.sampler.search_space << ")");
  if (cfg_.sampler.embeddings == SamplerEmbeddings::kCached && wants_epoch_embeddings())
    cache_ = EpochCache(partition_.block(comm_.rank()), cfg_.model.embed_dim);
  schedule_ranks_ = comm_.size();
  schedule_batch_ = cfg_.train.batch_size;
  schedule_steps_ = planned_steps(schedule_ranks_, schedule_batch_);
  total_steps_ = last_step();
  register_components();
  init_static_step();
}

Trainer::~Trainer() { set_device_collectives(comm_, nullptr); }

bool Trainer::resume_at_start(Watchdog& dog) {
  auto guard = dog.long_phase("resume", cfg_.watchdog.startup_timeout_s);
  uint64_t methods_bytes = 0;
  for (auto& m : methods_) methods_bytes += m->state_bytes();
  if (cache_.enabled()) methods_bytes += cache_.state_bytes(dataset_.num_pairs());
  // Room for two checkpoints (model + AdamW's two moments) before any step is spent.
  ckpt_.check_free_space(3 * module_bytes(*model_) + optimizer_state_bytes(*optimizer_) +
                         methods_bytes);
  const bool resumed = maybe_resume();
  // A checkpoint written on another device (CPU <-> CUDA) loads where it was saved.
  if (resumed) {
    model_->to(device_.device);
    for (auto& kv : optimizer_->state()) {
      auto& st = static_cast<torch::optim::AdamWParamState&>(*kv.second);
      st.exp_avg(st.exp_avg().to(device_.device));
      st.exp_avg_sq(st.exp_avg_sq().to(device_.device));
    }
  }
  return resumed;
}

void Trainer::install_last_words(Watchdog& dog) {
  // From the watchdog's thread while the main thread is stuck: only what it cannot be changing.
  dog.set_last_words([this](const std::string& why, int64_t step) {
    RunSummary s;
    s.status = RunStatus::kFailed;
    s.exit_code = kExitWatchdog;
    s.steps = std::max<int64_t>(step, 0);
    s.error = why;
    run_.write_summary(s, true);
  });
  // The NCCL watch ends the job from its thread too (a collective failed or timed out).
  if (nccl_)
    nccl_->set_last_words([this](const std::string& why) {
      RunSummary s;
      s.status = RunStatus::kFailed;
      s.exit_code = 1;
      s.steps = std::max<int64_t>(step_, 0);
      s.error = why;
      run_.write_summary(s, true);
    });
}

void Trainer::start_loader(BatchSource& loader, bool resumed) {
  // The step's augmentation runs on the prefetch thread, beside the reads (the seed is the
  // batch's step, so what it draws does not depend on where it runs).
  bool second_view = false;
  for (const auto& m : methods_) second_view = second_view || m->wants_second_view();
  loader.set_prepare([this, second_view](data::Batch& b, int64_t step) {
    auto gen = negatives::step_generator(seed(), step, comm_.rank(), negatives::kAugmentStream);
    b.prepared = augment_.train(b.images, gen);
    if (second_view) {
      auto gen2 = negatives::step_generator(seed(), step, comm_.rank(), negatives::kTclViewStream);
      b.prepared2 = augment_.train(b.images, gen2);
    }
    b.prepared_for = step;
    upload_.start(b);  // on a GPU: pinned, and its copy started while earlier steps compute
  });
  if (resumed && !sampler_state_.is_null())
    loader.resume(sampler_state_, step_);
  else
    loader.start_epoch(epoch_, step_);
}

void Trainer::step_once(const data::Batch& batch, StepProfiler& profiler) {
  profiler.before_step(step_);
  const CommTraffic before = traffic();
  if (static_)
    static_train_step(batch);  // its losses reach the telemetry at the next log line
  else
    telemetry_.add(train_step(batch), batch.size() * comm_.size());
  step_traffic_ += traffic() - before;
  profiler.after_step(step_);
  ++step_;
  ++step_in_epoch_;
  samples_seen_ += cfg_.train.batch_size * comm_.size();
}

bool Trainer::after_step(Watchdog& dog, MetricsWriter& metrics, const BatchSource& loader) {
  if (step_ % cfg_.train.log_every == 0 || step_ == total_steps_) log_progress(metrics, loader);
  sampler_state_ = loader.state();
  if (fault::point("step.stop", step_)) StopRequest::raise_for_test(SIGUSR1);
  if (agree_stop(comm_)) {
    save_checkpoint(dog);
    if (comm_.is_root())
      spdlog::warn(
          "pretrain: stop requested (signal {}), checkpointed at step {}; exiting "
          "with {} for requeue",
          StopRequest::signal_number(), step_, kExitRequeue);
    return true;
  }
  if (fault::point("step.export", step_)) StopRequest::raise_for_test(SIGUSR2);
  if (agree_export(comm_)) export_on_demand(dog);
  if (cfg_.checkpoint.every_steps > 0 && step_ % cfg_.checkpoint.every_steps == 0 &&
      step_ < total_steps_)
    save_checkpoint(dog);
  return false;
}

RunStatus Trainer::train_loop(Watchdog& dog, MetricsWriter& metrics, BatchSource& loader) {
  StepProfiler profiler(
      cfg_.train.profile_start, cfg_.train.profile_steps,
      opt_.run_dir + "/profile/trace-rank" + std::to_string(comm_.rank()) + ".json", comm_.rank());
  telemetry_.start(total_steps_);
  traffic_step_ = step_;
  clock_.last = std::chrono::steady_clock::now();
  while (step_ < total_steps_) {
    clock_.lap(StepClock::kOther);
    dog.beat(step_, "data");
    // Epochs end on an agreed step count, never on one rank's loader running dry: blocks may
    // differ by a pair, and a rank alone at an epoch end would deadlock the collectives.
    if (step_in_epoch_ == epoch_steps(epoch_)) {
      loader.halt();
      finish_epoch(dog, metrics);
      loader.start_epoch(++epoch_, step_);
      step_in_epoch_ = 0;
      continue;
    }
    data::Batch batch;
    FNVLP_CHECK(loader.next(batch), "rank " << comm_.rank() << ": loader ended epoch " << epoch_
                                            << " after " << step_in_epoch_ << " of "
                                            << epoch_steps(epoch_) << " steps");
    for (auto& m : methods_) m->on_batch(loader.state());
    clock_.lap(StepClock::kBatch);
    dog.beat(step_, "step");
    step_once(batch, profiler);
    if (after_step(dog, metrics, loader)) return RunStatus::kPreempted;
  }
  return RunStatus::kCompleted;
}

int Trainer::run(Watchdog& dog) {
  const bool resumed = resume_at_start(dog);
  MetricsWriter metrics(run_.metrics_path(), comm_,
                        resumed ? std::optional<int64_t>(step_) : std::nullopt);
  run_.write_config(opt_.config_yaml);
  install_last_words(dog);
  if (epoch_ > 0) restore_epoch_embeddings();
  if (resplit_from_ > 0) continue_on_new_ranks();
  total_steps_ = last_step();
  bool synchronous = false;
  for (auto& m : methods_) synchronous = synchronous || m->synchronous_sampler();
  BatchSource loader(dataset_, *sampler_, static_cast<int>(cfg_.train.prefetch), synchronous);
  start_loader(loader, resumed);
  if (comm_.is_root())
    spdlog::info(
        "pretrain: {} pairs, {} ranks x batch {}, {} steps/epoch, {} steps, model {:.1f} "
        "M params",
        dataset_.num_pairs(), comm_.size(), cfg_.train.batch_size, uniform_steps_, total_steps_,
        model_->num_parameters() / 1e6);
  const RunStatus status = train_loop(dog, metrics, loader);
  if (status == RunStatus::kCompleted) {
    if (last_exported_epoch_ < epoch_ && cfg_.train.export_embeddings)
      export_embeddings(dog, metrics);
    validate(dog, metrics);
    call_epoch_hook(dog, metrics);
    sampler_state_ = loader.state();
    save_checkpoint(dog);
  }
  if (static_) flush_static_losses();
  dog.stop();
  metrics.close();
  RunSummary s = telemetry_.summary(status, step_, skips_.total());
  s.extra["epochs_completed"] = epoch_;
  if (!data_change_.is_null()) s.extra["resumed_on_changed_data"] = data_change_;
  s.extra["data_wait_seconds_rank0"] = loader.wait_seconds();
  if (graphs_ && graphs_->enabled()) {  // this process's steps: a resumed run counts anew
    s.extra["cuda_graphs"] = {{"captured", graphs_->graphs()},
                              {"replays", graphs_->replays()},
                              {"warmup_steps", graphs_->eager()}};
    spdlog::info("cuda_graphs: {} graph(s) captured, {} steps replayed, {} warm-up steps eager",
                 graphs_->graphs(), graphs_->replays(), graphs_->eager());
  }
  run_.write_summary(s);
  return s.exit_code;
}

CommTraffic Trainer::traffic() const {
  CommTraffic t = comm_.traffic();
  t += replayed_traffic_;
  t += captured_host_collectives_traffic();
  if (nccl_) t += nccl_->traffic();
  if (buckets_) t.allreduce += buckets_->mpi_bytes();
  return t;
}

void Trainer::log_progress(MetricsWriter& metrics, const BatchSource& loader) {
  if (static_) flush_static_losses();
  json m = telemetry_.window_metrics(step_, epoch_, last_lr_, model_->temp().item<double>(),
                                     loader.wait_fraction(), skips_.total(), clock_);
  m["samples"] = samples_seen_;  // what the schedule counts: continuous across rank counts
  // Payload bytes per training step through this rank's communicators since the last line (the
  // steps' own collectives: not the logging, epoch-end or checkpoint ones): bench/comm_model.py
  // compares them with its model.
  const auto steps = static_cast<double>(std::max<int64_t>(1, step_ - traffic_step_));
  m["comm_bytes_per_step"] = {{"allreduce", static_cast<double>(step_traffic_.allreduce) / steps},
                              {"allgather", static_cast<double>(step_traffic_.allgather) / steps},
                              {"other", static_cast<double>(step_traffic_.other) / steps}};
  step_traffic_ = {};
  traffic_step_ = step_;
  for (auto& method : methods_) method->telemetry(m);
  telemetry_.finish_window(metrics, m);
}

void Trainer::write_failure_summary(int exit_code, const std::string& why, bool agreed,
                                    const json& extra) const {
  RunSummary s = telemetry_.summary(RunStatus::kFailed, step_, skips_.total());
  s.exit_code = exit_code;
  s.error = why;
  s.extra.update(extra);
  s.extra["epochs_completed"] = epoch_;
  run_.write_summary(s, !agreed);
}

int run_pretraining(const Comm& comm, const PretrainConfig& cfg, const PretrainOptions& opt) {
  log::init(comm.rank(), comm.size(), opt.run_dir + "/logs");
  // Before anything slow: SIGUSR1/SIGTERM from the launcher during start-up are a stop request
  // (honoured after the first step), not the signals' default death of the rank.
  StopRequest::install();
  // Start-up (shard hashing, opening, model construction) under the watchdog too.
  Watchdog dog(comm, cfg.watchdog.timeout_s);
  // A run that fails once its run directory exists says so in summary.json, also while the
  // trainer is being built (unreadable or corrupt shards, a refused configuration).
  auto failed = [&](const std::exception& e, const Trainer* t) {
    const bool agreed = dynamic_cast<const CollectiveError*>(&e) != nullptr ||
                        dynamic_cast<const UsageError*>(&e) != nullptr;
    const int code = dynamic_cast<const UsageError*>(&e) != nullptr ? kExitUsage : 1;
    // The phase; out of memory: the memory, the batch size and a hint (train/failure.hpp).
    const FailureReport why =
        describe_failure(e, comm.rank(), dog, cfg.train.batch_size, cfg.train.precision);
    try {
      if (t) {
        t->write_failure_summary(code, why.error, agreed, why.extra);
      } else {
        RunSummary s;
        s.status = RunStatus::kFailed;
        s.exit_code = code;
        s.error = why.error;
        s.extra = why.extra;
        s.extra["phase"] = "startup";
        store::write_summary_at(opt.run_dir, comm, s, !agreed);
      }
    } catch (const std::exception& w) {
      spdlog::error("pretrain: summary.json of the failed run not written: {}", w.what());
    }
  };
  std::unique_ptr<Trainer> trainer;
  try {
    auto guard = dog.long_phase("startup", cfg.watchdog.startup_timeout_s);
    trainer = std::make_unique<Trainer>(comm, cfg, opt);
  } catch (const std::exception& e) {
    failed(e, nullptr);
    throw;
  }
  try {
    return trainer->run(dog);
  } catch (const std::exception& e) {
    dog.stop();  // its last words use the trainer, which unwinding destroys before the watchdog
    failed(e, trainer.get());
    throw;
  }
}

}  // namespace fnvlp::train
