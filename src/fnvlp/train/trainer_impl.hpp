#pragma once
// The pretraining loop's class, shared by trainer.cpp (construction and the loop), step.cpp (the
// eager step), static_step.cpp (the static step CUDA graphs capture) and trainer_state.cpp (epoch
// ends, exports, checkpoints and resume). It is made of parts with one job each, built from their
// own configuration sections: TrainingData (training_data.hpp), RunDevices (run_devices.hpp),
// Optimization (optimization.hpp), MethodSet (method_set.hpp) and the static step's state below.
// Private to train/.
#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "fnvlp/comm/flat_gradients.hpp"
#include "fnvlp/comm/nccl.hpp"
#include "fnvlp/comm/tensors.hpp"
#include "fnvlp/comm/watchdog.hpp"
#include "fnvlp/core/timer.hpp"
#include "fnvlp/data/augment.hpp"
#include "fnvlp/data/dataset.hpp"
#include "fnvlp/data/embeddings.hpp"
#include "fnvlp/data/sampler.hpp"
#include "fnvlp/loss/itc.hpp"
#include "fnvlp/model/albef.hpp"
#include "fnvlp/negatives/grouped_sampler.hpp"
#include "fnvlp/negatives/method.hpp"
#include "fnvlp/store/checkpoint.hpp"
#include "fnvlp/store/components.hpp"
#include "fnvlp/store/pretrained.hpp"
#include "fnvlp/store/run_dir.hpp"
#include "fnvlp/train/batch_source.hpp"
#include "fnvlp/train/batch_upload.hpp"
#include "fnvlp/train/device.hpp"
#include "fnvlp/train/epoch_cache.hpp"
#include "fnvlp/train/method_set.hpp"
#include "fnvlp/train/non_finite.hpp"
#include "fnvlp/train/optimization.hpp"
#include "fnvlp/train/pretrain_config.hpp"
#include "fnvlp/train/run_devices.hpp"
#include "fnvlp/train/step_telemetry.hpp"
#include "fnvlp/train/trainer.hpp"
#include "fnvlp/train/training_data.hpp"

namespace fnvlp::train {

class StepProfiler;
class StepGraphs;

// The static step's inputs (train.static_step, train.cuda_graphs): tensors on the model's device at
// fixed addresses, refilled before every step, so that a CUDA graph captured from one step reads
// the next step's data. One set per padded MLM row count (the step's only varying shape).
struct StaticInputs {
  torch::Tensor images;                      // float [b, 3, S, S], augmented
  torch::Tensor images2;                     // the second view (TCL), else undefined
  torch::Tensor tokens, attention_mask;      // int64 [b, L]
  torch::Tensor image_id, image_id_all;      // int64 [b], [N]
  torch::Tensor label, label_all;            // int64 [b], [N] (-1 unknown)
  torch::Tensor pair_id, pair_id_all;        // int64 [b], [N] where a method needs them
  torch::Tensor masked_ids;                  // int64 [b, L]: MLM's masked copy
  torch::Tensor mlm_positions, mlm_targets;  // int64 [rows]: padded (loss/mlm.hpp pad_positions)
  torch::Tensor lr, soft_weight, inject;     // float 0-dim; inject: 1, or NaN at an injected fault
  int64_t offset = 0;                        // this rank's first row of the gathered batch
};

// The static step's state (train.static_step, train.cuda_graphs; static_step.cpp).
struct StaticStepState {
  StaticStepState();
  ~StaticStepState();
  bool on = false;
  std::map<int64_t, StaticInputs> inputs;  // per padded MLM row count
  // The agreed keys (MLM rows, then each method's static_key) and their dense ids; the entries
  // each method added to the current one.
  std::map<std::vector<int64_t>, int64_t> key_ids;
  std::vector<size_t> key_sizes;
  // float [5 + extras]: the last step's itc, itm, mlm, total, finite and the methods' losses
  torch::Tensor out;
  std::vector<std::string> extra_names;
  torch::Tensor window;                           // float [log_every, 5 + extras]: not flushed
  std::vector<std::pair<int64_t, int64_t>> rows;  // their (step, global samples)
  // sampler.embeddings=cached: the step's embeddings [2, b, E] and the window of them (with the
  // batches' pair ids), recorded into the epoch cache at the flush
  torch::Tensor cache_rows;
  std::vector<torch::Tensor> cache_window, cache_ids;
  std::unique_ptr<StepGraphs> graphs;
  std::unique_ptr<StepGraphs> update_graphs;  // Method::after_update's passes
  // What each graph's collectives move (counted while it was captured), and the sum over the
  // replays so far (traffic() adds it: a replay runs no host code that could count).
  std::map<std::pair<const StepGraphs*, int64_t>, CommTraffic> graph_traffic;
  CommTraffic replayed_traffic;
};

using store::CheckpointInfo;
using store::CheckpointManager;
using store::Component;
using store::Components;
using store::load_module;
using store::load_optimizer;
using store::load_pretrained_weights;
using store::MetricsWriter;
using store::module_bytes;
using store::optimizer_state_bytes;
using store::rank_file;
using store::read_file;
using store::RunDir;
using store::RunStatus;
using store::save_module;
using store::save_optimizer;
using store::write_file;
using store::write_model_config;

class Trainer {
 public:
  Trainer(const Comm& comm, const PretrainConfig& cfg, const PretrainOptions& opt);
  ~Trainer();

