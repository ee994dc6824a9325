#pragma once
// SRCL: contrastive weights of the negatives regulated by cross-modal similarity (Jiang et al.,
// ACL 2023, srcl-similarity-regulated-contrastive.txt §3.2.1, eq. 6–9):
//   ŝ_ij = exp(sim_H(i, j))                 helper model H, frozen          (eq. 6)
//   ṡ_ij = exp(sim_S(i, j))                 the model being trained          (eq. 7)
//   s_ij = a·ŝ_ij + (1 − a)·ṡ_ij            a decreases over pretraining     (eq. 8)
//   w_ij = Norm(δ / s_ij)                   Norm: mean over i's negatives = 1 (eq. 9)
// Under that normalisation the scale δ cancels, so it is not a parameter here. The weights
// multiply exp(s_ij / τ) of the negatives in the ITC denominators (loss/itc.hpp weight_i2t/t2i).
#include <torch/torch.h>

#include <cstdint>

namespace fnvlp::negatives {

// cos_current, cos_helper: detached cosine similarities [b, N] (cos_helper may be undefined:
// then a is ignored and only the current model regulates); negative: bool [b, N]. Returns float
// [b, N]: w on negative columns (mean 1 per row over its negatives), 1 elsewhere.
torch::Tensor srcl_weights(const torch::Tensor& cos_current, const torch::Tensor& cos_helper,
                           double a, const torch::Tensor& negative);
// The same with a as a 0-dim float tensor on the similarities' device (the static step reads it
// from memory); its range is the caller's to check.
torch::Tensor srcl_weights(const torch::Tensor& cos_current, const torch::Tensor& cos_helper,
                           const torch::Tensor& a, const torch::Tensor& negative);

// a at `step` of `total`: a0 decaying linearly to 0 at the end of training (SRCL starts from the
// helper alone, a = 1, and shifts weight to the model as it trains).
double srcl_helper_weight(double a0, int64_t step, int64_t total);

}  // namespace fnvlp::negatives
