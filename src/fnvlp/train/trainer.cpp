#include "fnvlp/train/trainer.hpp"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>

#include "fnvlp/core/blas.hpp"
#include "fnvlp/core/fault.hpp"
#include "fnvlp/core/log.hpp"
#include "fnvlp/data/dataset.hpp"
#include "fnvlp/data/embeddings.hpp"
#include "fnvlp/data/prefetch.hpp"
#include "fnvlp/data/sampler.hpp"
#include "fnvlp/eval/retrieval.hpp"
#include "fnvlp/loss/itc.hpp"
#include "fnvlp/loss/itm.hpp"
#include "fnvlp/loss/mlm.hpp"
#include "fnvlp/loss/tcl.hpp"
#include "fnvlp/model/albef.hpp"
#include "fnvlp/negatives/falcon.hpp"
#include "fnvlp/negatives/fn_rate.hpp"
#include "fnvlp/negatives/glofnd.hpp"
#include "fnvlp/negatives/grouped_sampler.hpp"
#include "fnvlp/negatives/srcl.hpp"
#include "fnvlp/store/pretrained.hpp"
#include "fnvlp/store/run_dir.hpp"
#include "fnvlp/train/batch_source.hpp"
#include "fnvlp/train/fused_adamw.hpp"
#include "fnvlp/train/grad_sync.hpp"
#include "fnvlp/train/momentum.hpp"
#include "fnvlp/train/schedule.hpp"
#include "fnvlp/train/signals.hpp"

