#pragma once
// LayerNorm over the last dimension (Ba et al. 2016) with its affine parameters:
//   y = (x − μ) σ̂ γ + β,   μ = mean(x),   σ̂ = 1 / sqrt(var(x) + ε)   (biased variance),
// and its backward, with x̂ = (x − μ) σ̂ and u = g γ:
//   dx = σ̂ (u − mean(u) − x̂ mean(u x̂)),   dγ = Σ_rows g x̂,   dβ = Σ_rows g.
// On CPU float32 one pass per row each way over rows that sit in L1 (libtorch 1.13's forward and
// backward took ~0.8 and ~0.6 ns per element on the tiny step's 2.6 M normalised elements);
// elsewhere, or without affine parameters, the module itself.
#include <torch/torch.h>

#include <utility>

#include "fnvlp/core/config_fields.hpp"

namespace fnvlp::model {

torch::Tensor layer_norm(const torch::Tensor& x, torch::nn::LayerNorm& norm);

// How a residual add and the LayerNorm after it run on CUDA (train.norm_kernel): aten, the add and
// then LayerNorm as separate ATen kernels; fnvlp, one kernel each way (kernels/add_layer_norm.hpp)
// where it takes the operands (a float32 stream, a float32 or bf16 branch). Elsewhere, and on the
// CPU whatever the choice, a + b and then layer_norm above.
FNVLP_CONFIG_ENUM(NormKernel, (kAten, "aten"), (kFnvlp, "fnvlp"))
void set_norm_kernel(NormKernel kernel);  // process-wide
NormKernel norm_kernel();

// LayerNorm(a + b): a post-LN layer's residual (BERT).
torch::Tensor add_layer_norm(const torch::Tensor& a, const torch::Tensor& b,
                             torch::nn::LayerNorm& norm);
// {a + b, LayerNorm(a + b)}: a pre-LN block's residual and the next sublayer's input (ViT).
std::pair<torch::Tensor, torch::Tensor> add_and_layer_norm(const torch::Tensor& a,
                                                           const torch::Tensor& b,
                                                           torch::nn::LayerNorm& norm);

}  // namespace fnvlp::model
