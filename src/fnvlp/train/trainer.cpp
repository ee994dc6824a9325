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

#include "fnvlp/comm/flat_gradients.hpp"
#include "fnvlp/comm/job_main.hpp"
#include "fnvlp/comm/tensors.hpp"
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

// The configuration as the run uses it: checked (the model, the methods' combination) and its
// fault.* knobs installed as core/fault entries, the step's one injection mechanism whether a
// test sets FNVLP_FAULT or the configuration.
PretrainConfig startup_config(const PretrainConfig& cfg) {
  std::string entries;
  auto add = [&](const char* site, int64_t step, int64_t rank) {
    if (step < 0) return;
    entries += std::string(entries.empty() ? "" : ",") + site + ":" + std::to_string(step) + ":" +
               std::to_string(rank);
  };
  const FaultConfig& f = cfg.fault;
  add("step.nan", f.nonfinite_step, f.nonfinite_rank);
  add("step.throw", f.throw_step, f.throw_rank);
  add("step.stop", f.stop_step, 0);
  add("step.export", f.export_step, 0);
  fault::set_configured(entries, "the configuration's fault.* settings");
  fault::point("startup.sleep");
  cfg.model.validate();
  validate_methods(cfg);
  return cfg;
}

// The model of model.*, initialised on the host from train.seed (the same draws as a CPU run),
// then --init's checkpoint or --init-from's weights, rank 0's weights on every rank, and moved to
// the device.
model::Albef build_model(const Comm& comm, const PretrainConfig& cfg, const PretrainOptions& opt,
                         const data::PairDataset& train, torch::Device device) {
  torch::manual_seed(static_cast<uint64_t>(cfg.train.seed));
  model::Albef model(cfg.model);
  if (!opt.init_checkpoint.empty()) {
    store::refuse_other_vocabulary(opt.init_checkpoint, train.manifest().vocab_sha256,
                                   opt.data_dir);
    load_pretrained_weights(comm, opt.init_checkpoint, *model);
  }
  if (!opt.init_from.empty())
    store::import_initial_weights(comm, opt.init_from, *model,
                                  (fs::path(opt.run_dir) / "init_weights.json").string());
  broadcast_module(comm, *model);
  model->to(device);
  return model;
}

}  // namespace

// Each part is built from its own configuration section, in the order they depend on each other.
Trainer::Trainer(const Comm& comm, const PretrainConfig& cfg, const PretrainOptions& opt)
    : comm_(comm),
      cfg_(startup_config(cfg)),
      opt_(opt),
      run_(opt.run_dir, comm),
      data_(comm, cfg_.data, cfg_.augment, cfg_.model, opt.data_dir, opt.val_dir),
      ckpt_(run_, comm, cfg_.checkpoint),
      skips_(cfg_.non_finite.max_consecutive),
      devices_(comm, cfg_.train, cfg_.comm),
      telemetry_(comm),
      model_(build_model(comm, cfg_, opt, data_.train, devices_.device())),
      optim_(comm, model_->parameters(), cfg_.optim, cfg_.comm, devices_.nccl.get()),
      methods_(comm, cfg_, opt, model_, data_, devices_.device()) {
  if (cfg_.sampler.embeddings == SamplerEmbeddings::kCached && methods_.wants_epoch_embeddings())
    cache_ = EpochCache(data_.block(), cfg_.model.embed_dim);
  schedule_ranks_ = comm_.size();
  schedule_batch_ = cfg_.train.batch_size;
  schedule_steps_ = planned_steps(schedule_ranks_, schedule_batch_);
  total_steps_ = last_step();
  register_components();
  init_static_step();
}

Trainer::~Trainer() = default;

