#pragma once
// LayerNorm over the last dimension (Ba et al. 2016) with its affine parameters:
//   y = (x − μ) σ̂ γ + β,   μ = mean(x),   σ̂ = 1 / sqrt(var(x) + ε)   (biased variance),
// and its backward, with x̂ = (x − μ) σ̂ and u = g γ:
//   dx = σ̂ (u − mean(u) − x̂ mean(u x̂)),   dγ = Σ_rows g x̂,   dβ = Σ_rows g.
// On CPU float32 one pass per row each way over rows that sit in L1 (libtorch 1.13's forward and
// backward took ~0.8 and ~0.6 ns per element on the tiny step's 2.6 M normalised elements);
// elsewhere, or without affine parameters, the module itself.
#include <torch/torch.h>

namespace fnvlp::model {

torch::Tensor layer_norm(const torch::Tensor& x, torch::nn::LayerNorm& norm);

}  // namespace fnvlp::model