namespace fnvlp::train {

namespace fs = std::filesystem;
using json = nlohmann::json;
// The run directory and checkpoints moved to store/ (issue 26); their names as they were here.
using store::CheckpointInfo;
using store::CheckpointManager;
using store::load_module;
using store::load_optimizer;
using store::load_per_pair;
using store::load_pretrained_weights;
using store::MetricsWriter;
using store::module_bytes;
using store::optimizer_state_bytes;
using store::PerPairRows;
using store::rank_file;
using store::read_file;
using store::RunDir;
using store::RunStatus;
using store::RunSummary;
using store::save_module;
using store::save_optimizer;
using store::save_per_pair;
using store::write_file;
using store::write_model_config;

namespace {

// Per-step seeding: every random draw of step s on rank r comes from a generator seeded by
// (seed, s, r, stream), so a resumed run draws exactly what the uninterrupted one drew without
// saving generator states.
torch::Generator step_generator(int64_t seed, int64_t step, int rank, uint64_t stream) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>();
  gen.set_current_seed(data::hash_key({static_cast<uint64_t>(seed), static_cast<uint64_t>(step),
                                       static_cast<uint64_t>(rank), stream}));
  return gen;
}

// The gathered momentum features of a step with their ids, queued once the step is taken.
struct MomentumEntries {
  torch::Tensor img, txt, image_id, pair_id;
};

struct StepLosses {
  double itc = 0, itm = 0, mlm = 0, imc = 0, lmi = 0, total = 0;
};

enum class NegMethod { kNone, kGlofnd, kFnc, kSrcl };
NegMethod parse_neg_method(const std::string& name) {
  if (name == "none") return NegMethod::kNone;
  if (name == "glofnd") return NegMethod::kGlofnd;
  if (name == "fnc") return NegMethod::kFnc;
  if (name == "srcl") return NegMethod::kSrcl;
  FNVLP_FAIL("negatives.method: unknown method '" << name << "' (none | glofnd | fnc | srcl)");
}

std::vector<int64_t> to_vector(const torch::Tensor& t) {
  const auto c = t.to(torch::kLong).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

// Where a step's wall time goes (batch: waiting for, composing and augmenting it; comm: the
// loss agreement, the cross-rank ITC term and the gradient allreduce), summed over a logging window
// on this rank: each lap() charges the time since the previous lap to one phase. The methods' costs
// (GloFND's update and filter, FALCON's reward pass and policy step, its synchronous batch
// composition) are read off one run this way instead of from the difference of two noisy whole-run
// throughputs. Host wall time: with libtorch on CPU every op has finished when it returns.
struct PhaseClock {
  enum Phase {
    kBatch,
    kForward,
    kNegatives,
    kBackward,
    kComm,
    kOptimizer,
    kFalcon,
    kOther,
    kCount
  };
  static constexpr const char* kNames[kCount] = {"batch", "forward",   "negatives", "backward",
                                                 "comm",  "optimizer", "falcon",    "other"};
  std::chrono::steady_clock::time_point last = std::chrono::steady_clock::now();
  std::vector<double> seconds = std::vector<double>(kCount, 0.0);
  void lap(Phase p) {
    const auto now = std::chrono::steady_clock::now();
    seconds[p] += std::chrono::duration<double>(now - last).count();
    last = now;
  }
};

// False-negative telemetry summed over a logging window on this rank (reduced at log time).
struct FnWindow {
  // [0] negatives, [1] filtered i2t, [2] filtered t2i, [3] filtered with the anchor's label,
  // [4] filtered with known labels, [5] same-label negatives, [6] other pairs in the batch,
  // [7] of those sharing an image_id, [8] pairs with both labels known, [9] of those same label
  std::vector<double> counts = std::vector<double>(10, 0.0);
  std::vector<float> lambda_image, lambda_text;  // λ of the window's anchors after their update
  void clear() {
    std::fill(counts.begin(), counts.end(), 0.0);
    lambda_image.clear();
    lambda_text.clear();
  }
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
        model_(nullptr),
        augment_(cfg.augment, cfg.model.image_size),
        ckpt_(run_, comm, cfg.checkpoint),
        skips_(cfg.non_finite.max_consecutive) {
    cfg_.model.validate();
    validate_soft_targets();
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
    if (cfg_.loss.soft_targets == "momentum") {
      // ALBEF copy_params: the momentum model starts equal to the (broadcast) online model; it is
      // never trained, and runs in eval mode so that its features and targets do not depend on a
      // rank's dropout draws (ALBEF leaves it in train mode; the presets' tiny/small have dropout
      // 0 anyway). A resume overwrites both with the checkpoint's (maybe_resume).
      momentum_ = model::Albef(cfg_.model);
      copy_module(*momentum_, *model_);
      momentum_->eval();
      for (auto& p : momentum_->parameters()) p.requires_grad_(false);
      queue_ = FeatureQueue(cfg_.loss.queue_size, cfg_.model.embed_dim);
    }

    setup_negatives();
    setup_sampler();

    // Every rank must run the same number of steps: blocks differ in size by at most one pair.
    uniform_steps_ = comm_.allreduce_min(grouped_ ? grouped_->uniform_batches_per_epoch()
                                                  : sampler_->batches_per_epoch());
    grouped_steps_ =
        grouped_ ? comm_.allreduce_min(grouped_->grouped_batches_per_epoch()) : uniform_steps_;
    FNVLP_CHECK(uniform_steps_ > 0 && grouped_steps_ > 0,
                opt.data_dir << ": " << dataset_.num_pairs() << " pairs over " << comm_.size()
                             << " ranks give no full batch of " << cfg_.train.batch_size
                             << " (search spaces of " << cfg_.sampler.search_space << ")");
    total_steps_ = cfg_.train.max_steps > 0
                       ? cfg_.train.max_steps
                       : uniform_steps_ + (cfg_.train.epochs - 1) * grouped_steps_;
  }

  int run() {
    StopRequest::install();
    // Room for two checkpoints (model + AdamW's two moments) before any step is spent.
    ckpt_.check_free_space(module_bytes(*model_) + optimizer_state_bytes(*optimizer_) +
                           2 * module_bytes(*model_) +
                           (momentum_ ? module_bytes(*momentum_) + module_bytes(*queue_) : 0));
    json sampler_state;
    bool resumed = maybe_resume(&sampler_state);
    MetricsWriter metrics(run_.metrics_path(), comm_,
                          resumed ? std::optional<int64_t>(step_) : std::nullopt);
    run_.write_config(opt_.config_yaml);
    Watchdog dog(comm_, cfg_.watchdog.timeout_s);
    if (grouped_ && epoch_ > 0) restore_sampler_embeddings();
    BatchSource loader(dataset_, *sampler_, static_cast<int>(cfg_.train.prefetch),
                       falcon_ != nullptr);
    // The step's augmentation runs on the prefetch thread, beside the reads (the seed is the
    // batch's step, so what it draws does not depend on where it runs).
    loader.set_prepare([this](data::Batch& b, int64_t step) {
      auto gen = step_generator(cfg_.train.seed, step, comm_.rank(), 1);
      b.prepared = augment_.train(b.images, gen);
      b.prepared_for = step;
    });
    if (resumed && !sampler_state.is_null())
      loader.resume(sampler_state, step_);
    else
      loader.start_epoch(epoch_, step_);
    if (comm_.is_root())
      spdlog::info(
          "pretrain: {} pairs, {} ranks x batch {}, {} steps/epoch, {} steps, model {:.1f} M "
          "params",
          dataset_.num_pairs(), comm_.size(), cfg_.train.batch_size, uniform_steps_, total_steps_,
          model_->num_parameters() / 1e6);

    const auto t0 = std::chrono::steady_clock::now();
    auto window_start = t0;
    int64_t window_steps = 0, samples = 0;
    StepLosses window{};
    int exit_code = 0;
    RunStatus status = RunStatus::kCompleted;
    phases_.last = std::chrono::steady_clock::now();
    while (step_ < total_steps_) {
      data::Batch batch;
      phases_.lap(PhaseClock::kOther);
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
      FNVLP_CHECK(loader.next(batch), "rank " << comm_.rank() << ": loader ended epoch " << epoch_
                                              << " after " << step_in_epoch_ << " of "
                                              << epoch_steps(epoch_) << " steps");
      record_sampler(loader.state());
      phases_.lap(PhaseClock::kBatch);
      dog.beat(step_, "step");
      const StepLosses l = train_step(batch);
      samples += batch.size() * comm_.size();
      window.itc += l.itc;
      window.itm += l.itm;
      window.mlm += l.mlm;
      window.imc += l.imc;
      window.lmi += l.lmi;
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
      if (step_ == cfg_.train.inject_export_step && comm_.is_root())
        StopRequest::raise_for_test(SIGUSR2);
      if (agree_export(comm_)) export_on_demand(dog);
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
  // loss.soft_targets and the momentum options, checked before anything is built.
  //
  // Momentum distillation refuses negatives.method (glofnd, fnc, srcl): their masks and weights
  // are [b, N] over the gathered columns, and with a queue most columns are momentum features of
  // earlier steps. GloFND's λ is a per-anchor quantile of the current model's similarities (the
  // one exported with the embeddings and checked by simstat); learned over lagging momentum keys
  // it would estimate another distribution. SRCL needs the helper's similarity for every column,
  // which queue entries do not have, and the FN telemetry needs their labels. FNC would run, but
  // removing top-ranked keys from the denominator fights the momentum soft targets, which put
  // mass on exactly those keys (ALBEF §3.3: soft targets are how ALBEF handles false negatives).
  // Extending them means deciding these questions, not only padding the masks, so the
  // combination is an error rather than a silent half-measure.
  void validate_soft_targets() const {
    const LossConfig& lc = cfg_.loss;
    FNVLP_CHECK(
        lc.soft_targets == "pseudo" || lc.soft_targets == "none" || lc.soft_targets == "momentum",
        "loss.soft_targets: unknown mode '" << lc.soft_targets << "' (pseudo | momentum | none)");
    FNVLP_CHECK(lc.soft_weight >= 0 && lc.soft_weight <= 1,
                "loss.soft_weight " << lc.soft_weight << " not in [0, 1]");
    if (lc.soft_targets != "momentum") return;
    FNVLP_CHECK(lc.momentum >= 0 && lc.momentum <= 1,
                "loss.momentum " << lc.momentum << " not in [0, 1] (ALBEF: 0.995)");
    FNVLP_CHECK(lc.queue_size >= 0, "loss.queue_size " << lc.queue_size << " must be >= 0");
    FNVLP_CHECK(cfg_.negatives.method == "none",
                "loss.soft_targets=momentum cannot be combined with negatives.method="
                    << cfg_.negatives.method
                    << ": the methods' masks and weights are defined on the current model's "
                       "similarities of the global batch, not on momentum keys and queue entries "
                       "(see validate_soft_targets in train/trainer.cpp); use "
                       "loss.soft_targets=pseudo or none with them");
  }

  void setup_sampler() {
    const SamplerConfig& sc = cfg_.sampler;
    const auto seed = static_cast<uint64_t>(cfg_.train.seed);
    if (sc.kind == "uniform") {
      sampler_ = std::make_unique<data::UniformSampler>(partition_, cfg_.train.batch_size, seed,
                                                        comm_.rank());
      return;
    }
    FNVLP_CHECK(sc.kind == "grit" || sc.kind == "falcon",
                "sampler.kind: unknown sampler '" << sc.kind << "' (uniform | grit | falcon)");
    // Grouped epochs read the previous epoch's embeddings; a resumed run reads them back from
    // embeddings/epoch-EEE.h5, so they must be exported.
    FNVLP_CHECK(cfg_.train.export_embeddings,
                "sampler.kind=" << sc.kind
                                << " needs train.export_embeddings=true (grouped epochs use the "
                                   "previous epoch's embeddings, and a resume reads them back)");
    if (sc.kind == "grit") {
      negatives::GroupedConfig g;
      g.search_space = sc.search_space;
      g.schedule = negatives::parse_q_schedule(sc.schedule);
      g.q = sc.q;
      const bool hard = g.schedule == negatives::QSchedule::kHardening;
      g.q_start = sc.q_start >= 0 ? sc.q_start : (hard ? 0.0 : 1.0);
      g.q_end = sc.q_end >= 0 ? sc.q_end : (hard ? 1.0 : 0.0);
      g.epochs = cfg_.train.epochs;
      g.validate(cfg_.train.batch_size);
      auto s = std::make_unique<negatives::GroupedSampler>(partition_, cfg_.train.batch_size, seed,
                                                           comm_.rank(), g);
      grouped_ = s.get();
      sampler_ = std::move(s);
      return;
    }
    FNVLP_CHECK(cfg_.loss.mlm_weight != 0,
                "sampler.kind=falcon needs the MLM loss (loss.mlm_weight != 0): its reward is the "
                "drop of L_MLM over the step (falcon.txt §3.3)");
    negatives::FalconConfig f;
    f.quantiles = sc.falcon_quantiles;
    f.hidden = sc.falcon_hidden;
    f.blocks = sc.falcon_blocks;
    f.lr = sc.falcon_lr;
    f.weight_decay = sc.falcon_weight_decay;
    f.instance_level = sc.falcon_instance_level;
    f.baseline = sc.falcon_baseline;
    f.baseline_decay = sc.falcon_baseline_decay;
    f.init_seed = seed;  // the same policy on every rank
    f.validate();
    falcon_ = std::make_unique<negatives::FalconScheduler>(f);
    auto s = std::make_unique<negatives::FalconSampler>(partition_, cfg_.train.batch_size, seed,
                                                        comm_.rank(), sc.search_space, *falcon_);
    grouped_ = s.get();
    sampler_ = std::move(s);
  }

  int64_t epoch_steps(int64_t epoch) const { return epoch == 0 ? uniform_steps_ : grouped_steps_; }

  // The rank's block rows of embeddings of all pairs (pair_id order).
  std::pair<torch::Tensor, torch::Tensor> block_rows(const data::Embeddings& e) const {
    const data::PairRange block = partition_.block(comm_.rank());
    const auto opts = torch::TensorOptions().dtype(torch::kFloat);
    auto img = torch::from_blob(const_cast<float*>(e.image_emb.data()), {e.size(), e.dim}, opts);
    auto txt = torch::from_blob(const_cast<float*>(e.text_emb.data()), {e.size(), e.dim}, opts);
    return {img.narrow(0, block.begin, block.size()).clone(),
            txt.narrow(0, block.begin, block.size()).clone()};
  }

  // A resumed grouped epoch E uses the embeddings exported at the end of epoch E - 1.
  void restore_sampler_embeddings() {
    const std::string path = run_.embeddings_path(epoch_ - 1);
    FNVLP_CHECK(fs::exists(path), path << ": missing; the grouped sampler of epoch " << epoch_
                                       << " needs the embeddings of epoch " << epoch_ - 1);
    const data::Embeddings e = data::read_embeddings(path);
    FNVLP_CHECK(e.size() == dataset_.num_pairs(),
                path << ": " << e.size() << " rows, the dataset has " << dataset_.num_pairs());
    const auto [img, txt] = block_rows(e);
    grouped_->set_embeddings(epoch_, img, txt);
  }

  // Sampler telemetry of the batch about to be trained on: its picks' q (grouped epochs) and, for
  // FALCON, the draws the policy update needs.
  void record_sampler(const json& state) {
    if (!grouped_) return;
    const negatives::ValueStats q = negatives::GroupedSampler::q_stats_from_state(state);
    if (q.n > 0) {
      q_window_[0] += q.mean;
      q_window_[1] += q.p5;
      q_window_[2] += q.p95;
      q_window_[3] += 1;
    }
    if (falcon_) draws_ = falcon_->take_draws();
  }

  // FALCON's scheduler update (falcon.txt §3.3, Alg. 2 lines 7-8): reward Δ_k = L_MLM(θ_k) -
  // L_MLM(θ_{k+1}) on the same batch with the same masks, then REINFORCE on Δ_k with the policy's
  // gradient averaged over ranks like the model's. Every rank takes part (an empty draw set
  // contributes a zero gradient), and only in grouped epochs: epoch 0 trains no scheduler (App.
  // C.2).
  void falcon_update(double mlm_before, const torch::Tensor& images, const loss::MlmMasking& m,
                     const torch::Tensor& mask) {
    if (!falcon_ || epoch_ == 0) return;
    double after = 0;
    {
      // Inference mode, not just no-grad: nothing of this pass is ever differentiated, so libtorch
      // can also skip the version counters and view tracking of its tensors.
      c10::InferenceMode inference;
      // Dropout draws as in the step's forward pass (exact with dropout 0, as the presets have).
      torch::manual_seed(
          data::hash_key({static_cast<uint64_t>(cfg_.train.seed), static_cast<uint64_t>(step_),
                          static_cast<uint64_t>(comm_.rank()), 0}));
      const auto tokens = model_->encode_image(images);
      const auto at_masked =
          model_->fuse_at(model_->encode_text(m.input_ids, mask), mask, tokens, m.positions);
      after =
          loss::linear_cross_entropy(model_->mlm_hidden(at_masked), model_->mlm_decoder_weight(),
                                     model_->mlm_bias(), m.targets)
              .item<double>();
    }
    const double reward = mlm_before - after;
    falcon_->loss_backward(reward, draws_);
    auto params = falcon_->parameters();
    phases_.lap(PhaseClock::kFalcon);
    allreduce_gradients(comm_, params);  // also where this rank waits for the slower one
    phases_.lap(PhaseClock::kComm);
    falcon_->step();
    reward_window_[0] += reward;
    reward_window_[1] += 1;
  }

  void setup_negatives() {
    const NegativesConfig& nc = cfg_.negatives;
    neg_method_ = parse_neg_method(nc.method);
    FNVLP_CHECK(nc.alpha >= 0 && nc.alpha <= 1, "negatives.alpha " << nc.alpha << " not in [0, 1]");
    if (neg_method_ == NegMethod::kGlofnd) {
      negatives::GlofndOptions g;
      g.alpha = nc.alpha;
      g.lr = nc.glofnd_lr;
      g.beta1 = nc.glofnd_beta1;
      g.beta2 = nc.glofnd_beta2;
      g.init = nc.glofnd_init;
      glofnd_ = std::make_unique<negatives::GlofndState>(partition_.block(comm_.rank()), g);
    }
    if (neg_method_ == NegMethod::kSrcl && !nc.srcl_helper.empty()) {
      // The frozen helper H of SRCL (eq. 6): a checkpoint of the same architecture.
      helper_ = model::Albef(cfg_.model);
      comm_.collective([&] { load_module(nc.srcl_helper, "model", *helper_); });
      helper_->eval();
      for (auto& p : helper_->parameters()) p.requires_grad_(false);
    }
    if (neg_method_ == NegMethod::kSrcl && nc.srcl_helper.empty() && comm_.is_root())
      spdlog::warn(
          "pretrain: SRCL without negatives.srcl_helper: the current model alone regulates the "
          "weights (a = 0)");
  }

  // Removes (GloFND, FNC) or reweighs (SRCL) the ITC negatives of the local anchors, and records
  // the telemetry. negative: bool [b, N], the columns that are negatives of each anchor.
  void apply_negatives(loss::ItcInputs& in, const torch::Tensor& negative, const data::Batch& batch,
                       const torch::Tensor& images) {
    torch::NoGradGuard no_grad;
    const NegativesConfig& nc = cfg_.negatives;
    if (neg_method_ == NegMethod::kNone) return;
    const bool active = epoch_ >= nc.start_epoch;
    const loss::ItcCosine cos = loss::itc_cosine(in);
    if (neg_method_ == NegMethod::kGlofnd && active) {
      const std::vector<int64_t> pids = to_vector(batch.pair_id);
      in.exclude_i2t = glofnd_->image.update_and_filter(cos.i2t, negative, pids);
      in.exclude_t2i = glofnd_->text.update_and_filter(cos.t2i, negative, pids);
      for (int64_t p : pids) {
        fn_.lambda_image.push_back(glofnd_->image.lambda(p));
        fn_.lambda_text.push_back(glofnd_->text.lambda(p));
      }
    } else if (neg_method_ == NegMethod::kFnc && active) {
      in.exclude_i2t = negatives::fnc_filter(cos.i2t, negative, nc.alpha);
      in.exclude_t2i = negatives::fnc_filter(cos.t2i, negative, nc.alpha);
    } else if (neg_method_ == NegMethod::kSrcl) {
      torch::Tensor h_i2t, h_t2i;
      if (helper_) {
        const auto hi = helper_->image_embed(helper_->encode_image(images));
        const auto ht =
            helper_->text_embed(helper_->encode_text(batch.tokens, batch.attention_mask));
        const auto hi_all = allgather_rows(comm_, hi, nullptr);
        const auto ht_all = allgather_rows(comm_, ht, nullptr);
        h_i2t = torch::matmul(hi, ht_all.t());
        h_t2i = torch::matmul(ht, hi_all.t());
      }
      const double a =
          helper_ ? negatives::srcl_helper_weight(nc.srcl_helper_weight, step_, total_steps_) : 0;
      in.weight_i2t = negatives::srcl_weights(cos.i2t, h_i2t, a, negative);
      in.weight_t2i = negatives::srcl_weights(cos.t2i, h_t2i, a, negative);
      last_srcl_a_ = a;
    }
    if (!in.exclude_i2t.defined()) return;
    const auto fc_i = negatives::fn_counts(in.exclude_i2t, negative, batch.label, label_all_);
    const auto fc_t = negatives::fn_counts(in.exclude_t2i, negative, batch.label, label_all_);
    auto& c = fn_.counts;
    c[0] += static_cast<double>(fc_i.negatives);
    c[1] += static_cast<double>(fc_i.filtered);
    c[2] += static_cast<double>(fc_t.filtered);
    c[3] += static_cast<double>(fc_i.filtered_true + fc_t.filtered_true);
    const auto known = (batch.label.to(torch::kLong).unsqueeze(1) >= 0) &
                       (label_all_.unsqueeze(0) >= 0) & negative;
    c[4] += static_cast<double>(
        ((in.exclude_i2t & known).sum() + (in.exclude_t2i & known).sum()).item<int64_t>());
    c[5] += static_cast<double>(fc_i.same_label_neg + fc_t.same_label_neg);
  }

  // In-batch rate of known false negatives (FALCON Fig. 2) of the batch the sampler composed (the
  // rank's local batch: grouping happens within a rank's block), for every sampler.
  void record_batch_fn(const data::Batch& batch) {
    const std::vector<int64_t> ids = to_vector(batch.image_id), labels = to_vector(batch.label);
    const negatives::BatchFnRate r = negatives::batch_false_negative_rate(ids, labels);
    auto& c = fn_.counts;
    c[6] += static_cast<double>(r.negatives);
    if (r.negatives > 0) c[7] += r.image * static_cast<double>(r.negatives);
    c[8] += static_cast<double>(r.labelled);
    if (r.labelled > 0) c[9] += r.label * static_cast<double>(r.labelled);
  }

  // Extra losses of TCL (loss/tcl.hpp) on a second augmented view and a second text pass.
  std::pair<torch::Tensor, torch::Tensor> tcl_losses(const data::Batch& batch,
                                                     const torch::Tensor& img,
                                                     const torch::Tensor& txt,
                                                     const torch::Tensor& text_hidden,
                                                     const torch::Tensor& temp) {
    auto gen = step_generator(cfg_.train.seed, step_, comm_.rank(), 4);
    const torch::Tensor tokens2 = model_->encode_image(augment_.train(batch.images, gen));
    const torch::Tensor img2 = model_->image_embed(tokens2);
    // Two dropout masks on the text (TCL's T and T+); without dropout both passes are equal.
    const torch::Tensor hidden2 = cfg_.model.dropout > 0
                                      ? model_->encode_text(batch.tokens, batch.attention_mask)
                                      : text_hidden;
    const torch::Tensor txt2 = model_->text_embed(hidden2);
    const torch::Tensor imc = 0.5 * (loss::imc_loss(img, img2, batch.image_id, temp) +
                                     loss::imc_loss(txt, txt2, batch.image_id, temp));
    const int64_t len = hidden2.size(1);
    const torch::Tensor local_img =
        model_->project_image_tokens(loss::pool_patch_tokens(tokens2, cfg_.loss.tcl_grid));
    const torch::Tensor local_txt = model_->project_text_tokens(hidden2.narrow(1, 1, len - 1));
    const torch::Tensor valid = batch.attention_mask.narrow(1, 1, len - 1) > 0;
    const torch::Tensor lmi = 0.5 * (loss::lmi_loss(img, local_img, {}, batch.image_id, temp) +
                                     loss::lmi_loss(txt, local_txt, valid, batch.image_id, temp));
    return {imc, lmi};
  }

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
    fault::at_step(step_);  // FNVLP_FAULT step.kill / step.sleep / step.throw (core/fault.hpp)
    // Augmented for this step by the loader (BatchSource::set_prepare in run()).
    FNVLP_CHECK(batch.prepared.defined() && batch.prepared_for == step_,
                "batch augmented for step " << batch.prepared_for << " arrived at step " << step_);
    const torch::Tensor& images = batch.prepared;
    const torch::Tensor ids = batch.tokens, mask = batch.attention_mask;

    phases_.lap(PhaseClock::kBatch);
    // ITC against the global batch (embeddings all-gathered without gradient, exact gradient
    // restored through the cross-rank term, see loss/itc.hpp).
    const torch::Tensor image_tokens = model_->encode_image(images);
    const torch::Tensor text_hidden = model_->encode_text(ids, mask);
    const torch::Tensor img = model_->image_embed(image_tokens);
    const torch::Tensor txt = model_->text_embed(text_hidden);
    const torch::Tensor temp = model_->temp();  // outside any NoGradGuard: it is learned
    const int64_t ramp =
        cfg_.loss.soft_warmup_steps < 0 ? uniform_steps_ : cfg_.loss.soft_warmup_steps;
    const double alpha =
        cfg_.loss.soft_weight *
        (ramp > 0 ? std::min(1.0, static_cast<double>(step_) / static_cast<double>(ramp)) : 1.0);
    loss::ItcInputs in;
    torch::Tensor image_tokens_m;  // momentum distillation: the momentum model's image tokens
    MomentumEntries enqueue;       // and what the queue receives once the step is taken
    if (momentum_) {
      // ALBEF §3.3: keys = [all-gathered momentum features ; queue], soft targets from the
      // momentum logits (loss::momentum_itc_inputs has the equations). No gradient reaches the
      // keys, so no cross-rank term is needed for the exact data-parallel gradient (loss/itc.hpp).
      torch::NoGradGuard no_grad;
      image_tokens_m = momentum_->encode_image(images);
      loss::MomentumItc mi;
      mi.img = img;
      mi.txt = txt;
      mi.img_m = momentum_->image_embed(image_tokens_m);
      mi.txt_m = momentum_->text_embed(momentum_->encode_text(ids, mask));
      mi.img_m_all = allgather_rows(comm_, mi.img_m, &mi.offset);
      mi.txt_m_all = allgather_rows(comm_, mi.txt_m, nullptr);
      mi.image_id = batch.image_id;
      mi.image_id_all = allgather_ids(batch.image_id);
      mi.queue_img = queue_->img();
      mi.queue_txt = queue_->txt();
      mi.queue_image_id = queue_->image_id();
      mi.temp = temp;
      mi.alpha = alpha;
      in = loss::momentum_itc_inputs(mi);
      enqueue = {mi.img_m_all, mi.txt_m_all, mi.image_id_all, allgather_ids(batch.pair_id)};
    } else {
      in.img = img;
      in.txt = txt;
      in.img_all = allgather_rows(comm_, img, &in.offset);
      in.txt_all = allgather_rows(comm_, txt, nullptr);
      in.temp = temp;
      in.image_id = batch.image_id;
      in.image_id_all = allgather_ids(batch.image_id);
      in.soft = loss::parse_soft_targets(cfg_.loss.soft_targets);
      in.soft_weight = alpha;
      in.cross_rank_grad = comm_.size() > 1;
    }
    label_all_ = allgather_ids(batch.label);
    // Negatives of each local anchor: every global column that does not share its image_id (the
    // own pair included in "shares"). No method runs with momentum (validate_soft_targets).
    const torch::Tensor negative = in.image_id.unsqueeze(1) != in.image_id_all.unsqueeze(0);
    phases_.lap(PhaseClock::kForward);
    apply_negatives(in, negative, batch, images);
    record_batch_fn(batch);
    phases_.lap(PhaseClock::kNegatives);
    const loss::ItcResult itc = loss::itc_loss(in);

    // ITM with hard negatives from the local batch (the fusion encoder needs their tokens).
    const int64_t b = batch.size();
    auto itm_gen = step_generator(cfg_.train.seed, step_, comm_.rank(), 2);
    const auto local = torch::indexing::Slice(in.offset, in.offset + b);
    torch::Tensor itm_excl_i2t, itm_excl_t2i;
    if (cfg_.negatives.filter_itm && in.exclude_i2t.defined()) {
      itm_excl_i2t = in.exclude_i2t.index({torch::indexing::Slice(), local});
      itm_excl_t2i = in.exclude_t2i.index({torch::indexing::Slice(), local});
    }
    const auto negatives = loss::sample_itm_negatives(
        itc.sim_i2t.index({torch::indexing::Slice(), local}),
        itc.sim_t2i.index({torch::indexing::Slice(), local}), batch.image_id, itm_excl_i2t,
        itm_excl_t2i, loss::parse_itm_negative_mode(cfg_.loss.itm_negatives), itm_gen);
    const loss::ItmPairs pairs = loss::itm_pairs(negatives);
    // ITM reads the fused [CLS] only, MLM the masked positions only: fuse_cls / fuse_at run the
    // last fusion layer for those rows alone (exact; ALBEF computes all rows). The images'
    // cross-attention keys and values are projected once for ITM's pairs and MLM together, and
    // each text's first-layer self-attention once for its pairs (model/albef.hpp FusionPairs).
    const std::vector<torch::Tensor> image_keys = model_->image_keys(image_tokens);
    const torch::Tensor fused =
        model_->fuse_cls(text_hidden, mask, image_keys, {pairs.text_index, pairs.image_index});
    const torch::Tensor itm = loss::itm_loss(model_->itm_logits(fused), pairs.labels);

    // MLM on a masked copy of the captions, conditioned on the image (skipped at weight 0, as in
    // retrieval fine-tuning: a third of the step's compute).
    torch::Tensor mlm = torch::zeros({});
    loss::MlmMasking m;   // kept for FALCON's reward on the same masks
    double mlm_hard = 0;  // plain cross-entropy (FALCON's reward compares it after the update)
    if (cfg_.loss.mlm_weight != 0) {
      auto mlm_gen = step_generator(cfg_.train.seed, step_, comm_.rank(), 3);
      const data::SpecialTokens& special = dataset_.special_tokens();
      m = loss::mask_tokens(ids, mask, cfg_.loss.mlm_probability, cfg_.model.vocab_size,
                            special.mask, {special.pad, special.cls, special.sep}, mlm_gen);
      const torch::Tensor at_masked = model_->fuse_at(model_->encode_text(m.input_ids, mask), mask,
                                                      image_keys, {}, m.positions);
      if (momentum_) {
        const torch::Tensor logits = model_->mlm_logits(at_masked);
        // ALBEF's distilled MLM: soft labels = softmax of the momentum model's MLM logits on the
        // same masked input, fused with the momentum image tokens; mixed with the same alpha.
        torch::Tensor soft;
        {
          torch::NoGradGuard no_grad;
          soft = torch::softmax(
              momentum_->mlm_logits(momentum_->fuse_at(momentum_->encode_text(m.input_ids, mask),
                                                       mask, image_tokens_m, m.positions)),
              1);
        }
        mlm = loss::mlm_loss(logits, m.targets, soft, alpha);
        if (falcon_) mlm_hard = loss::mlm_loss(logits.detach(), m.targets).item<double>();
      } else {
        // The decoder's logits feed only this loss: one fused node (loss/mlm.hpp).
        mlm =
            loss::linear_cross_entropy(model_->mlm_hidden(at_masked), model_->mlm_decoder_weight(),
                                       model_->mlm_bias(), m.targets);
        if (falcon_) mlm_hard = mlm.item<double>();
      }
    }

    torch::Tensor total =
        cfg_.loss.itc_weight * itc.loss + cfg_.loss.itm_weight * itm + cfg_.loss.mlm_weight * mlm;
    StepLosses out{itc.loss.item<double>(), itm.item<double>(), mlm.item<double>(), 0, 0, 0};
    if (cfg_.loss.tcl) {
      const auto [imc, lmi] = tcl_losses(batch, img, txt, text_hidden, in.temp);
      total = total + cfg_.loss.tcl_imc_weight * imc + cfg_.loss.tcl_lmi_weight * lmi;
      out.imc = imc.item<double>();
      out.lmi = lmi.item<double>();
    }
    out.total = total.item<double>();
    phases_.lap(PhaseClock::kForward);
    if (step_ == cfg_.train.inject_nonfinite_step &&
        comm_.rank() == cfg_.train.inject_nonfinite_rank)
      out.total = std::nan("");
    if (fault::point("step.nan", step_)) out.total = std::nan("");
    // Every rank takes the same decision: a NaN on one rank would otherwise poison the
    // averaged gradient of all.
    const bool finite = all_finite(comm_, out.total);
    if (in.cross_rank_grad && finite) {
      loss::ItcGatheredGrads g = loss::itc_gathered_grads(itc);
      sum_rows(g.img_all);
      sum_rows(g.txt_all);
      total = total + cfg_.loss.itc_weight * loss::itc_cross_rank_term(in, g);
    }
    grads_->zero();
    phases_.lap(PhaseClock::kComm);
    skips_.record(!finite, step_);
    if (!finite) {
      if (comm_.is_root())
        spdlog::warn("pretrain: non-finite loss at step {}: optimizer step skipped ({} in a row)",
                     step_, skips_.consecutive());
      return out;
    }
    total.backward();
    phases_.lap(PhaseClock::kBackward);
    grads_->allreduce_mean(comm_);
    phases_.lap(PhaseClock::kComm);
    // Clipping's scale applied inside the AdamW pass (no pass of its own over the gradients).
    fused_adamw_step(*optimizer_,
                     cfg_.optim.grad_clip > 0 ? grads_->clip_factor(cfg_.optim.grad_clip) : 1.0f);
    if (momentum_) {
      // After the step taken (a skipped step changes neither): EMA of the new online weights,
      // then the step's gathered momentum features join the queue in global (rank) order. Both
      // are the same on every rank, so they stay replicated without communication.
      ema_update(*momentum_, *model_, cfg_.loss.momentum);
      queue_->enqueue(enqueue.img, enqueue.txt, enqueue.image_id, enqueue.pair_id);
    }
    phases_.lap(PhaseClock::kOptimizer);
    if (m.positions.defined()) falcon_update(mlm_hard, images, m, mask);
    phases_.lap(PhaseClock::kFalcon);
    return out;
  }

  torch::Tensor allgather_ids(const torch::Tensor& ids) {
    std::vector<int64_t> mine(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
    std::vector<int64_t> all = comm_.allgatherv(mine);
    return torch::tensor(all, torch::kLong);
  }

  void sum_rows(torch::Tensor& t) {
    t = t.contiguous();
    comm_.allreduce(t.data_ptr<float>(), static_cast<size_t>(t.numel()), ReduceOp::kSum);
  }

  void log_progress(MetricsWriter& metrics, const StepLosses& sum, int64_t n,
                    std::chrono::steady_clock::time_point window_start,
                    std::chrono::steady_clock::time_point t0, const BatchSource& loader) {
    // One reduction for the losses, the data wait and the mean ms per step of each phase.
    std::vector<double> v = {sum.itc / n, sum.itm / n, sum.mlm / n, sum.total / n,
                             loader.wait_fraction()};
    const size_t ph0 = v.size();
    for (double x : phases_.seconds) v.push_back(x * 1e3 / static_cast<double>(n));
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
    json phase_ms = json::object();
    for (int i = 0; i < PhaseClock::kCount; ++i)
      phase_ms[PhaseClock::kNames[i]] = v[ph0 + static_cast<size_t>(i)];
    last_metrics_["phase_ms"] = phase_ms;
    std::fill(phases_.seconds.begin(), phases_.seconds.end(), 0.0);
    if (cfg_.loss.tcl) {
      std::vector<double> t = {sum.imc / n, sum.lmi / n};
      comm_.allreduce_mean(t);
      last_metrics_["imc"] = t[0];
      last_metrics_["lmi"] = t[1];
    }
    add_fn_metrics(last_metrics_);
    metrics.write(last_metrics_);
    if (comm_.is_root())
      spdlog::info(
          "step={} epoch={} itc={:.4f} itm={:.4f} mlm={:.4f} lr={:.3e} samples/s={:.1f} "
          "samples/s/rank={:.1f} eta={:.0f}s data_wait={:.1f}%{}",
          step_, epoch_, v[0], v[1], v[2], last_lr_, sps, sps / comm_.size(), eta, 100 * v[4],
          fn_progress(last_metrics_));
  }

  // The window's false-negative telemetry (contract keys of metrics.jsonl), reduced over ranks.
  void add_fn_metrics(json& m) {
    std::vector<double> c = fn_.counts;
    comm_.allreduce_sum(c);
    auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
    if (c[6] > 0) m["batch_fn_rate_image"] = ratio(c[7], c[6]);
    if (c[8] > 0) m["batch_fn_rate_label"] = ratio(c[9], c[8]);
    if (c[0] > 0) {
      m["filtered_frac_i2t"] = ratio(c[1], c[0]);
      m["filtered_frac_t2i"] = ratio(c[2], c[0]);
      if (c[8] > 0) {  // labels exist: precision / recall against same-label ground truth
        const double p = ratio(c[3], c[4]), r = ratio(c[3], c[5]);
        m["fn_precision"] = p;
        m["fn_recall"] = r;
        m["fn_f1"] = p + r > 0 ? 2 * p * r / (p + r) : 0.0;
      }
    }
    if (glofnd_) {
      auto stats = [&](const std::vector<float>& local, const char* side) {
        std::vector<float> all = comm_.allgatherv(local);
        if (all.empty()) return;
        std::sort(all.begin(), all.end());
        double mean = 0;
        for (float x : all) mean += x;
        auto at = [&](double q) {
          return all[static_cast<size_t>(std::floor(q * static_cast<double>(all.size() - 1)))];
        };
        m[std::string("lambda_") + side + "_mean"] = mean / static_cast<double>(all.size());
        m[std::string("lambda_") + side + "_p5"] = at(0.05);
        m[std::string("lambda_") + side + "_p95"] = at(0.95);
      };
      stats(fn_.lambda_image, "image");
      stats(fn_.lambda_text, "text");
    }
    if (neg_method_ == NegMethod::kSrcl) m["srcl_helper_weight"] = last_srcl_a_;
    fn_.clear();
    if (grouped_) {
      std::vector<double> q = q_window_, rw = reward_window_;
      comm_.allreduce_sum(q);
      comm_.allreduce_sum(rw);
      if (q[3] > 0) {  // window means of the per-batch statistics of the picks' q
        m["q_mean"] = q[0] / q[3];
        m["q_p5"] = q[1] / q[3];
        m["q_p95"] = q[2] / q[3];
      }
      if (rw[1] > 0) m["falcon_reward"] = rw[0] / rw[1];
      std::fill(q_window_.begin(), q_window_.end(), 0.0);
      std::fill(reward_window_.begin(), reward_window_.end(), 0.0);
    }
  }

  static std::string fn_progress(const json& m) {
    std::string s;
    for (const char* k : {"filtered_frac_i2t", "lambda_image_mean", "fn_precision", "fn_recall",
                          "batch_fn_rate_label", "q_mean", "falcon_reward", "imc", "lmi"})
      if (m.contains(k)) s += fmt::format(" {}={:.4f}", k, m[k].get<double>());
    return s;
  }

  void finish_epoch(Watchdog& dog, MetricsWriter& metrics) {
    if (cfg_.train.export_embeddings) export_embeddings(dog, metrics);
    if (grouped_) {  // the next epoch groups by this epoch's embeddings (falcon.txt App. C.2)
      const auto [img, txt] = block_rows(last_embeddings_);
      grouped_->set_embeddings(epoch_ + 1, img, txt);
    }
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

  // Every pair's embeddings with GloFND's lambda when it runs (what the analysis job reads).
  data::Embeddings embed_training_set() {
    data::Embeddings e = embed_dataset(dataset_);
    if (glofnd_) {  // blocks are contiguous and in rank order: the gather is in pair_id order
      e.glofnd_lambda_image = comm_.allgatherv(glofnd_->image.lambdas());
      e.glofnd_lambda_text = comm_.allgatherv(glofnd_->text.lambdas());
    }
    return e;
  }

  // SIGUSR2 (agree_export): embeddings/step-SSSSSSS.h5 of the current weights, then training
  // goes on. The samplers' cached embeddings (last_embeddings_) stay those of the epoch end, and
  // no RNG stream is consumed, so the run's trajectory is unchanged.
  void export_on_demand(Watchdog& dog) {
    auto guard = dog.long_phase("export embeddings");
    const data::Embeddings e = embed_training_set();
    const std::string path = fmt::format("{}/step-{:07d}.h5", run_.embeddings_dir(), step_);
    comm_.collective([&] {
      if (comm_.is_root()) data::write_embeddings(path, e);
    });
    if (comm_.is_root())
      spdlog::info("pretrain: embeddings of {} pairs at step {} -> {} (requested by SIGUSR2)",
                   e.size(), step_, path);
  }

  void export_embeddings(Watchdog& dog, MetricsWriter& metrics) {
    auto guard = dog.long_phase("export embeddings");
    data::Embeddings& e = last_embeddings_;
    e = embed_training_set();
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
      if (glofnd_) {  // collective, first (see CheckpointManager::save)
        const std::vector<int64_t> ids = block_pair_ids();
        save_per_pair(dir, "glofnd_image", comm_, ids, glofnd_->image.export_rows(),
                      negatives::GlofndSide::kCols, dataset_.num_pairs());
        save_per_pair(dir, "glofnd_text", comm_, ids, glofnd_->text.export_rows(),
                      negatives::GlofndSide::kCols, dataset_.num_pairs());
      }
      write_file((fs::path(dir) / rank_file("sampler", comm_.rank())).string(), sampler_text);
      // FALCON's policy and optimizer are the same on every rank (averaged gradients); its reward
      // baseline is per rank (each rank's Δ is measured on its own batch): one file per rank.
      if (falcon_) falcon_->save((fs::path(dir) / rank_file("falcon", comm_.rank())).string());
      if (!comm_.is_root()) return;
      save_module(dir, "model", *model_);
      if (momentum_) {  // replicated: rank 0 writes it
        save_module(dir, "momentum_model", *momentum_);
        save_module(dir, "momentum_queue", *queue_);
      }
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
    if (glofnd_) load_glofnd(info->dir);
    load_momentum(info->dir);
    if (falcon_) {  // another rank count: rank 0's baseline stands in for the new ranks'
      const auto mine = fs::path(info->dir) / rank_file("falcon", comm_.rank());
      const auto path = info->world_size == comm_.size() && fs::exists(mine)
                            ? mine
                            : fs::path(info->dir) / rank_file("falcon", 0);
      falcon_->load(path.string());
    }
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

  // The momentum model and queue of a momentum run. A checkpoint without them (written by a run
  // with another loss.soft_targets) is refused rather than completed by a copy of the online
  // weights and an empty queue: that would silently change the trajectory a resume promises to
  // continue. A momentum checkpoint resumed without momentum just leaves its state unused.
  void load_momentum(const std::string& dir) {
    const fs::path model_file = fs::path(dir) / "momentum_model.pt";
    const fs::path queue_file = fs::path(dir) / "momentum_queue.pt";
    if (!momentum_) {
      if (fs::exists(model_file) && comm_.is_root())
        spdlog::warn(
            "pretrain: {} holds momentum distillation state, unused with "
            "loss.soft_targets={}",
            dir, cfg_.loss.soft_targets);
      return;
    }
    FNVLP_CHECK(fs::exists(model_file) && fs::exists(queue_file),
                dir << ": no momentum state (momentum_model.pt, momentum_queue.pt): the checkpoint "
                       "was written without loss.soft_targets=momentum and cannot be resumed "
                       "with it; resume with the run's own loss.soft_targets, or start a new run");
    load_module(dir, "momentum_model", *momentum_);
    load_module(dir, "momentum_queue", *queue_);
    queue_->check(cfg_.loss.queue_size, cfg_.model.embed_dim);
  }

  std::vector<int64_t> block_pair_ids() const {
    const data::PairRange block = partition_.block(comm_.rank());
    std::vector<int64_t> ids(static_cast<size_t>(block.size()));
    for (int64_t p = block.begin; p < block.end; ++p) ids[static_cast<size_t>(p - block.begin)] = p;
    return ids;
  }

  // λ state by global pair_id: the rank's current block, whatever the rank count that wrote it.
  void load_glofnd(const std::string& dir) {
    const std::vector<int64_t> ids = block_pair_ids();
    for (auto* side : {&glofnd_->image, &glofnd_->text}) {
      const std::string name = side == &glofnd_->image ? "glofnd_image" : "glofnd_text";
      const PerPairRows rows = load_per_pair(dir, name, comm_, ids);
      FNVLP_CHECK(
          rows.cols == negatives::GlofndSide::kCols && rows.num_pairs_total == dataset_.num_pairs(),
          dir << "/" << name << ".h5: " << rows.num_pairs_total << " pairs x " << rows.cols
              << " columns, the dataset has " << dataset_.num_pairs() << " pairs");
      const auto missing = std::count(rows.valid.begin(), rows.valid.end(), uint8_t{0});
      FNVLP_CHECK(missing == 0, dir << "/" << name << ".h5: " << missing
                                    << " pairs of this rank's block have no saved state");
      side->import_rows(rows.values);
    }
  }

  const Comm& comm_;
  PretrainConfig cfg_;
  std::unique_ptr<data::PairDataset> val_;
  PretrainOptions opt_;
  RunDir run_;
  data::PairDataset dataset_;
  data::BlockPartition partition_;
  std::unique_ptr<data::Sampler> sampler_;
  negatives::GroupedSampler* grouped_ = nullptr;  // sampler_ when it groups (grit, falcon)
  std::unique_ptr<negatives::FalconScheduler> falcon_;
  negatives::FalconDraws draws_;  // the q draws that composed the current batch (FALCON)
  std::vector<double> q_window_ = std::vector<double>(4, 0.0);  // sum of mean, p5, p95; batches
  std::vector<double> reward_window_ = std::vector<double>(2, 0.0);  // sum of rewards; count
  model::Albef model_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<FlatGradients> grads_;  // params_' gradients, one buffer for the allreduce
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  data::Augmenter augment_;
  CheckpointManager ckpt_;
  SkipCounter skips_;
  int64_t uniform_steps_ = 0;  // steps of a uniform epoch (epoch 0 always)
  int64_t grouped_steps_ = 0;  // steps of a grouped epoch (GRIT / FALCON, from epoch 1)
  int64_t total_steps_ = 0;
  int64_t step_ = 0;
  int64_t epoch_ = 0;
  int64_t step_in_epoch_ = 0;
  int64_t last_exported_epoch_ = -1;
  double last_lr_ = 0;
  json last_metrics_ = json::object();
  NegMethod neg_method_ = NegMethod::kNone;
  std::unique_ptr<negatives::GlofndState> glofnd_;
  model::Albef helper_{nullptr};
  // ALBEF momentum distillation (loss.soft_targets=momentum): EMA model and feature queue.
  model::Albef momentum_{nullptr};
  FeatureQueue queue_{nullptr};
  double last_srcl_a_ = 0;
  torch::Tensor label_all_;
  FnWindow fn_;
  PhaseClock phases_;
  data::Embeddings last_embeddings_;
};

}  // namespace

int run_pretraining(const Comm& comm, const PretrainConfig& cfg, const PretrainOptions& opt) {
  log::init(comm.rank(), comm.size(), opt.run_dir + "/logs");
  Trainer trainer(comm, cfg, opt);
  return trainer.run();
}

}  // namespace fnvlp::train
