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
#include "fnvlp/core/log.hpp"
#include "fnvlp/data/dataset.hpp"
#include "fnvlp/data/embeddings.hpp"
#include "fnvlp/data/shard_job.hpp"
#include "fnvlp/loss/itc.hpp"
#include "fnvlp/loss/itm.hpp"
#include "fnvlp/loss/mlm.hpp"
#include "fnvlp/model/albef.hpp"
#include "fnvlp/negatives/fn_rate.hpp"
#include "fnvlp/negatives/grouped_sampler.hpp"
#include "fnvlp/store/components.hpp"
#include "fnvlp/store/pretrained.hpp"
#include "fnvlp/store/run_dir.hpp"
#include "fnvlp/train/batch_source.hpp"
#include "fnvlp/train/embed_export.hpp"
#include "fnvlp/train/fused_adamw.hpp"
#include "fnvlp/train/grad_sync.hpp"
#include "fnvlp/train/methods.hpp"
#include "fnvlp/train/schedule.hpp"
#include "fnvlp/train/signals.hpp"
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
  torch::manual_seed(static_cast<uint64_t>(cfg_.train.seed));
  device_ = choose_device(comm_, cfg_.train.device);
  upload_ = BatchUpload(device_.device);
  check_precision(comm_, cfg_.train.precision, device_.device);
  configure_cuda_math(device_.device, cfg_.train.deterministic);
  nccl_ = make_device_comm(comm_, device_, cfg_.comm.backend, cfg_.comm.timeout_s);
  set_device_collectives(comm_, nccl_.get());
  if (comm_.is_root())
    spdlog::info("pretrain: device {}, precision {}, device collectives {}", device_.describe(),
                 config::enum_to_name(cfg_.train.precision),
                 nccl_ ? "nccl" : (device_.device.is_cuda() ? "mpi (host copies)" : "mpi"));
  // Initialised on the host (the same draws as a CPU run), then moved.
  model_ = model::Albef(cfg_.model);
  if (!opt.init_checkpoint.empty()) load_pretrained_weights(comm_, opt.init_checkpoint, *model_);
  broadcast_module(comm_, *model_);
  model_->to(device_.device);
  params_ = model_->parameters();
  grads_ = std::make_unique<FlatGradients>(params_);
  optimizer_ = make_adamw(cfg_.optim, params_);
  env_ = std::make_unique<negatives::MethodEnv>(negatives::MethodEnv{
      comm_, model_, cfg_.model, partition_, augment_, dataset_.num_pairs(), cfg_.train.batch_size,
      cfg_.train.epochs, static_cast<uint64_t>(cfg_.train.seed), device_.device, bf16()});
  methods_ = make_methods(cfg_, *env_);
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
}

Trainer::~Trainer() { set_device_collectives(comm_, nullptr); }