bool Trainer::resume_at_start(Watchdog& dog) {
  auto guard = dog.long_phase("resume", cfg_.watchdog.startup_timeout_s);
  uint64_t methods_bytes = 0;
  for (auto& m : methods_) methods_bytes += m->state_bytes();
  if (cache_.enabled()) methods_bytes += cache_.state_bytes(data_.train.num_pairs());
  // Room for two checkpoints (model + AdamW's two moments) before any step is spent.
  ckpt_.check_free_space(3 * module_bytes(*model_) + optimizer_state_bytes(*optim_.adamw) +
                         methods_bytes);
  const bool resumed = maybe_resume();
  // A checkpoint written on another device (CPU <-> CUDA) loads where it was saved.
  if (resumed) {
    model_->to(devices_.device());
    for (auto& kv : optim_.adamw->state()) {
      auto& st = static_cast<torch::optim::AdamWParamState&>(*kv.second);
      st.exp_avg(st.exp_avg().to(devices_.device()));
      st.exp_avg_sq(st.exp_avg_sq().to(devices_.device()));
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
  if (devices_.nccl)
    devices_.nccl->set_last_words([this](const std::string& why) {
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
  const bool second_view = methods_.any(&Method::wants_second_view);
  loader.set_prepare([this, second_view](data::Batch& b, int64_t step) {
    auto gen = negatives::step_generator(seed(), step, comm_.rank(), negatives::kAugmentStream);
    const data::BatchImages images(b);  // jpeg shards: decoded once for both views
    b.prepared = data_.augment.train(images, gen);
    if (second_view) {
      auto gen2 = negatives::step_generator(seed(), step, comm_.rank(), negatives::kTclViewStream);
      b.prepared2 = data_.augment.train(images, gen2);
    }
    b.prepared_for = step;
    devices_.upload.start(b);  // on a GPU: pinned, and its copy started while earlier steps compute
  });
  if (resumed && !sampler_state_.is_null())
    loader.resume(sampler_state_, step_);
  else
    loader.start_epoch(epoch_, step_);
}

void Trainer::step_once(const data::Batch& batch, StepProfiler& profiler) {
  profiler.before_step(step_);
  const CommTraffic before = traffic();
  if (static_.on)
    static_train_step(batch);  // its losses reach the telemetry at the next log line
  else
    telemetry_.add(train_step(batch), batch.size() * comm_.size());
  step_traffic_ += traffic() - before;
  profiler.after_step(step_);
  ++step_;
  ++step_in_epoch_;
  samples_seen_ += cfg_.train.batch_size * comm_.size();
}

bool Trainer::between_steps(Watchdog& dog, MetricsWriter& metrics, const BatchSource& loader) {
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
    if (between_steps(dog, metrics, loader)) return RunStatus::kPreempted;
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
  const bool synchronous = methods_.any(&Method::synchronous_sampler);
  BatchSource loader(data_.train, *methods_.sampler, static_cast<int>(cfg_.train.prefetch),
                     synchronous);
  start_loader(loader, resumed);
  if (comm_.is_root())
    spdlog::info(
        "pretrain: {} pairs, {} ranks x batch {}, {} steps/epoch, {} steps, model {:.1f} "
        "M params",
        data_.train.num_pairs(), comm_.size(), cfg_.train.batch_size, methods_.uniform_steps,
        total_steps_, model_->num_parameters() / 1e6);
  const RunStatus status = train_loop(dog, metrics, loader);
  if (status == RunStatus::kCompleted) {
    if (last_exported_epoch_ < epoch_ && cfg_.train.export_embeddings)
      export_embeddings(dog, metrics);
    validate_retrieval(dog, metrics);
    call_epoch_hook(dog, metrics);
    sampler_state_ = loader.state();
    save_checkpoint(dog);
  }
  if (static_.on) flush_static_losses();
  dog.stop();
  metrics.close();
  RunSummary s = telemetry_.summary(status, step_, skips_.total());
  s.extra["epochs_completed"] = epoch_;
  if (!data_change_.is_null()) s.extra["resumed_on_changed_data"] = data_change_;
  s.extra["data_wait_seconds_rank0"] = loader.wait_seconds();
  if (static_.graphs &&
      static_.graphs->enabled()) {  // this process's steps: a resumed run counts anew
    s.extra["cuda_graphs"] = {{"captured", static_.graphs->graphs()},
                              {"replays", static_.graphs->replays()},
                              {"warmup_steps", static_.graphs->eager()}};
    spdlog::info("cuda_graphs: {} graph(s) captured, {} steps replayed, {} warm-up steps eager",
                 static_.graphs->graphs(), static_.graphs->replays(), static_.graphs->eager());
  }
  run_.write_summary(s);
  return s.exit_code;
}

CommTraffic Trainer::traffic() const {
  CommTraffic t = comm_.traffic();
  t += static_.replayed_traffic;
  t += captured_host_collectives_traffic();
  if (devices_.nccl) t += devices_.nccl->traffic();
  if (optim_.buckets) t.allreduce += optim_.buckets->mpi_bytes();
  return t;
}

void Trainer::log_progress(MetricsWriter& metrics, const BatchSource& loader) {
  if (static_.on) flush_static_losses();
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
