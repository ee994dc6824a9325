#pragma once
// A training method as a plug-in of the pretraining loop. The trainer owns the model, the data,
// the optimizer and the base losses (ITC + ITM + MLM); each false-negative method, sampler and
// auxiliary objective (GloFND, FNC, SRCL, GRIT and the q heuristics, FALCON, ALBEF momentum
// distillation, TCL) is one Method that the step calls at fixed points, in this order:
//
//   on_batch          the batch the sampler composed arrives (FALCON keeps its q draws)
//   build_itc         replaces the ITC inputs (momentum distillation: momentum keys + queue)
//   adjust_itc        exclusion masks / negative weights of the ITC denominator (GloFND, FNC, SRCL)
//   mlm_loss          replaces the MLM loss (momentum distillation's soft labels)
//   extra_losses      adds named weighted losses (TCL)
//   after_step        after an optimizer step that was taken (momentum EMA, FALCON's policy update)
//   skipped_step      instead, when the step was skipped (non-finite loss on some rank): undo what
//                     the earlier hooks changed, so a skipped step leaves the method's state as it
//                     was (GloFND's λ moves in adjust_itc, before the finiteness check)
//   set_epoch_embeddings between epochs, the embeddings of the rank's block (grouped samplers)
//
// The static step (train.static_step, train.cuda_graphs: train/static_step.cpp) calls the same
// hooks inside a device step that a CUDA graph captures once and replays, so there they must not
// read the device from the host, must keep every shape fixed, and must not depend on the host's
// step-to-step values (StepContext::host is empty there, step and epoch are -1). What they need of
// the host batch is staged before the step, into tensors the method allocated once:
//
//   static_key        host, before the step: what the method's device work depends on beyond the
//                     tensors' contents (GloFND's active flag and round count); part of the graph's
//                     key, agreed over the ranks (the maximum of each entry)
//   stage             host, before the step, with the agreed key: the method's staged inputs
//   build_itc .. extra_losses   as in the eager step, with StepContext::static_step set
//   commit            in the device step, after the optimizer: the step's state changes applied
//                     where StepContext::finite is 1 and undone where it is 0 (no skipped_step)
//   after_update      host: a forward pass of the updated model that the trainer runs as a graph
//                     of its own (FALCON's reward pass), after reseeding the step's dropout
//   after_device_step host, after the step (or its replay) was enqueued: window copies on the
//                     device, and FALCON's policy update (its one read of the device per step)
//   epoch_exported    between epochs, the training set's export (GloFND's exact initialisation)
//   telemetry         named metrics of a logging window (collective)
//   save / load       checkpoint state (per global pair_id or per rank)
//   export_embeddings what the method adds to its rank's rows of embeddings/epoch-EEE.h5
//
// A method sees the step through StepContext and the run through MethodEnv; nothing else of the
// trainer. Every hook is optional.
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/comm/tensors.hpp"
#include "fnvlp/core/timer.hpp"
#include "fnvlp/data/dataset.hpp"
#include "fnvlp/data/embeddings.hpp"
#include "fnvlp/data/sampler.hpp"
#include "fnvlp/loss/itc.hpp"
#include "fnvlp/loss/mlm.hpp"
#include "fnvlp/model/albef.hpp"

namespace fnvlp::data {
class Augmenter;
}

namespace fnvlp::negatives {

// The run as methods see it (references outlive the methods).
struct MethodEnv {
  const Comm& comm;
  model::Albef& model;
  const model::ModelConfig& model_config;
  const data::BlockPartition& partition;  // this rank's block: partition.block(comm.rank())
  const data::Augmenter& augment;
  int64_t num_pairs = 0;   // the training set's
  int64_t batch_size = 0;  // per rank
  int64_t epochs = 0;
  uint64_t seed = 0;
  torch::Device device{torch::kCPU};  // the model's: where a method's modules and tensors live
  bool bf16 = false;                  // train.precision bf16: forward passes under autocast
  data::PairRange block() const { return partition.block(comm.rank()); }
};

// One step's tensors, filled by the trainer as the step goes (a hook reads what exists at its
// point in the order above).
struct StepContext {
  const data::Batch& batch;  // on the model's device
  // The same batch on the host: what index bookkeeping reads (ids, masks) without a copy back.
  const data::Batch& host;
  StepClock& clock;
  int64_t step = 0, epoch = 0, total_steps = 0;
  torch::Tensor images{};        // the augmented batch
  torch::Tensor image_tokens{};  // ViT output [b, 1 + P, W]
  torch::Tensor text_hidden{};   // text encoder output [b, L, W]
  torch::Tensor img{}, txt{};    // local L2-normalised projections [b, E], with graph
  torch::Tensor temp{};          // learnable temperature (clamped)
  double soft_weight = 0;        // ALBEF alpha after the warm-up ramp
  torch::Tensor negative{};      // bool [b, N]: global columns that are negatives of each anchor
  torch::Tensor label_all{};     // int64 [N]: labels of the global columns (-1 unknown)
  loss::MlmMasking masking{};    // MLM's masked copy (undefined when MLM is off)
  // The plain MLM cross-entropy of the step (no soft labels), for methods that ask for it
  // (needs_plain_mlm: want_plain_mlm is then set).
  bool want_plain_mlm = false;
  double mlm_plain = 0;
  torch::Tensor images2{};  // TCL's second augmented view (the loader's), on the device