int Trainer::run(Watchdog& dog) {
  bool resumed = false;
  {
    auto guard = dog.long_phase("resume", cfg_.watchdog.startup_timeout_s);
    uint64_t methods_bytes = 0;
    for (auto& m : methods_) methods_bytes += m->state_bytes();
    methods_bytes += cache_.state_bytes();
    // Room for two checkpoints (model + AdamW's two moments) before any step is spent.
    ckpt_.check_free_space(3 * module_bytes(*model_) + optimizer_state_bytes(*optimizer_) +
                           methods_bytes);
    resumed = maybe_resume();
    // A checkpoint written on another device (CPU <-> CUDA) loads where it was saved.
    if (resumed) {
      model_->to(device_.device);
      for (auto& kv : optimizer_->state()) {
        auto& st = static_cast<torch::optim::AdamWParamState&>(*kv.second);
        st.exp_avg(st.exp_avg().to(device_.device));
        st.exp_avg_sq(st.exp_avg_sq().to(device_.device));
      }
    }
  }
  MetricsWriter metrics(run_.metrics_path(), comm_,
                        resumed ? std::optional<int64_t>(step_) : std::nullopt);
  run_.write_config(opt_.config_yaml);
  // From the watchdog's thread while the main thread is stuck: only what it cannot be changing.
  dog.set_last_words([this](const std::string& why, int64_t step) {
    RunSummary s;
    s.status = RunStatus::kFailed;
    s.exit_code = kExitWatchdog;
    s.steps = std::max<int64_t>(step, 0);
    s.error = why;
    run_.write_summary(s, true);
  });
  if (epoch_ > 0) restore_epoch_embeddings();
  if (resplit_from_ > 0) continue_on_new_ranks();
  total_steps_ = last_step();
  bool synchronous = false;
  for (auto& m : methods_) synchronous = synchronous || m->synchronous_sampler();
  BatchSource loader(dataset_, *sampler_, static_cast<int>(cfg_.train.prefetch), synchronous);
  // The step's augmentation runs on the prefetch thread, beside the reads (the seed is the
  // batch's step, so what it draws does not depend on where it runs).
  loader.set_prepare([this](data::Batch& b, int64_t step) {
    auto gen = negatives::step_generator(seed(), step, comm_.rank(), negatives::kAugmentStream);
    b.prepared = augment_.train(b.images, gen);
    b.prepared_for = step;
    upload_.start(b);  // on a GPU: pinned, and its copy started while earlier steps compute
  });
  if (resumed && !sampler_state_.is_null())
    loader.resume(sampler_state_, step_);
  else
    loader.start_epoch(epoch_, step_);
  if (comm_.is_root())
    spdlog::info(
        "pretrain: {} pairs, {} ranks x batch {}, {} steps/epoch, {} steps, model {:.1f} "
        "M params",
        dataset_.num_pairs(), comm_.size(), cfg_.train.batch_size, uniform_steps_, total_steps_,
        model_->num_parameters() / 1e6);
  RunStatus status = RunStatus::kCompleted;
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
    profiler.before_step(step_);
    const CommTraffic before = traffic();
    const StepLosses losses = train_step(batch);
    step_traffic_ += traffic() - before;
    telemetry_.add(losses, batch.size() * comm_.size());
    profiler.after_step(step_);
    ++step_;
    ++step_in_epoch_;
    samples_seen_ += cfg_.train.batch_size * comm_.size();
    if (step_ % cfg_.train.log_every == 0 || step_ == total_steps_) log_progress(metrics, loader);
    sampler_state_ = loader.state();
    if (step_ == cfg_.fault.stop_step && comm_.is_root()) StopRequest::raise_for_test(SIGUSR1);
    if (agree_stop(comm_)) {
      save_checkpoint(dog);
      status = RunStatus::kPreempted;
      if (comm_.is_root())
        spdlog::warn(
            "pretrain: stop requested (signal {}), checkpointed at step {}; exiting "
            "with {} for requeue",
            StopRequest::signal_number(), step_, kExitRequeue);
      break;
    }
    if (step_ == cfg_.fault.export_step && comm_.is_root()) StopRequest::raise_for_test(SIGUSR2);
    if (agree_export(comm_)) export_on_demand(dog);
    if (cfg_.checkpoint.every_steps > 0 && step_ % cfg_.checkpoint.every_steps == 0 &&
        step_ < total_steps_)
      save_checkpoint(dog);
  }
  if (status == RunStatus::kCompleted) {
    if (last_exported_epoch_ < epoch_ && cfg_.train.export_embeddings)
      export_embeddings(dog, metrics);
    validate(dog, metrics);
    call_epoch_hook(dog, metrics);
    sampler_state_ = loader.state();
    save_checkpoint(dog);
  }
  dog.stop();
  metrics.close();
  RunSummary s = telemetry_.summary(status, step_, skips_.total());
  s.extra["epochs_completed"] = epoch_;
  s.extra["data_wait_seconds_rank0"] = loader.wait_seconds();
  run_.write_summary(s);
  return s.exit_code;
}