  // The training loop under `dog` (created before the constructor, so start-up is watched too).
  int run(Watchdog& dog);
  // summary.json of a run that ends with an exception (main thread): status failed, the exit
  // code, the message and the progress so far. `agreed`: every rank holds the same error, rank 0
  // writes; otherwise this rank writes it and names itself.
  void write_failure_summary(int exit_code, const std::string& why, bool agreed,
                             const nlohmann::json& extra = nlohmann::json::object()) const;

 private:
  // --- Trainer::run in order (trainer.cpp) ---
  // Checks the disk has room for two checkpoints, resumes from the newest one if any and moves
  // its state to the model's device. True when it resumed.
  bool resume_at_start(Watchdog& dog);
  // What the watchdog's and the NCCL watch's threads write to summary.json before they end the job.
  void install_last_words(Watchdog& dog);
  // Augmentation (and the copy to the GPU) on the prefetch thread; the loader at the resumed step.
  void start_loader(BatchSource& loader, bool resumed);
  // Steps until the last one or an agreed stop; kPreempted when stopped (checkpointed).
  RunStatus train_loop(Watchdog& dog, MetricsWriter& metrics, BatchSource& loader);
  // One training step, profiled and its traffic counted.
  void step_once(const data::Batch& batch, StepProfiler& profiler);
  // Between two steps: logging, agreed stop (true: checkpointed, stop now), on-demand export,
  // periodic checkpoint.
  bool between_steps(Watchdog& dog, MetricsWriter& metrics, const BatchSource& loader);

  uint64_t seed() const { return static_cast<uint64_t>(cfg_.train.seed); }
  int64_t epoch_steps(int64_t epoch) const {
    return epoch == 0 ? methods_.uniform_steps : methods_.grouped_steps;
  }

  // One optimizer step (or a skipped one), read top to bottom (step.cpp); this rank's losses.
  StepLosses train_step(const data::Batch& batch);

