#include "fnvlp/model/gelu.hpp"

#include <ATen/Parallel.h>

#include <cstdint>

#include "fnvlp/core/intraop_loops.hpp"
#include "fnvlp/kernels/simd_math.hpp"

namespace fnvlp::model {

namespace {

using simd::exp_nonpositive;

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

// ½ erfc(|x| / √2) and e^{-x²/2}, which the derivative needs as well: Abramowitz & Stegun 7.1.26,
//   erfc(z) = t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) e^{-z^2},  t = 1 / (1 + p z),  z >= 0,
// absolute error below 1.5e-7 (so at most 0.75e-7 |x| in GELU), one exp shared by both terms.
struct HalfErfc {
  float half_erfc, gauss;
};
inline HalfErfc half_erfc_abs(float x) {
  const float ax = x < 0.0f ? -x : x;
  const float t = 1.0f / (1.0f + 0.3275911f * kInvSqrt2 * ax);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  const float gauss = exp_nonpositive(-0.5f * x * x);
  return {0.5f * t * p * gauss, gauss};
}

// Φ(x) = ½ erfc(-x/√2): for x < 0 directly, for x >= 0 as 1 - ½ erfc(x/√2).
inline float normal_cdf(float x, float half_erfc) {
  return x < 0.0f ? half_erfc : 1.0f - half_erfc;
}

FNVLP_SIMD_CLONES void gelu_forward(const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * normal_cdf(x[i], half_erfc_abs(x[i]).half_erfc);
}

// The output and the derivative GELU'(x) = Φ(x) + x φ(x), for the backward to read: it is then
// one multiplication per element instead of a second evaluation of erfc.
FNVLP_SIMD_CLONES void gelu_forward_with_derivative(const float* x, float* y, float* d, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const HalfErfc e = half_erfc_abs(v);
    const float cdf = normal_cdf(v, e.half_erfc);
    y[i] = v * cdf;
    d[i] = cdf + v * kInvSqrt2Pi * e.gauss;
  }
}

FNVLP_SIMD_CLONES void multiply(const float* a, const float* b, float* out, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
}

constexpr int64_t kGrain = 1 << 15;  // elements per task where intra-op threads split the pass

// Saves GELU'(x) (the size of x, which it need not keep) rather than x.
struct GeluFn : public torch::autograd::Function<GeluFn> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& in) {
    const torch::Tensor x = in.contiguous();
    torch::Tensor y = torch::empty_like(x), d = torch::empty_like(x);
    const float* xp = x.data_ptr<float>();
    float *yp = y.data_ptr<float>(), *dp = d.data_ptr<float>();
    at::parallel_for(0, x.numel(), kGrain, [&](int64_t b, int64_t e) {
      gelu_forward_with_derivative(xp + b, yp + b, dp + b, e - b);
    });
    ctx->save_for_backward({d});
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const torch::Tensor d = ctx->get_saved_variables()[0];
    const torch::Tensor g = grads[0].contiguous();
    torch::Tensor dx = torch::empty_like(d);
    const float *dp = d.data_ptr<float>(), *gp = g.data_ptr<float>();
    float* out = dx.data_ptr<float>();
    at::parallel_for(0, d.numel(), kGrain,
                     [&](int64_t b, int64_t e) { multiply(gp + b, dp + b, out + b, e - b); });
    return {dx};
  }
};

}  // namespace

torch::Tensor gelu(const torch::Tensor& x) {
  if (!(x.device().is_cpu() && x.scalar_type() == torch::kFloat && x.layout() == torch::kStrided))
    return torch::gelu(x);
  if (torch::GradMode::is_enabled() && x.requires_grad()) return GeluFn::apply(x);
  // Nothing will differentiate it: the output alone.
  const torch::Tensor xc = x.contiguous();
  torch::Tensor y = torch::empty_like(xc);
  const float* xp = xc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, xc.numel(), kGrain,
                   [&](int64_t b, int64_t e) { gelu_forward(xp + b, yp + b, e - b); });
  return y;
}

}  // namespace fnvlp::model
