#pragma once
// GloFND: a learned per-anchor threshold λ_i for every image and every text of the dataset
// (Balmaseda et al., ICML 2025, glofnd.txt §3.1–3.3, App. B, App. D.2).
//
// λ_i approximates the (1−α)-quantile of anchor i's similarities to ALL its negatives in the
// dataset (eq. 2):  λ_i = argmin_{ν ∈ [−1, 1]}  ν·α + (1/|R_i|) Σ_{r ∈ R_i} (r − ν)_+ ,
// learned one mini-batch at a time from the stochastic subgradient (§3.2.1)
//     ∇̂_i = α − (1/|B_i⁻|) Σ_{x ∈ B_i⁻} 1[sim(z_i, x) > λ_i]
// over the anchor's negatives in the global batch B_i⁻, with Adam (App. D.2: lr 0.05,
// betas (0.9, 0.98)) and the projection Π_[−1,1]. Bimodal (§3.3): λ_I[i] for image anchor i
// against text negatives, λ_T[i] for text anchor i against image negatives. Negatives with
// sim > λ_i leave the contrastive denominator (eq. 3: S̃_i⁻ = {x ∈ S_i⁻ : sim ≤ λ_i}).
//
// Partitioned state (ARCHITECTURE.md §7): a rank holds λ, the Adam moments and the update count
// only for the pairs of its own block, the only anchors it ever puts in its batches, so λ never
// travels per step and memory is O(N / R) per rank. Bias correction uses each anchor's own
// update count (an anchor is updated once per epoch, a global step counter would over-correct);
// bias_correction=epoch takes the training epoch + 1 instead, as the authors' code does.
// The state is saved per global pair_id (store/checkpoint.hpp: save_per_pair), so a run resumes
// on another rank count by loading the pair_ids of its new block.
//
// The state lives on the model's device and a step's update is tensor arithmetic there: nothing
// is read back to the host per step. The static step (train/static_step.cpp, what CUDA graphs
// capture) runs the same update on inputs staged at fixed addresses: each round writes every row,
// the rows outside the round to a spare slot past the block, so no shape depends on the batch. The
// update repeats the scalar recurrence's double-precision operations one by one (each rounded as
// the scalar code rounds it; the bias corrections 1 − β^t come from a host table of std::pow), so
// that CPU and CUDA give the same λ for the same counts (a CUDA unit case compares them) and the
// CPU result is the scalar loop's bit for bit.
#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <map>
#include <vector>

#include "fnvlp/data/sampler.hpp"
#include "fnvlp/negatives/method_config.hpp"

namespace fnvlp::negatives {

// One side (image anchors or text anchors) of the rank's block.
class GlofndSide {
 public:
  GlofndSide(data::PairRange block, const GlofndOptions& opt, torch::Device device = torch::kCPU);

  // cos: detached cosine similarities [b, N] of the b local anchors (pair_ids, all inside the
  // block) against the global batch; negative: bool [b, N], true where the column is a negative
  // of the anchor (not the own pair, not a pair sharing its image_id); both on the state's
  // device. Updates λ of the b anchors by one Adam step (eq. 4 with Adam), then returns the
  // exclusion mask negative & (cos > λ_updated) [b, N], as the algorithm updates λ before
  // filtering (§3.2). An anchor listed twice is updated twice, in row order, both times with the
  // counts against its λ from before the call.
  torch::Tensor update_and_filter(const torch::Tensor& cos, const torch::Tensor& negative,
                                  const std::vector<int64_t>& pair_ids);
  // λ of each row of the last update_and_filter after that row's update (float [b], the state's
  // device); rows without a negative keep the λ they had.
  const torch::Tensor& last_lambdas() const { return last_; }
  // Restores λ, the moments and the counts the last update_and_filter changed (a step skipped
  // for a non-finite loss must not move them); a second call changes nothing.
  void undo_last_update();
  // --- the static step: the same update, every shape fixed, the skip decided on the device ---
  // Host, before the step: the anchors of the rows (pair_ids, all inside the block) for an update
  // in `rounds` rounds, at least their own (an anchor listed k times needs k; the extra rounds,
  // where the ranks agreed on a larger count, change nothing). One set of fixed-address tensors
  // per round count.
  void stage(const std::vector<int64_t>& pair_ids, int64_t rounds);
  // In the step: update_and_filter over the staged rows (λ, m, v and the counts are written now,
  // the values before kept for commit). Returns the exclusion mask.
  torch::Tensor update_and_filter_staged(const torch::Tensor& cos, const torch::Tensor& negative);
  // In the step, once the ranks agreed: the update stays where finite (float 0-dim) is 1, the
  // values before it come back where it is 0.
  void commit(const torch::Tensor& finite);
  // λ of each row after the last staged update (float [b]; a tensor allocated by stage, written in
  // the step: what a host reads after a replay).
  const torch::Tensor& staged_lambdas() const { return staged_last_; }

  // Exclusion mask with the current λ, no update (before the start epoch: false everywhere is
  // what the trainer wants; this is for evaluation and tests).
  torch::Tensor filter(const torch::Tensor& cos, const torch::Tensor& negative,
                       const std::vector<int64_t>& pair_ids) const;