// One optimizer step (or a skipped one), read top to bottom. Returns this rank's losses.
StepLosses Trainer::train_step(const data::Batch& host_batch) {
  begin_step(host_batch);
  const data::Batch batch = upload_.finish(host_batch);
  StepContext s{batch, host_batch, clock_, step_, epoch_, total_steps_};
  for (auto& m : methods_) s.want_plain_mlm = s.want_plain_mlm || m->needs_plain_mlm();
  s.images = batch.prepared;  // augmented for this step by the loader (run())
  clock_.lap(StepClock::kBatch);

  const loss::ItcInputs in = itc_inputs(s);  // ITC against the global batch, methods applied
  const loss::ItcResult itc = loss::itc_loss(in);
  std::vector<torch::Tensor> image_keys;
  {
    AutocastScope autocast(bf16());
    image_keys = model_->image_keys(s.image_tokens);
  }
  const torch::Tensor itm = itm_loss(s, in, itc, image_keys);  // ITM with hard negatives
  const torch::Tensor mlm = mlm_loss(s, image_keys);           // MLM on masked captions
  torch::Tensor total =
      cfg_.loss.itc_weight * itc.loss + cfg_.loss.itm_weight * itm + cfg_.loss.mlm_weight * mlm;
  std::vector<negatives::NamedLoss> extra;  // the methods' own losses (TCL)
  for (auto& m : methods_) m->extra_losses(s, extra);
  for (const auto& e : extra) total = total + e.weight * e.value;
  // Every loss in one copy to the host: each read of a GPU scalar waits for the queued work.
  std::vector<torch::Tensor> parts = {itc.loss, itm, mlm, total};
  for (const auto& e : extra) parts.push_back(e.value);
  for (auto& p : parts) p = p.detach().to(torch::kDouble).reshape({});
  const torch::Tensor values = torch::stack(parts).to(torch::kCPU);
  const double* v = values.data_ptr<double>();
  StepLosses out{v[0], v[1], v[2], v[3], {}};
  for (size_t i = 0; i < extra.size(); ++i) out.extra.emplace_back(extra[i].name, v[4 + i]);
  clock_.lap(StepClock::kForward);
  if (step_ == cfg_.fault.nonfinite_step && comm_.rank() == cfg_.fault.nonfinite_rank)
    out.total = std::nan("");
  if (fault::point("step.nan", step_)) out.total = std::nan("");
  // Every rank takes the same decision: a NaN on one rank would otherwise poison the
  // averaged gradient of all.
  const bool finite = all_finite(comm_, out.total);
  if (in.cross_rank_grad && finite) {  // the exact data-parallel ITC gradient (loss/itc.hpp)
    loss::ItcGatheredGrads g = loss::itc_gathered_grads(itc);
    sum_rows(g.img_all);
    sum_rows(g.txt_all);
    total = total + cfg_.loss.itc_weight * loss::itc_cross_rank_term(in, g);
  }
  grads_->zero();
  clock_.lap(StepClock::kComm);
  skips_.record(!finite, step_);
  if (!finite) {
    for (auto& m : methods_) m->skipped_step(s);  // GloFND's λ moved in itc_inputs: undone
    if (comm_.is_root())
      spdlog::warn("pretrain: non-finite loss at step {}: optimizer step skipped ({} in a row)",
                   step_, skips_.consecutive());
    return out;
  }
  total.backward();
  clock_.lap(StepClock::kBackward);
  grads_->allreduce_mean(comm_);
  clock_.lap(StepClock::kComm);
  // Clipping's scale applied inside the AdamW pass (no pass of its own over the gradients).
  adamw_step(*optimizer_, *grads_, cfg_.optim.grad_clip);
  clock_.lap(StepClock::kOptimizer);
  for (auto& m : methods_) m->after_step(s);  // momentum EMA, FALCON's policy update
  clock_.lap(StepClock::kFalcon);
  return out;
}