  // --- The static step (static_step.cpp): the same training step with shapes that do not change
  // between steps and no read of the device by the host, the step that CUDA graphs capture. ---
  // Sets static_ from the configuration, refuses (UsageError) what the static step cannot run,
  // allocates its buffers. Constructor, after the methods exist.
  void init_static_step();
  // Why this run cannot take it ("" when it can).
  std::string static_step_refusal() const;
  // One step: inputs staged, then the device work (eager, or a CUDA graph's replay); its losses and
  // finite flag stay on the device until flush_static_losses.
  void static_train_step(const data::Batch& host_batch);
  // The dense id of an agreed key (logged once per new key).
  int64_t static_key_id(const std::vector<int64_t>& key);
  // graphs.run(id, work), with the traffic of a replayed graph counted and NCCL watching it.
  void run_graph(StepGraphs& graphs, int64_t id, const std::function<void()>& work);
  // The inputs of MLM row count `rows`, refilled from the batch and the padded masking.
  StaticInputs& stage_static_inputs(const data::Batch& batch, const data::Batch& host,
                                    const loss::MlmMasking& masking, int64_t rows);
  // The methods' StepContext of a staged step (dev: its device batch, filled here).
  negatives::StepContext static_context(const StaticInputs& in, data::Batch& dev,
                                        const data::Batch& no_host);
  // Forward, losses, backward, gradient average, the flagged optimizer step and the methods'
  // commits, from `in` only.
  void static_device_step(const StaticInputs& in);
  torch::Tensor static_forward(const StaticInputs& in, negatives::StepContext& s,
                               loss::ItcInputs& itc_in, loss::ItcResult& itc);
  // A method's pass of the updated model (Method::after_update), from `in` only.
  void static_after_update(const StaticInputs& in, negatives::Method& method);
  // The steps' device losses since the last flush into the telemetry and the skip counter (which
  // throws on too many non-finite steps in a row), and the cached embeddings into cache_: at every
  // log line, epoch end, checkpoint and the end.
  void flush_static_losses();

  // The step's learning rate, dropout seed and fault injection points.
  void begin_step(const data::Batch& batch);

  // The local embeddings, the ITC inputs against the global batch (embeddings all-gathered
  // without gradient, the exact gradient restored through the cross-rank term) and the methods'
  // masks, weights or keys.
  loss::ItcInputs itc_inputs(negatives::StepContext& s);

  // ITM with hard negatives from the local batch (the fusion encoder needs their tokens); the
  // methods' excluded negatives are not drawn (negatives.filter_itm). fuse_cls runs the last
  // fusion layer for the [CLS] rows alone (exact; model/albef.hpp FusionPairs).
  torch::Tensor itm_loss(negatives::StepContext& s, const loss::ItcInputs& in,
                         const loss::ItcResult& itc, const std::vector<torch::Tensor>& image_keys);

  // MLM on a masked copy of the captions, conditioned on the image, at the masked positions only
  // (skipped at weight 0, as in retrieval fine-tuning: a third of the step's compute).
  torch::Tensor mlm_loss(negatives::StepContext& s, const std::vector<torch::Tensor>& image_keys);

  // The local image and text embeddings [b, E] gathered over the ranks in one collective.
  std::pair<torch::Tensor, torch::Tensor> gather_embeddings(const torch::Tensor& img,
                                                            const torch::Tensor& txt,
                                                            int64_t* offset);
  // image_id and label of the global batch [N] each, in one exchange (on the host).
  std::pair<torch::Tensor, torch::Tensor> gather_ids_and_labels(const data::Batch& host);
  // ITC's cross-rank gradient sums of the gathered image and text rows, in one all-reduce.
  void sum_gathered_grads(loss::ItcGatheredGrads& g);
  // The backward of `total` and the gradients averaged over the ranks: the buckets overlapped
  // with it (comm.bucket_mb), or one all-reduce after it. Laps the clock's backward and comm.
  void backward_and_average(const torch::Tensor& total);

  bool bf16() const { return cfg_.train.precision == Precision::kBf16; }

  void log_progress(MetricsWriter& metrics, const BatchSource& loader);
  // What this rank's communicators (MPI and NCCL) moved so far.
  CommTraffic traffic() const;

  void finish_epoch(Watchdog& dog, MetricsWriter& metrics);

  // A resumed grouped epoch E uses the embeddings exported at the end of epoch E - 1.
  void restore_epoch_embeddings();
  void start_on_changed_data();

  void call_epoch_hook(Watchdog& dog, MetricsWriter& metrics);

  // Every pair's embeddings with what the methods add (GloFND's λ): what the analysis job reads.
  data::Embeddings embed_training_set();
  data::Embeddings cached_snapshot();

