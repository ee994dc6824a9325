// model::layer_norm against libtorch's LayerNorm module: output, input gradient and the affine
// parameters' gradients, at the model's widths and epsilons, on strided and 3-D inputs with large
// offsets, and the fallback off CPU float32.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "fnvlp/model/layer_norm.hpp"

namespace {

double max_rel(const torch::Tensor& got, const torch::Tensor& want) {
  return ((got - want).abs().max() / want.abs().max().clamp_min(1e-6)).item<double>();
}

void check(const std::vector<int64_t>& shape, double eps, double offset, uint64_t seed) {
  torch::manual_seed(seed);
  const int64_t w = shape.back();
  auto opts = torch::nn::LayerNormOptions({w}).eps(eps);
  torch::nn::LayerNorm ours(opts), ref(opts);
  {
    torch::NoGradGuard no_grad;
    ours->weight.copy_(torch::randn({w}) * 0.5 + 1.0);
    ours->bias.copy_(torch::randn({w}) * 0.1);
    ref->weight.copy_(ours->weight);
    ref->bias.copy_(ours->bias);
  }
  auto wide = shape;
  wide.back() = 2 * w;  // a column slice: rows of stride 2w
  const auto base = torch::randn(wide).narrow(-1, 0, w) * 3.0 + offset;
  auto a = base.detach().clone().requires_grad_(true);
  auto b = base.detach().clone().requires_grad_(true);
  const auto upstream = torch::randn(shape);
  const auto got = fnvlp::model::layer_norm(a.narrow(-1, 0, w), ours);
  const auto want = ref(b);
  got.backward(upstream);
  want.backward(upstream);
  EXPECT_LT(max_rel(got, want), 2e-5) << "output, width " << w;
  EXPECT_LT(max_rel(a.grad(), b.grad()), 1e-3) << "dx, width " << w;
  EXPECT_LT(max_rel(ours->weight.grad(), ref->weight.grad()), 1e-4) << "dgamma, width " << w;
  EXPECT_LT(max_rel(ours->bias.grad(), ref->bias.grad()), 1e-4) << "dbeta, width " << w;
}

TEST(LayerNorm, MatchesLibtorchLayerNorm) {
  check({2080, 128}, 1e-6, 0.0, 1);     // the tiny ViT
  check({32, 30, 128}, 1e-12, 5.0, 2);  // BERT's epsilon, an offset to subtract
  check({4, 9, 768}, 1e-12, -2.0, 3);   // base width
  check({3, 7}, 1e-5, 0.0, 4);          // a width that is no multiple of the vector length
}

TEST(LayerNorm, FallsBackOffCpuFloat) {
  torch::nn::LayerNorm norm(torch::nn::LayerNormOptions({6}));
  norm->to(torch::kDouble);
  const auto x = torch::randn({3, 6}, torch::kDouble);
  EXPECT_TRUE(torch::equal(fnvlp::model::layer_norm(x, norm), norm(x)));
}

}  // namespace
