#pragma once
// A residual add and the LayerNorm after it as one pass each way (issue 61, lever 3):
//   s = a + b,   μ = mean(s),   σ̂ = 1 / sqrt(var(s) + ε) (biased),   y = (s − μ) σ̂ γ + β,
// and, with x̂ = (s − μ) σ̂, u = g_y γ and g_s the gradient reaching s other than through y (a
// pre-LN block's residual path; none in post-LN BERT):
//   ds = σ̂ (u − mean(u) − x̂ mean(u x̂)) + g_s,   da = ds,   db = ds in b's dtype,
//   dγ = Σ_rows g_y x̂,   dβ = Σ_rows g_y.
// Under bf16 autocast the residual stream a is fp32 and the branch b a bf16 GEMM's output: ATen
// adds them in one kernel, normalises in another (the fp32 LayerNorm of autocast's list) and casts
// the branch's gradient in a third; the CUDA kernels (add_layer_norm.cu) read a and b once, keep
// the statistics in fp32, and write b's gradient in its own dtype beside a's.
// The reference is the same arithmetic in ATen ops on any device: what the kernels are tested
// against (tests/unit/kernels/test_add_layer_norm.cpp), itself tested against autograd of
// torch::layer_norm.
#include <torch/torch.h>

namespace fnvlp::kernels {

struct AddLayerNormForward {
  torch::Tensor sum, y;      // a's dtype and shape
  torch::Tensor mean, rstd;  // fp32, one per row
};

struct AddLayerNormBackward {
  torch::Tensor da, db;         // a's and b's dtypes
  torch::Tensor dgamma, dbeta;  // fp32
};

// True when this build has the CUDA kernels (FNVLP_WITH_CUDA).
bool add_layer_norm_cuda_built();

// Whether the CUDA kernels take these operands: a built kernel, a and b on one CUDA device with the
// same shape and a non-empty last dimension, a float32, b float32 or bfloat16, γ and β float32 of
// the last dimension's size.
bool add_layer_norm_cuda_applies(const torch::Tensor& a, const torch::Tensor& b,
                                 const torch::Tensor& gamma, const torch::Tensor& beta);

// The kernels (throws where add_layer_norm_cuda_applies is false). The backward's g_sum may be
// undefined (no gradient to s besides y's).
AddLayerNormForward add_layer_norm_forward_cuda(const torch::Tensor& a, const torch::Tensor& b,
                                                const torch::Tensor& gamma,
                                                const torch::Tensor& beta, double eps);
AddLayerNormBackward add_layer_norm_backward_cuda(const torch::Tensor& g_y,
                                                  const torch::Tensor& g_sum,
                                                  const AddLayerNormForward& fwd,
                                                  const torch::Tensor& gamma,
                                                  torch::ScalarType b_dtype);

// The reference: statistics in a's dtype widened to at least fp32, as the kernels keep them.
AddLayerNormForward add_layer_norm_forward_reference(const torch::Tensor& a, const torch::Tensor& b,
                                                     const torch::Tensor& gamma,
                                                     const torch::Tensor& beta, double eps);
AddLayerNormBackward add_layer_norm_backward_reference(const torch::Tensor& g_y,
                                                       const torch::Tensor& g_sum,
                                                       const AddLayerNormForward& fwd,
                                                       const torch::Tensor& gamma,
                                                       torch::ScalarType b_dtype);

}  // namespace fnvlp::kernels
