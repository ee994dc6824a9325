#pragma once
// Multi-head scaled dot-product attention for CPU float32 (Vaswani et al. 2017, eq. 1), per head
//   O = softmax(scale Q K^T + M) V,   scale = 1 / sqrt(d),
// with M the additive key mask (0 for a kept key, -1e4 for a padded one, as BERT) or none.
//
// Why not torch::matmul: libtorch 1.13 without MKL runs a batched matmul as a loop of select()
// plus one addmm per (row, head), and its softmax is a separate pass over a separately scaled and
// masked copy of the scores. At ALBEF's small per-head shapes (65 x 65 x 32 in the tiny ViT) that
// costs ~3x the SGEMM time. Here each (row, head) is one cblas_sgemm reading Q, K and V in place
// from the fused projection (row stride 3 x width: no split-heads copy), the scale rides on the
// SGEMM's alpha, the mask and softmax are one vectorised pass, and the output is written already
// merged ([B, L, heads x d]). The backward pass is the same SGEMMs on the saved probabilities.
// Results agree with the matmul formulation to float rounding (tests/unit/model/test_attention).
#include <torch/torch.h>

namespace fnvlp::model {

// True when the fused kernels apply: CPU float32 tensors. Anything else (CUDA, half, double) takes
// the libtorch formulation, as does attention dropout during training.
bool fused_attention_applies(const torch::Tensor& t);

// Self-attention on a fused projection qkv [B, L, 3 * width] laid out q | k | v (each column
// block heads x d, head-major, as ViT's and BERT's fused Linear). additive_mask: [B, 1, 1, L] or
// [B, L] float (0 / -1e4), or undefined. Returns [B, L, width]. Differentiable in qkv.
torch::Tensor fused_self_attention(const torch::Tensor& qkv, const torch::Tensor& additive_mask,
                                   int64_t heads);

// Attention with separate queries q [B, Lq, width] and keys and values kv [Bk, Lk, 2 * width] laid
// out k | v: xbert's cross-attention on image tokens (no padding, no mask), and self-attention
// evaluated at a subset of the query positions (additive_mask over the Lk text keys, as above).
// Query row b attends to kv row kv_index[b] (int64 [B] in [0, Bk)), or to row b where kv_index is
// undefined (then Bk = B): the keys and values of one image, projected once, serve every text it is
// paired with (ITM's negatives), and their gradients sum there. additive_mask covers kv's rows.
// Returns [B, Lq, width]. Differentiable in q and kv.
torch::Tensor fused_cross_attention(const torch::Tensor& q, const torch::Tensor& kv, int64_t heads,
                                    const torch::Tensor& additive_mask = {},
                                    const torch::Tensor& kv_index = {});

}  // namespace fnvlp::model