// The step's learning rate, dropout seed and fault injection points.
void Trainer::begin_step(const data::Batch& batch) {
  model_->train();
  last_lr_ = lr_at(schedule_step(samples_seen_, schedule_ranks_ * schedule_batch_),
                   static_cast<double>(schedule_steps_), cfg_.optim.warmup_steps, cfg_.optim.lr,
                   cfg_.optim.min_lr);
  for (auto& group : optimizer_->param_groups())
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(last_lr_);
  negatives::seed_dropout(seed(), step_, comm_.rank());  // dropout draws: exact resumes
  FNVLP_CHECK(!(step_ == cfg_.fault.throw_step && comm_.rank() == cfg_.fault.throw_rank),
              "injected failure at step " << step_ << " (fault.throw_step)");
  fault::at_step(step_);  // FNVLP_FAULT step.kill / step.sleep / step.throw (core/fault.hpp)
  FNVLP_CHECK(batch.prepared.defined() && batch.prepared_for == step_,
              "batch augmented for step " << batch.prepared_for << " arrived at step " << step_);
}

// The local embeddings, the ITC inputs against the global batch (embeddings all-gathered
// without gradient, the exact gradient restored through the cross-rank term) and the methods'
// masks, weights or keys.
loss::ItcInputs Trainer::itc_inputs(StepContext& s) {
  const data::Batch& batch = s.batch;
  {
    AutocastScope autocast(bf16());
    s.image_tokens = model_->encode_image(s.images);
    s.text_hidden = model_->encode_text(batch.tokens, batch.attention_mask);
    s.img = model_->image_embed(s.image_tokens);
    s.txt = model_->text_embed(s.text_hidden);
  }
  // ITC, the methods' thresholds and the gathered features compare fp32 similarities.
  s.img = s.img.to(torch::kFloat);
  s.txt = s.txt.to(torch::kFloat);
  if (cache_.enabled()) cache_.record(s.host.pair_id, s.img, s.txt);
  s.temp = model_->temp();  // outside any NoGradGuard: it is learned
  const int64_t ramp =
      cfg_.loss.soft_warmup_steps < 0 ? uniform_steps_ : cfg_.loss.soft_warmup_steps;
  s.soft_weight =
      cfg_.loss.soft_weight * (ramp > 0 ? std::min(1.0, static_cast<double>(step_) / ramp) : 1.0);
  loss::ItcInputs in;
  bool built = false;
  for (auto& m : methods_) built = built || m->build_itc(s, in);
  if (!built) {
    in.img = s.img;
    in.txt = s.txt;
    in.img_all = allgather_rows(comm_, s.img, &in.offset);
    in.txt_all = allgather_rows(comm_, s.txt, nullptr);
    in.temp = s.temp;
    in.image_id = batch.image_id;
    in.image_id_all = allgather_ids(comm_, s.host.image_id, device_.device);
    in.soft = cfg_.loss.soft_targets == negatives::SoftTargetsKind::kNone
                  ? loss::SoftTargets::kNone
                  : loss::SoftTargets::kPseudo;
    in.soft_weight = s.soft_weight;
    in.cross_rank_grad = comm_.size() > 1;
  }
  s.label_all = allgather_ids(comm_, s.host.label, device_.device);
  // Negatives of each local anchor: every global column that does not share its image_id.
  s.negative = in.image_id.unsqueeze(1) != in.image_id_all.unsqueeze(0);
  clock_.lap(StepClock::kForward);
  for (auto& m : methods_) m->adjust_itc(s, in);
  telemetry_.record_batch(s.host);
  clock_.lap(StepClock::kNegatives);
  return in;
}

