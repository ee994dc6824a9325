#pragma once
// Image-text contrastive loss (ITC) against the global batch, with the hooks the false-negative
// methods plug into: per-anchor exclusion masks (GloFND, FNC), per-pair negative weights (SRCL)
// and soft targets (GRIT/MAFA pseudo-targets by default, or ALBEF momentum distillation).
//
// Columns. Every rank holds b local pairs; the trainer all-gathers the image and text embeddings
// (no gradient) into [N, E] tensors whose rows offset..offset+b are this rank's (N is the global
// batch B, or B plus a queue appended after the gathered rows). The loss replaces those rows by
// the local tensors, so that the positives and the in-rank negatives carry gradient.
//
// Exact data-parallel gradient (OpenCLIP's "local loss + gather with grad", done explicitly).
// Anchor i on rank r also has a gradient with respect to the embeddings of other ranks (they are
// its negatives). A gather without gradient (ALBEF's concat_all_gather) drops those terms, so the
// averaged gradient differs from the single-process one on the concatenated batch. With
// `cross_rank_grad` the gathered tensors become autograd leaves; the trainer then
//   1. calls itc_gathered_grads(result)    -> [N, E] gradients of this rank's loss per global row,
//   2. sums them over ranks (Comm allreduce of the float data, in place),
//   3. adds itc_cross_rank_term(inputs, summed) to the loss it backpropagates (one backward).
// With gradients averaged over R ranks as usual (and equal local batch sizes b) the update is then
// exactly the gradient of the mean loss over the B = R*b anchors of the global batch. FastCLIP
// reaches the same result by all-gathering per-anchor denominators instead; that needs every
// rank's masks and weights for the other ranks' anchors, which fnvlp keeps partitioned (GloFND's
// lambda lives only on the owning rank), so fnvlp exchanges the [N, E] gradients instead
// (2*N*E floats per step, small beside the model's gradient).
//
// ALBEF momentum distillation (Li et al. 2021, "Align before Fuse", §3.3; model_pretrain.py and
// model_retrieval.py) uses `momentum_keys`: the columns are constant keys (the all-gathered
// momentum features followed by the queue) and the local rows are NOT replaced by the online
// embeddings. No gradient flows to any column, so the loss of anchor i depends only on anchor i's
// online embedding: the gradient of the mean loss over the B global anchors is the average of the
// ranks' local gradients, which plain gradient averaging already gives (cross_rank_grad must be
// off; there is nothing to exchange). See momentum_itc_inputs for the targets.
#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace fnvlp::loss {

// Where the soft part of the ITC target comes from.
enum class SoftTargets {
  kNone,    // hard targets only (soft_weight ignored)
  kPseudo,  // GRIT-VLP / MAFA pseudo-targets from the current, detached similarities (default)
  kGiven,   // targets supplied by the caller (ALBEF momentum distillation: softmax of the
            // momentum model's logits, see momentum_itc_inputs)
};
// "none" | "pseudo" | "given" (alias "momentum"); throws fnvlp::Error otherwise.
SoftTargets parse_soft_targets(const std::string& name);
const char* to_string(SoftTargets mode);

struct ItcInputs {
  torch::Tensor img, txt;          // local L2-normalised embeddings [b, E] (with graph)
  torch::Tensor img_all, txt_all;  // gathered [N, E], rows offset..offset+b are this rank's
  int64_t offset = 0;
  torch::Tensor temp;  // scalar temperature (learnable, already clamped)
  // int64 [b] and [N]: equal image_id = known positives of each other, never negatives.
  torch::Tensor image_id, image_id_all;
  // Optional bool [b, N]: true removes that negative from the softmax denominator. Ignored on
  // positive (same image_id) columns.
  torch::Tensor exclude_i2t, exclude_t2i;
  // Optional float [b, N], >= 0: multiplies exp(s/temp) of a negative in the denominator
  // (SRCL). Treated as a constant (detached); ignored on positive columns; 0 acts as exclusion.
  torch::Tensor weight_i2t, weight_t2i;
  SoftTargets soft = SoftTargets::kPseudo;
  torch::Tensor soft_i2t, soft_t2i;  // [b, N] rows summing to 1 (only with SoftTargets::kGiven)
  double soft_weight = 0.4;          // ALBEF alpha: target = (1 - a) * hard + a * soft
  // Optional: alpha as a 0-dim float tensor on the embeddings' device, replacing soft_weight (a
  // step captured in a CUDA graph reads the warm-up ramp's value from memory, not from the host).
  torch::Tensor soft_weight_t;
  // Make img_all/txt_all autograd leaves so that itc_gathered_grads() can read the gradient this
  // rank's anchors send to every global row (needed with more than one rank, see above).
  bool cross_rank_grad = false;
  // img_all/txt_all are constant keys (ALBEF momentum features + queue): rows offset..offset+b
  // are used as they are, not replaced by img/txt. Excludes cross_rank_grad.
  bool momentum_keys = false;
  // The negative weights' check (finite, >= 0) as ItcResult::inputs_ok instead of an error: the
  // static step reads nothing back, and folds the flag into its finite-loss decision.
  bool check_on_device = false;
};

