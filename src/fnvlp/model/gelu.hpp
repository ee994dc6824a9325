#pragma once
// GELU (Hendrycks & Gimpel 2016), the exact (erf) form BERT and ViT use:
//   GELU(x) = x Φ(x),   Φ(x) = ½ erfc(−x / √2),   GELU'(x) = Φ(x) + x φ(x),   φ(x) = e^{−x²/2} /
//   √(2π).
// On CPU float32 one vectorised pass forward, which also stores GELU'(x), and a multiplication
// backward (libtorch 1.13's gelu and gelu_backward took ~2 ns per element together, 9 ms of the
// tiny step). erfc by Abramowitz & Stegun 7.1.26: absolute error below 1.5e-7 in erf, so below
// 0.75e-7 |x| in GELU (float32's own rounding near x is 6e-8 |x|). Elsewhere torch::gelu.
#include <torch/torch.h>

namespace fnvlp::model {

torch::Tensor gelu(const torch::Tensor& x);

}  // namespace fnvlp::model