// ITM with hard negatives from the local batch (the fusion encoder needs their tokens); the
// methods' excluded negatives are not drawn (negatives.filter_itm). fuse_cls runs the last
// fusion layer for the [CLS] rows alone (exact; model/albef.hpp FusionPairs).
torch::Tensor Trainer::itm_loss(StepContext& s, const loss::ItcInputs& in,
                                const loss::ItcResult& itc,
                                const std::vector<torch::Tensor>& image_keys) {
  const int64_t b = s.batch.size();
  auto gen = negatives::step_generator(seed(), step_, comm_.rank(), negatives::kItmStream);
  const auto local = torch::indexing::Slice(in.offset, in.offset + b);
  const auto all = torch::indexing::Slice();
  torch::Tensor excl_i2t, excl_t2i;
  if (cfg_.negatives.filter_itm && in.exclude_i2t.defined()) {
    excl_i2t = in.exclude_i2t.index({all, local});
    excl_t2i = in.exclude_t2i.index({all, local});
  }
  const auto negatives = loss::sample_itm_negatives(
      itc.sim_i2t.index({all, local}), itc.sim_t2i.index({all, local}), s.host.image_id, excl_i2t,
      excl_t2i, loss::parse_itm_negative_mode(cfg_.loss.itm_negatives), gen);
  const loss::ItmPairs pairs = loss::itm_pairs(negatives);
  torch::Tensor logits;
  {
    AutocastScope autocast(bf16());
    logits = model_->itm_logits(model_->fuse_cls(s.text_hidden, s.batch.attention_mask, image_keys,
                                                 {pairs.text_index, pairs.image_index}));
  }
  return loss::itm_loss(logits.to(torch::kFloat), pairs.labels);
}

// MLM on a masked copy of the captions, conditioned on the image, at the masked positions only
// (skipped at weight 0, as in retrieval fine-tuning: a third of the step's compute).
torch::Tensor Trainer::mlm_loss(StepContext& s, const std::vector<torch::Tensor>& image_keys) {
  if (cfg_.loss.mlm_weight == 0)
    return torch::zeros({}, torch::dtype(torch::kFloat).device(device_.device));
  const torch::Tensor& mask = s.batch.attention_mask;
  auto gen = negatives::step_generator(seed(), step_, comm_.rank(), negatives::kMlmStream);
  const data::SpecialTokens& special = dataset_.special_tokens();
  // From the host batch: nothing read back from the device; the masked ids and targets are copied
  // to it without waiting, the positions stay on the host for fuse_at.
  s.masking = loss::mask_tokens(s.host.tokens, s.host.attention_mask, cfg_.loss.mlm_probability,
                                cfg_.model.vocab_size, special.mask,
                                {special.pad, special.cls, special.sep}, gen, device_.device);
  // The decoder and its cross-entropy under autocast too (autocast runs the softmax in fp32).
  AutocastScope autocast(bf16());
  // The MLM passes draw their dropout masks from a stream of their own: FALCON's reward pass
  // repeats them after the update, so its loss drop measures the update, not a new mask.
  negatives::seed_dropout(seed(), step_, comm_.rank(), negatives::kMlmDropoutStream);
  const torch::Tensor at_masked = model_->fuse_at(model_->encode_text(s.masking.input_ids, mask),
                                                  mask, image_keys, {}, s.masking.positions);
  for (auto& m : methods_)
    if (torch::Tensor l = m->mlm_loss(s, at_masked); l.defined()) return l.to(torch::kFloat);
  // The decoder's logits feed only this loss: one fused node (loss/mlm.hpp).
  torch::Tensor l =
      loss::linear_cross_entropy(model_->mlm_hidden(at_masked), model_->mlm_decoder_weight(),
                                 model_->mlm_bias(), s.masking.targets);
  if (s.want_plain_mlm) s.mlm_plain = l.item<double>();
  return l.to(torch::kFloat);
}

void Trainer::sum_rows(torch::Tensor& t) {
  t = t.to(torch::kFloat).contiguous();
  allreduce_sum(comm_, t);
}

CommTraffic Trainer::traffic() const {
  CommTraffic t = comm_.traffic();
  if (nccl_) t += nccl_->traffic();
  return t;
}

void Trainer::log_progress(MetricsWriter& metrics, const BatchSource& loader) {
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

void Trainer::write_failure_summary(int exit_code, const std::string& why, bool agreed) const {
  RunSummary s = telemetry_.summary(RunStatus::kFailed, step_, skips_.total());
  s.exit_code = exit_code;
  s.error = why;
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
    try {
      if (t) {
        t->write_failure_summary(code, e.what(), agreed);
      } else {
        RunSummary s;
        s.status = RunStatus::kFailed;
        s.exit_code = code;
        s.error = e.what();
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