struct ItcResult {
  torch::Tensor loss;                // scalar: (loss_i2t + loss_t2i) / 2, with graph
  torch::Tensor loss_i2t, loss_t2i;  // scalars, mean over local anchors, with graph
  // Logits s/temp [b, N] before masks and weights, detached (ITM sampling, FALCON, telemetry).
  torch::Tensor sim_i2t, sim_t2i;
  torch::Tensor positive;  // bool [b, N]: same image_id as the anchor
  // Telemetry, 0-dim detached tensors (read with .item() only when logging, avoiding syncs):
  torch::Tensor excluded_i2t, excluded_t2i;  // int64: negatives removed from the denominators
  torch::Tensor extra_positives;             // int64: same-image columns besides the own pair
  torch::Tensor acc_i2t, acc_t2i;  // float: fraction of anchors whose top column is a positive
  // Only with cross_rank_grad: the leaves standing for the gathered tensors.
  torch::Tensor img_all_leaf, txt_all_leaf;
  // Only with check_on_device and weights: bool 0-dim, whether every weight is finite and >= 0.
  torch::Tensor inputs_ok;
};

ItcResult itc_loss(const ItcInputs& in);

// Soft targets from logits [b, N] (already divided by the temperature): row-wise softmax of the
// detached logits, restricted to `allowed` (optional bool [b, N]) when given. For ALBEF momentum
// distillation pass the momentum model's logits; GRIT pseudo-targets are built inside itc_loss.
torch::Tensor soft_targets_from_sim(const torch::Tensor& logits,
                                    const torch::Tensor& allowed = torch::Tensor());

// ALBEF momentum distillation (Li et al. 2021, §3.3, ITC with queues). With the momentum
// features f_m of the global batch (all-gathered, rows offset..offset+b are this rank's) and the
// queue Q of earlier momentum features, the keys are K_I = [f_m^I ; Q_I], K_T = [f_m^T ; Q_T]
// (N = B + |Q| columns, image ids likewise), and for a local anchor i:
//   s_i2t(i)   = f^I_i . K_T / temp           (online image feature, with graph)
//   s_i2t_m(i) = f^I_m,i . K_T / temp         (momentum image feature, constant)
//   q_i2t(i)   = softmax(s_i2t_m(i))           (ALBEF's sim_i2t_targets before mixing)
//   y_i2t(i)   = (1 - alpha) * hard(i) + alpha * q_i2t(i),  hard(i)_j = 1[id_i = id_j] / #same-id
//   L_i2t      = mean_i -sum_j y_i2t(i)_j log softmax(s_i2t(i))_j,   and t2i symmetrically;
// temp is the online (learnable, clamped) temperature, detached in the momentum logits as in
// ALBEF. hard uses image ids over every column, queue included (ALBEF model_retrieval.py
// idx_queue): an earlier feature of the anchor's image is a positive, never a negative.
struct MomentumItc {
  torch::Tensor img, txt;                // online local embeddings [b, E] (with graph)
  torch::Tensor img_m, txt_m;            // momentum local embeddings [b, E]
  torch::Tensor img_m_all, txt_m_all;    // gathered momentum embeddings [B, E]
  int64_t offset = 0;                    // first row of this rank in the gathered rows
  torch::Tensor image_id, image_id_all;  // int64 [b] and [B]
  // Queue (only the filled rows; may have 0 rows): [Q, E], [Q, E] and int64 [Q].
  torch::Tensor queue_img, queue_txt, queue_image_id;
  // Optional bool [Q]: the rows that hold a feature. Given, the queue is passed whole (a shape that
  // does not change while it fills: the static step) and the empty rows leave the denominators
  // and the soft targets through the exclusion masks; their image_id must be -1 (a queue's rows
  // before their first write), or a row of the anchor's image would still count as a positive.
  torch::Tensor queue_valid;
  torch::Tensor temp;  // online temperature (scalar)
  double alpha = 0.4;  // ALBEF alpha (with its warm-up ramp applied by the caller)
};
// The ItcInputs of the equations above (momentum_keys on, SoftTargets::kGiven with the momentum
// soft targets, cross_rank_grad off); pass them to itc_loss.
ItcInputs momentum_itc_inputs(const MomentumItc& m);

// Detached cosine similarities of the local anchors against the gathered columns, [b, N] each
// (what GloFND / FNC threshold and SRCL weighs before calling itc_loss). Uses the gathered rows
// as they are (equal in value to the local ones).
struct ItcCosine {
  torch::Tensor i2t, t2i;
};
ItcCosine itc_cosine(const ItcInputs& in);

// Gradient of result.loss with respect to every gathered row, [N, E] each (zero on this rank's
// own rows, which the loss reads from the local tensors). Requires cross_rank_grad.
struct ItcGatheredGrads {
  torch::Tensor img_all, txt_all;
};
ItcGatheredGrads itc_gathered_grads(const ItcResult& result);

// Given the gathered gradients summed over all ranks, a scalar whose gradient with respect to the
// local embeddings is the rows offset..offset+b of `summed` (the other ranks' anchors' share):
//   T = sum_k <img_k, G_img[offset + k]> + <txt_k, G_txt[offset + k]>, G constant.
// Its value is meaningless; add it to the loss that is backpropagated, not to the logged loss.
torch::Tensor itc_cross_rank_term(const ItcInputs& in, const ItcGatheredGrads& summed);

}  // namespace fnvlp::loss
