// model::gelu against libtorch's exact GELU: outputs and gradients over the whole range (both
// tails, zero, large values), the no-gradient path, and the fallback off CPU float32.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "fnvlp/model/gelu.hpp"

namespace {

TEST(Gelu, MatchesLibtorchExactGeluAndItsGradient) {
  torch::manual_seed(3);
  const auto x0 = torch::cat({torch::linspace(-12.0, 12.0, 4801), torch::randn({3000}) * 3.0,
                              torch::tensor({0.0f, -0.0f, 40.0f, -40.0f, 1e-30f})});
  const auto g = torch::randn(x0.sizes());
  auto a = x0.clone().requires_grad_(true), b = x0.clone().requires_grad_(true);
  const auto got = fnvlp::model::gelu(a), want = torch::gelu(b);
  got.backward(g);
  want.backward(g);
  // |error| <= 0.75e-7 |x| from the erfc approximation plus float rounding, against x Φ(x) in
  // double; against libtorch's float GELU that plus libtorch's own error (4 ulp near x = 3.3 in
  // the PyPI wheel's 2.11 on an AVX-512 AMD EPYC, under 1 ulp in Debian's 1.13).
  const auto xd = x0.to(torch::kDouble);
  const auto exact = xd * 0.5 * torch::erfc(-xd / std::sqrt(2.0));
  const auto tol = 2e-7 * x0.abs().clamp_min(1.0);
  const auto err = (got.to(torch::kDouble) - exact).abs();
  EXPECT_TRUE((err <= tol).all().item<bool>()) << "max |error| " << err.max().item<double>();
  const auto torch_err = (want.to(torch::kDouble) - exact).abs();
  EXPECT_TRUE(((got - want).abs() <= tol + torch_err).all().item<bool>())
      << "max |diff| " << (got - want).abs().max().item<double>();
  EXPECT_TRUE(((a.grad() - b.grad()).abs() <= 4e-7 * g.abs().clamp_min(1.0)).all().item<bool>())
      << "max |grad diff| " << (a.grad() - b.grad()).abs().max().item<double>();
  // The far tails: exactly the identity and exactly zero where Φ rounds to 1 and 0.
  EXPECT_EQ(got[-3].item<float>(), 40.0f);
  EXPECT_EQ(got[-2].item<float>(), -0.0f);
  EXPECT_EQ(got[-5].item<float>(), 0.0f);
}

TEST(Gelu, WithoutGradientAndOffCpuFloat) {
  const auto x = torch::linspace(-6.0, 6.0, 97).view({97, 1}).expand({97, 3});  // non-contiguous
  torch::Tensor y;
  {
    torch::NoGradGuard no_grad;
    y = fnvlp::model::gelu(x);
  }
  EXPECT_FALSE(y.requires_grad());
  EXPECT_LT((y - torch::gelu(x)).abs().max().item<double>(), 1e-6);
  const auto xd = x.to(torch::kDouble);
  EXPECT_TRUE(torch::equal(fnvlp::model::gelu(xd), torch::gelu(xd)));  // libtorch's own there
}

}  // namespace