  // SIGUSR2 (agree_export): embeddings/step-SSSSSSS.h5 of the current weights, then training goes
  // on. The samplers' embeddings stay those of the epoch end and no RNG stream is consumed, so the
  // run's trajectory is unchanged.
  void export_on_demand(Watchdog& dog);

  // Collective: embeddings/epoch-EEE.h5 of the current weights; returns this rank's block of it.
  data::Embeddings export_embeddings(Watchdog& dog, MetricsWriter& metrics);
  // Zero-shot retrieval on --val (every epoch end, whether or not the training set is exported).
  void validate_retrieval(Watchdog& dog, MetricsWriter& metrics);

  // The checkpoint's pieces: each method's state (collective ones first), this rank's sampler
  // cursor, and on rank 0 the model, its architecture, the optimizer and the loop's counters.
  void register_components();
  Component::SaveFn root_only(Component::SaveFn fn);
  void save_loop_state(const std::string& dir);
  void load_loop_state(const std::string& dir);
  // The sampler's cursor: this rank's own, or rank 0's from a checkpoint of another rank count
  // (continue_on_new_ranks re-splits it).
  void load_sampler_state(const std::string& dir, int world_size);
  // A checkpoint of another rank count, mid-epoch: the epoch goes on with the pairs it has not yet
  // drawn, spread over the new blocks (UniformSampler's re-split, also a grouped method's uniform
  // epoch 0; GroupedSampler::resplit for a grouped epoch). A grouped epoch already re-split once
  // restarts, and a log line says so. Sets step_in_epoch_ so the epoch ends on an agreed count.
  void continue_on_new_ranks();
  // Steps of the whole run at `ranks` ranks of `batch` pairs: the learning-rate schedule's length
  // in steps of the first launch's global batch.
  int64_t planned_steps(int ranks, int64_t batch) const;
  // The loop's last step from where the run stands (its epochs, or train.max_steps counted in
  // samples of the first launch's global batch).
  int64_t last_step() const;

  void save_checkpoint(Watchdog& dog);

  bool maybe_resume();

  const Comm& comm_;
  PretrainConfig cfg_;  // checked, its fault knobs installed (trainer.cpp startup_config)
  PretrainOptions opt_;
  RunDir run_;
  TrainingData data_;
  CheckpointManager ckpt_;
  SkipCounter skips_;
  RunDevices devices_;
  // What the training steps moved since the last log line, which was at step traffic_step_.
  CommTraffic step_traffic_;
  int64_t traffic_step_ = 0;
  StepTelemetry telemetry_;
  model::Albef model_;
  Optimization optim_;
  MethodSet methods_;
  Components components_;
  nlohmann::json sampler_state_;  // the cursor after the last step taken
  bool resume_in_epoch_ = false;
  int64_t loop_step_in_epoch_ = 0;
  int64_t total_steps_ = 0;
  // Samples consumed by all ranks together; the schedule's global batch is that of the run's first
  // launch (schedule_ranks_ x schedule_batch_), kept through resumes on other rank counts.
  int64_t samples_seen_ = 0;
  int schedule_ranks_ = 0;
  int64_t schedule_batch_ = 0;
  int64_t schedule_steps_ = 0;  // planned_steps(schedule_ranks_, schedule_batch_)
  int resplit_from_ = 0;  // the checkpoint's rank count when its epoch must be re-split (0: no)
  std::vector<nlohmann::json> old_grouped_states_;  // every old rank's cursor, for resplit()
  // Set by a resume with --resume-data changed: the checkpoint, both data identities, the step,
  // the new epoch and what started afresh (summary.json's resumed_on_changed_data).
  nlohmann::json data_change_;
  int64_t step_ = 0;
  int64_t epoch_ = 0;
  int64_t step_in_epoch_ = 0;
  int64_t last_exported_epoch_ = -1;
  int64_t last_validated_epoch_ = -1;
  double last_lr_ = 0;
  StepClock clock_;
  EpochCache cache_;  // sampler.embeddings=cached
  StaticStepState static_;
};

}  // namespace fnvlp::train
