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

#include <vector>

#include "fnvlp/core/config_fields.hpp"

namespace fnvlp::model {

// How attention is computed where the fused CPU kernels below do not apply (CUDA, bf16, attention
// dropout in training), on heads q [B, h, Lq, d], k and v [B, h, Lk, d]:
//   sdpa:         at::scaled_dot_product_attention (libtorch >= 2.0): flash, memory-efficient or
//                 cuDNN kernels on CUDA, the [Lq, Lk] scores never in memory, dropout drawn inside
//                 the kernel;
//   materialised: softmax(scale Q K^T + M) V through batched matmuls, with the scores in memory.
//                 On CUDA the keys and values are padded with masked rows to a multiple of 8 (257
//                 image tokens, 30 text tokens), so every bf16 GEMM has aligned leading dimensions
//                 (tensor-core kernels); a padded key gets exactly zero weight.
//   auto:         sdpa on CUDA where this libtorch has it and deterministic algorithms are off
//                 (the fused backward kernels sum in a varying order unless PyTorch's strict
//                 deterministic mode is on); materialised otherwise.
FNVLP_CONFIG_ENUM(AttentionKernel, (kAuto, "auto"), (kSdpa, "sdpa"),
                  (kMaterialised, "materialised"))

// Process-wide choice (train.attention); throws for sdpa without a libtorch that has it.
void set_attention_kernel(AttentionKernel kernel);
// True when this libtorch has at::scaled_dot_product_attention (>= 2.0).
bool sdpa_built();

// softmax(Q K^T / sqrt(d) + M) V per head, with dropout p on the weights in training; M additive,
// broadcastable to [B, h, Lq, Lk] (BERT's 0 / -1e4 key mask [B, 1, 1, Lk]) or undefined. Returns
// [B, h, Lq, d]. The kernel as set_attention_kernel chose for q's device.
torch::Tensor heads_attention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, const torch::Tensor& additive_mask, double p,
                              bool training);
// The two kernels, for tests and benchmarks. key_align: pad the keys to a multiple of it (1: none).
torch::Tensor materialised_attention(const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v, const torch::Tensor& additive_mask,
                                     double p, bool training, int64_t key_align);
torch::Tensor sdpa_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& additive_mask, double p, bool training);

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

// The heads of a fused projection x [B, L, n * h * d] laid out block | head | d (qkv: n = 3; kv:
// 2; q: 1): n views [B, h, L, d], no copy. Their backward writes the n head gradients into one
// [B, L, n, h, d] buffer, one strided copy each (autograd's own backward of the views stacks them
// and then lays the stack out again: two copies of the whole gradient), and returns without any
// copy where they already are the slices of one such buffer (a packed SDPA backward). Gradients
// bitwise those of the view formulation.
std::vector<torch::Tensor> split_heads(const torch::Tensor& x, int64_t n, int64_t heads);

}  // namespace fnvlp::model