  // λ of every anchor of the block (block order) set to `lambda` (NaN entries keep their λ), Adam
  // moments and update counts restarted (reanchor_moments=reset: a fresh tracker from that point)
  // or kept (keep: the next step continues the tracker's own; exact_init).
  void restart_from(const std::vector<float>& lambda);
  // The training epoch of the updates that follow (bias_correction=epoch reads it; host, before
  // the step: written into a tensor at a fixed address, so a captured step sees each epoch's).
  void set_epoch(int64_t epoch);

  // Host copies (each waits for the device): for checkpoints, exports and tests.
  float lambda(int64_t pair_id) const;
  std::vector<float> lambdas() const;  // block order
  const data::PairRange& block() const { return block_; }
  const torch::Device& device() const { return device_; }
  // Bytes of state held (λ, m, v, count), for the memory benchmark.
  size_t state_bytes() const;

  // Per-pair rows for checkpoints: [λ, m, v, count] for each pair of the block, in block order.
  std::vector<float> export_rows() const;
  void import_rows(const std::vector<float>& rows);  // the same layout, block order
  static constexpr int64_t kCols = 4;

 private:
  int64_t local(int64_t pair_id) const;
  std::vector<int64_t> local_indices(const std::vector<int64_t>& pair_ids) const;
  torch::Tensor local_index(const std::vector<int64_t>& pair_ids) const;  // on the device
  // One Adam step of the rows: their λ, m, v, count before, the subgradient g (double) and
  // whether the row has a sample (ok); returns λ, m, v, count after (the old values where !ok).
  std::array<torch::Tensor, 4> adam_rows(const torch::Tensor& lam, const torch::Tensor& m_old,
                                         const torch::Tensor& v_old, const torch::Tensor& c_old,
                                         const torch::Tensor& g, const torch::Tensor& ok) const;
  // The four state tensors of the whole store, spare slot included (index_copy_ targets).
  std::array<torch::Tensor*, 4> store() { return {&lambda_all_, &m_all_, &v_all_, &count_all_}; }

  data::PairRange block_;
  GlofndOptions opt_;
  torch::Device device_;
  // float [block + 1] (count: int32): the block's anchors, then a spare slot that the static
  // update writes its padding rows to; lambda_, m_, v_ and count_ are the block's views of them.
  torch::Tensor lambda_all_, m_all_, v_all_, count_all_;
  torch::Tensor lambda_, m_, v_, count_;
  torch::Tensor last_;  // see last_lambdas()
  // (1 − β1^t, 1 − β2^t) as double [T, 2] on the device, T - 1 the count from which both are
  // exactly 1 (computed once: β^t only shrinks), so every count indexes it after a clamp.
  torch::Tensor bias_;
  int64_t bias_saturated_ = 0;
  // bias_correction=epoch: int64 [1], min(epoch + 1, bias_saturated_), the row of bias_ to use.
  torch::Tensor epoch_t_;
  int64_t epoch_t_host_ = -1;
  // The last update's anchors (device indices) and their λ, m, v, count before it.
  torch::Tensor undo_index_, undo_lambda_, undo_m_, undo_v_, undo_count_;
  // The static step's staged rows per round count: local indices [b], the round's targets
  // [rounds, b] (the spare slot for rows outside the round) and membership [rounds, b].
  struct Staged {
    torch::Tensor index, round_index, in_round;
  };
  std::map<int64_t, Staged> staged_;
  const Staged* current_ = nullptr;
  torch::Tensor staged_last_;
};

// λ_I and λ_T of the rank's block.
struct GlofndState {
  GlofndState(data::PairRange block, const GlofndOptions& opt, torch::Device device = torch::kCPU)
      : image(block, opt, device), text(block, opt, device) {}
  GlofndSide image, text;
};

// FNC baseline (GloFND §4; Huynh et al.): in-batch, per anchor the k = ⌈α·n_neg⌉ most similar
// negatives (n_neg: the anchor's negatives in the global batch) are false negatives. Returns the
// exclusion mask [b, N] on cos's device, computed there; ties at the k-th value are broken by
// column index (a stable sort: torch::topk's choice among ties is not fixed across builds).
torch::Tensor fnc_filter(const torch::Tensor& cos, const torch::Tensor& negative, double alpha);

// Precision / recall counts of an exclusion mask against same-label ground truth (labels -1 are
// unknown and count as neither). label_row [b], label_col [N].
struct FnCounts {
  int64_t filtered = 0;        // excluded negatives
  int64_t filtered_true = 0;   // ... that share the anchor's label
  int64_t same_label_neg = 0;  // negatives sharing the anchor's label
  int64_t negatives = 0;       // all negatives
};
FnCounts fn_counts(const torch::Tensor& exclude, const torch::Tensor& negative,
                   const torch::Tensor& label_row, const torch::Tensor& label_col);
// The same counts as an int64 [4] tensor on the masks' device, in FnCounts' order (filtered,
// filtered_true, same_label_neg, negatives): summed there, read when needed.
torch::Tensor fn_count_tensor(const torch::Tensor& exclude, const torch::Tensor& negative,
                              const torch::Tensor& label_row, const torch::Tensor& label_col);

}  // namespace fnvlp::negatives
