#pragma once
// TCL's intra-modal objectives (Yang et al., CVPR 2022, tcl-triple-contrastive.txt §3.4–3.5),
// added to ALBEF's ITC (TCL's CMA), ITM and MLM (eq. 8: L = L_cma + L_imc + L_lmi + L_itm + L_mlm).
//
// IMC (eq. 4): L_imc = ½ [L_nce(T, T+, T̃) + L_nce(I1, I2, Ĩ)]: two augmented views of an image
// (and the text under two dropout masks) are positives, the other samples negatives.
// LMI (eq. 5): L_lmi = ½ [(1/M) Σ_i L_nce(I1, I2^i, Ĩ_l) + (1/N) Σ_j L_nce(T, T+^j, T̃_l)]: the
// global [CLS] embedding against every local embedding (pooled image patches, text tokens) of the
// other view, the local embeddings of the other samples at the same position being negatives.
//
// Differences from TCL, by design: TCL takes the second views from momentum encoders and draws
// negatives from queues of them; fnvlp uses the online encoders (SimCLR-style) and the rank's
// local batch as negatives, so the terms need no extra state and no communication. Both
// directions of each InfoNCE are averaged. Samples sharing an image_id are never negatives.
#include <torch/torch.h>

namespace fnvlp::loss {

// a, b: L2-normalised embeddings of two views [n, E]; image_id int64 [n]; temp scalar.
torch::Tensor imc_loss(const torch::Tensor& a, const torch::Tensor& b,
                       const torch::Tensor& image_id, const torch::Tensor& temp);

// global_emb [n, E] and local_emb [n, P, E] L2-normalised; valid: optional bool [n, P] (text
// padding); image_id int64 [n]; temp scalar. Mean over the valid (sample, position) terms.
torch::Tensor lmi_loss(const torch::Tensor& global_emb, const torch::Tensor& local_emb,
                       const torch::Tensor& valid, const torch::Tensor& image_id,
                       const torch::Tensor& temp);

// ViT tokens [n, 1 + g0*g0, D] -> [n, g*g, D]: the patch grid average-pooled to g x g, keeping
// the spatial layout (TCL pools the 16x16 patch grid to 4x4 = 16 local regions, §4 ablation).
torch::Tensor pool_patch_tokens(const torch::Tensor& image_tokens, int64_t grid);

}  // namespace fnvlp::loss