  // --- the static step only (see the header) ---
  bool static_step = false;
  torch::Tensor soft_weight_t{};  // float 0-dim: soft_weight
  torch::Tensor image_id_all{};   // int64 [N]: image_id of the global columns
  torch::Tensor pair_id_all{};    // int64 [N]: pair_id of the global columns (momentum's queue)
  torch::Tensor mlm_plain_t{};    // float 0-dim: mlm_plain, on the device
  // float 0-dim, 1 when every rank's loss is finite and the optimizer step was taken, 0 when it
  // was skipped: set before commit.
  torch::Tensor finite{};
};

// Where the run is at a step, for the static step's host hooks.
struct StepPosition {
  int64_t step = 0, epoch = 0, total_steps = 0;
};

struct NamedLoss {
  std::string name;
  double weight = 1;
  torch::Tensor value;  // scalar with graph
};

class Method {
 public:
  virtual ~Method() = default;
  virtual std::string name() const = 0;

  // The sampler of the run when the method composes batches (GRIT, FALCON); null otherwise.
  virtual data::Sampler* sampler() { return nullptr; }
  // The sampler must be driven from the trainer thread (its picks depend on state updated after
  // each step: FALCON's policy).
  virtual bool synchronous_sampler() const { return false; }
  // The step must fill StepContext::mlm_plain.
  virtual bool needs_plain_mlm() const { return false; }
  // The loader must make StepContext::images2, a second augmented view of the batch (TCL), from
  // step_generator(seed, step, rank, kTclViewStream).
  virtual bool wants_second_view() const { return false; }
  // The static step must stage StepContext::pair_id_all (momentum's queue).
  virtual bool needs_pair_ids() const { return false; }

  virtual void on_batch(const nlohmann::json& sampler_state) {}
  virtual bool build_itc(StepContext& s, loss::ItcInputs& in) { return false; }
  virtual void adjust_itc(StepContext& s, loss::ItcInputs& in) {}
  // Returns an undefined tensor to keep the plain MLM loss.
  virtual torch::Tensor mlm_loss(StepContext& s, const torch::Tensor& fused_at_masked) {
    return {};
  }
  virtual void extra_losses(StepContext& s, std::vector<NamedLoss>& out) {}
  // The names extra_losses adds, in its order (the static step keeps their values on the device).
  virtual std::vector<std::string> extra_loss_names() const { return {}; }
  virtual void after_step(StepContext& s) {}
  virtual void skipped_step(StepContext& s) {}

  // The static step (see the header). host: the composed batch; at: where the run is.
  virtual std::vector<int64_t> static_key(const data::Batch& host, const StepPosition& at) {
    return {};
  }
  // key: the agreed static_key (every rank's maximum, entry by entry).
  virtual void stage(const data::Batch& host, const StepPosition& at,
                     const std::vector<int64_t>& key) {}
  virtual void commit(StepContext& s) {}
  // Whether the step at `at` wants after_update; after_update runs with StepContext::static_step
  // set and the step's staged inputs.
  virtual bool wants_after_update(const StepPosition& at) const { return false; }
  virtual void after_update(StepContext& s) {}
  virtual void after_device_step(const StepPosition& at) {}

  // The embeddings of this rank's block for `epoch` (computed at the end of epoch - 1, or read
  // back from its export on resume): float [block, E].
  virtual bool wants_epoch_embeddings() const { return false; }
  virtual void set_epoch_embeddings(int64_t epoch, const torch::Tensor& img,
                                    const torch::Tensor& txt) {}

  // The training set's export of the epoch before `next_epoch` (embeddings/epoch-EEE.h5, written
  // and closed), before next_epoch starts: collective, called when wants_epoch_export says so
  // (the trainer refuses a run that needs it with train.export_embeddings off).
  virtual bool wants_epoch_export(int64_t next_epoch) const { return false; }
  virtual void epoch_exported(int64_t next_epoch, const std::string& path) {}

  // Collective: adds this window's metrics to `m` and starts a new window.
  virtual void telemetry(nlohmann::json& m) {}

  // Collective, on every rank, inside CheckpointManager::save / at resume. `world_size` is the
  // rank count that wrote the checkpoint.
  virtual void save(const std::string& dir) {}
  // save() calls a collective helper (save_per_pair): it then runs before every local write.
  virtual bool collective_save() const { return false; }
  virtual void load(const std::string& dir, int world_size) {}
  // A resume on other data (fnvlp-pretrain --resume-data changed): only the state that is not
  // per pair (a learned policy, a momentum encoder); the per-pair state stays as constructed.
  virtual void load_on_changed_data(const std::string& dir, int world_size) {}
  // What such a resume starts afresh, in words ("" when nothing), for its log line and summary.
  virtual std::string per_pair_state() const { return ""; }
  // Checkpoint bytes this method adds (for the free-space check before the first step).
  virtual uint64_t state_bytes() const { return 0; }

  // Adds per-pair columns to this rank's block of an export (rows e.first.., pair_id order).
  virtual void export_embeddings(data::Embeddings& e) {}
};

// Per-step seeding: every random draw of step s on rank r comes from a generator seeded by
// (seed, s, r, stream), so a resumed run draws exactly what the uninterrupted one drew without
// saving generator states. Stream 0 seeds torch's global generator (dropout).
enum StepStream : uint64_t {
  kDropoutStream = 0,
  kAugmentStream = 1,
  kItmStream = 2,
  kMlmStream = 3,
  kTclViewStream = 4,
  kMlmDropoutStream = 5  // dropout of the MLM text and fusion passes (FALCON's reward repeats it)
};
torch::Generator step_generator(uint64_t seed, int64_t step, int rank, uint64_t stream);
// Seeds torch's global generator (dropout draws) for `step` on `rank`; `stream` restarts the draws
// at a fixed point of the step, so that a later pass over the same inputs can repeat them.
void seed_dropout(uint64_t seed, int64_t step, int rank, uint64_t stream = kDropoutStream);

using fnvlp::allgather_ids;
using fnvlp::to_vector;

}  // namespace fnvlp::negatives
