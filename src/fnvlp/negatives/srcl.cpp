#include "fnvlp/negatives/srcl.hpp"

#include <algorithm>

#include "fnvlp/core/error.hpp"

namespace fnvlp::negatives {

namespace {

// Mix: the helper's share of s_ij (eq. 8), given the current model's exp(sim) `s`.
template <class Mix>
torch::Tensor weights(const torch::Tensor& cos_current, const torch::Tensor& cos_helper,
                      const torch::Tensor& negative, Mix mix) {
  FNVLP_CHECK(cos_current.dim() == 2 && negative.sizes() == cos_current.sizes(),
              "srcl: expected cos [b, N] and negative [b, N], got " << cos_current.sizes()
                                                                    << " and " << negative.sizes());
  torch::NoGradGuard no_grad;
  auto s = torch::exp(cos_current.to(torch::kFloat));
  if (cos_helper.defined()) {
    FNVLP_CHECK(cos_helper.sizes() == cos_current.sizes(), "srcl: helper similarities "
                                                               << cos_helper.sizes() << " vs "
                                                               << cos_current.sizes());
    s = mix(torch::exp(cos_helper.to(torch::kFloat)), s);
  }
  const auto neg = negative.to(torch::kFloat);
  const auto inv = neg / s;  // δ / s_ij on negatives, 0 elsewhere (δ cancels in Norm)
  const auto n = neg.sum(1, /*keepdim=*/true).clamp_min(1);
  const auto mean = inv.sum(1, /*keepdim=*/true) / n;
  const auto w = inv / mean.clamp_min(1e-30);
  return torch::where(negative, w, torch::ones_like(w));
}

}  // namespace

torch::Tensor srcl_weights(const torch::Tensor& cos_current, const torch::Tensor& cos_helper,
                           double a, const torch::Tensor& negative) {
  FNVLP_CHECK(a >= 0 && a <= 1, "srcl: helper weight a = " << a << " not in [0, 1]");
  return weights(
      cos_current, cos_helper, negative,
      [a](const torch::Tensor& h, const torch::Tensor& s) { return a * h + (1 - a) * s; });
}

torch::Tensor srcl_weights(const torch::Tensor& cos_current, const torch::Tensor& cos_helper,
                           const torch::Tensor& a, const torch::Tensor& negative) {
  return weights(
      cos_current, cos_helper, negative,
      [&a](const torch::Tensor& h, const torch::Tensor& s) { return a * h + (1 - a) * s; });
}

double srcl_helper_weight(double a0, int64_t step, int64_t total) {
  if (total <= 0) return a0;
  const double frac = std::clamp(static_cast<double>(step) / static_cast<double>(total), 0.0, 1.0);
  return a0 * (1.0 - frac);
}

}  // namespace fnvlp::negatives
