#pragma once
// One FALCON / GRIT-VLP search space and the composition of its mini-batches (falcon.txt §3.1,
// App. C.1 Alg. 1–2; GRIT-VLP's grouping is the case q = 1).
//
// A search space holds M pairs (local index k <-> pair_ids[k]) and
//     S = S_i2t + S_t2i = I Tᵀ + T Iᵀ = A + Aᵀ,  A = I Tᵀ          (falcon.txt §3.2)
// from the cached L2-normalised [CLS] embeddings I, T [M, E] of the previous epoch. Every batch is
// composed by Alg. 1: the first member is drawn uniformly from the unselected set U; each further
// member is the q-quantile pick (quantile_pick.hpp) among U of the LAST selected member's row, with
// q = q_of_row(last), until the batch has B members. Alg. 2 repeats this floor(M / B) times; the
// M mod B pairs left over are not used in this epoch.
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace fnvlp::negatives {

struct ComposedBatch {
  std::vector<int64_t> pair_ids;  // the B members in selection order
  std::vector<int64_t> local;     // the same as local indices 0..M-1
  // Pick t (t = 0..B-2) chose local[t + 1] from row q_rows[t] = local[t] with quantile q[t].
  std::vector<int64_t> q_rows;
  std::vector<double> q;
};

class SearchSpace {
 public:
  // img, txt: float [M, E], L2-normalised rows (any device; S is kept on the CPU as float).
  SearchSpace(std::vector<int64_t> pair_ids, const torch::Tensor& img, const torch::Tensor& txt);
  // A precomputed similarity matrix S float [M, M] (symmetric in FALCON, any here).
  SearchSpace(std::vector<int64_t> pair_ids, torch::Tensor S);

  int64_t size() const { return static_cast<int64_t>(pair_ids_.size()); }
  int64_t remaining() const { return static_cast<int64_t>(unselected_.size()); }
  const std::vector<int64_t>& pair_ids() const { return pair_ids_; }
  const torch::Tensor& similarity() const { return S_; }  // float [M, M], CPU, contiguous
  const std::vector<int64_t>& unselected() const { return unselected_; }  // local, ascending

  // Composes one batch of B members (Alg. 1). q_of_row(local row) gives the quantile of each
  // pick (a fixed q for GRIT and the heuristics, the policy's draw for FALCON); `draw` is a 64-bit
  // counter-based random (fnvlp::data::counter_random) choosing the first member uniformly among
  // the unselected ones (in ascending local order). Throws if fewer than B are left.
  ComposedBatch next_batch(int64_t B, const std::function<double(int64_t)>& q_of_row,
                           uint64_t draw);
  // Batch-level variant (one q for every pick).
  ComposedBatch next_batch(int64_t B, double q, uint64_t draw);

  // The unselected set as a hex bitmask (bit k of the mask <-> local index k; character c holds
  // indices 4c..4c+3, least significant bit first), for a resumable sampler state.
  std::string unselected_mask() const;
  void set_unselected_mask(const std::string& mask);
  // The local indices (ascending) a mask of a search space of `size` pairs marks unselected.
  static std::vector<int64_t> decode_unselected_mask(const std::string& mask, int64_t size);

 private:
  void select(int64_t local);

  std::vector<int64_t> pair_ids_;
  torch::Tensor S_;
  std::vector<int64_t> unselected_;  // ascending
  std::vector<int64_t> scratch_;
};

}  // namespace fnvlp::negatives
