// kernels/add_layer_norm: the reference against autograd of torch::layer_norm (CPU, float64 and
// float32, a bf16 branch), the model's add_layer_norm / add_and_layer_norm unchanged on the CPU
// whatever train.norm_kernel says, and on a GPU the CUDA kernels against the reference (forward and
// backward, float32 and bf16 branches, ALBEF-base's shapes), bitwise repeatable, and under autograd
// against the ATen path.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "fnvlp/kernels/add_layer_norm.hpp"
#include "fnvlp/model/layer_norm.hpp"

namespace {

using fnvlp::kernels::AddLayerNormForward;

double max_rel(const torch::Tensor& got, const torch::Tensor& want) {
  const auto g = got.to(torch::kDouble).cpu(), w = want.to(torch::kDouble).cpu();
  return ((g - w).abs().max() / w.abs().max().clamp_min(1e-12)).item<double>();
}

struct Case {
  torch::Tensor a, b, gamma, beta, g_y, g_sum;
};

// a ~ the residual stream (an offset, as a LayerNorm input has), b ~ a branch; gradients of both
// outputs. b in b_dtype, everything else in a_dtype.
Case make_case(std::vector<int64_t> shape, torch::ScalarType a_dtype, torch::ScalarType b_dtype,
               const torch::Device& dev, uint64_t seed) {
  torch::manual_seed(seed);
  const int64_t w = shape.back();
  const auto o = torch::TensorOptions().dtype(a_dtype);
  Case c;
  c.a = (torch::randn(shape, o) * 2.0 + 3.0).to(dev);
  c.b = torch::randn(shape, o).to(b_dtype).to(dev);
  c.gamma = (torch::randn({w}, o) * 0.5 + 1.0).to(dev);
  c.beta = (torch::randn({w}, o) * 0.1).to(dev);
  c.g_y = torch::randn(shape, o).to(dev);
  c.g_sum = torch::randn(shape, o).to(dev);
  return c;
}

// The reference's forward and backward against autograd through a + b and torch::layer_norm.
void check_reference(const Case& c, double eps, double tol, const std::string& what) {
  const auto a = c.a.detach().requires_grad_(true), b = c.b.detach().requires_grad_(true);
  const auto gamma = c.gamma.detach().requires_grad_(true),
             beta = c.beta.detach().requires_grad_(true);
  const auto s = a + b;
  const int64_t w = c.a.size(-1);
  const auto y = torch::layer_norm(s, {w}, gamma, beta, eps);
  torch::autograd::backward({s, y}, {c.g_sum, c.g_y});

  const AddLayerNormForward f =
      fnvlp::kernels::add_layer_norm_forward_reference(c.a, c.b, c.gamma, c.beta, eps);
  EXPECT_LT(max_rel(f.sum, s), tol) << what << ": sum";
  EXPECT_LT(max_rel(f.y, y), tol) << what << ": y";
  const auto r = fnvlp::kernels::add_layer_norm_backward_reference(c.g_y, c.g_sum, f, c.gamma,
                                                                   c.b.scalar_type());
  EXPECT_EQ(r.db.scalar_type(), c.b.scalar_type()) << what;
  EXPECT_LT(max_rel(r.da, a.grad()), tol) << what << ": da";
  EXPECT_LT(max_rel(r.db, b.grad()), c.b.scalar_type() == torch::kBFloat16 ? 1e-2 : tol)
      << what << ": db";
  EXPECT_LT(max_rel(r.dgamma, gamma.grad()), tol) << what << ": dgamma";
  EXPECT_LT(max_rel(r.dbeta, beta.grad()), tol) << what << ": dbeta";
  // Without a gradient to the sum: only the LayerNorm's.
  const auto only_y = fnvlp::kernels::add_layer_norm_backward_reference(c.g_y, torch::Tensor(), f,
                                                                        c.gamma, c.b.scalar_type());
  EXPECT_LT(max_rel(only_y.da + c.g_sum, a.grad()), tol) << what << ": da without g_sum";
}

TEST(AddLayerNorm, ReferenceMatchesAutogradOfLayerNorm) {
  const torch::Device cpu(torch::kCPU);
  check_reference(make_case({3, 5, 16}, torch::kDouble, torch::kDouble, cpu, 1), 1e-12, 1e-12,
                  "float64");
  check_reference(make_case({64, 768}, torch::kFloat, torch::kFloat, cpu, 2), 1e-12, 2e-5,
                  "float32, BERT's epsilon");
  check_reference(make_case({7, 33}, torch::kFloat, torch::kFloat, cpu, 3), 1e-6, 2e-5,
                  "float32, ViT's epsilon, odd width");
  // The branch in bf16 (a bf16 GEMM under autocast): the sum widens it exactly.
  check_reference(make_case({9, 128}, torch::kFloat, torch::kBFloat16, cpu, 4), 1e-6, 2e-5,
                  "bf16 branch");
}

// The model's entry points: a + b and then model::layer_norm on the CPU, bit for bit, with either
// kernel chosen (the fused kernels are CUDA's); the gradients too.
TEST(AddLayerNorm, ModelPathOnCpuIsAddThenLayerNorm) {
  const auto saved = fnvlp::model::norm_kernel();
  torch::nn::LayerNorm norm(torch::nn::LayerNormOptions({32}).eps(1e-12));
  for (const auto kernel : {fnvlp::model::NormKernel::kAten, fnvlp::model::NormKernel::kFnvlp}) {
    fnvlp::model::set_norm_kernel(kernel);
    const Case c = make_case({4, 6, 32}, torch::kFloat, torch::kFloat, torch::kCPU, 5);
    const auto a1 = c.a.detach().requires_grad_(true), b1 = c.b.detach().requires_grad_(true);
    const auto a2 = c.a.detach().requires_grad_(true), b2 = c.b.detach().requires_grad_(true);
    const auto [s, y] = fnvlp::model::add_and_layer_norm(a1, b1, norm);
    const auto s_ref = a2 + b2;
    const auto y_ref = fnvlp::model::layer_norm(s_ref, norm);
    EXPECT_TRUE(torch::equal(s, s_ref));
    EXPECT_TRUE(torch::equal(y, y_ref));
    EXPECT_TRUE(torch::equal(fnvlp::model::add_layer_norm(c.a, c.b, norm), y_ref));
    torch::autograd::backward({s, y}, {c.g_sum, c.g_y});
    torch::autograd::backward({s_ref, y_ref}, {c.g_sum, c.g_y});
    EXPECT_TRUE(torch::equal(a1.grad(), a2.grad()));
    EXPECT_TRUE(torch::equal(b1.grad(), b2.grad()));
  }
  fnvlp::model::set_norm_kernel(saved);
}

TEST(AddLayerNorm, CudaKernelsRefuseWhatTheyDoNotTake) {
  const Case c = make_case({2, 8}, torch::kFloat, torch::kFloat, torch::kCPU, 6);
  EXPECT_FALSE(fnvlp::kernels::add_layer_norm_cuda_applies(c.a, c.b, c.gamma, c.beta));
  EXPECT_THROW(fnvlp::kernels::add_layer_norm_forward_cuda(c.a, c.b, c.gamma, c.beta, 1e-6),
               std::invalid_argument);
}

bool skip_without_cuda(std::string* why) {
  if (!fnvlp::kernels::add_layer_norm_cuda_built()) {
    *why = "SKIPPED: this build has no CUDA kernels (FNVLP_WITH_CUDA=OFF)";
    return true;
  }
  if (!torch::cuda::is_available()) {
    *why = "SKIPPED: no CUDA device visible";
    return true;
  }
  return false;
}

// ALBEF-base's rows: the ViT's 64 x 257 tokens, the text's 64 x 30, the tiny model's width, and a
// ragged shape. fp32 statistics either way: the forward within 1e-5 relative of the reference (the
// GPU contracts multiply-adds), the backward within 1e-4 (dγ, dβ sum 16,448 rows in another
// order), b's bf16 gradient within bf16's rounding (2^-8).
TEST(AddLayerNorm, CudaKernelsMatchReference) {
  std::string why;
  if (skip_without_cuda(&why)) GTEST_SKIP() << why;
  const torch::Device dev(torch::kCUDA);
  const struct {
    std::vector<int64_t> shape;
    double eps;
  } shapes[] = {
      {{64, 257, 768}, 1e-6}, {{64, 30, 768}, 1e-12}, {{32, 65, 128}, 1e-6}, {{3, 7, 33}, 1e-12}};
  for (const auto& sh : shapes) {
    for (const auto b_dtype : {torch::kFloat, torch::kBFloat16}) {
      const std::string what =
          std::to_string(sh.shape.back()) + " wide, b " + std::string(c10::toString(b_dtype));
      const Case c = make_case(sh.shape, torch::kFloat, b_dtype, dev, 7);
      const auto got =
          fnvlp::kernels::add_layer_norm_forward_cuda(c.a, c.b, c.gamma, c.beta, sh.eps);
      const auto want =
          fnvlp::kernels::add_layer_norm_forward_reference(c.a, c.b, c.gamma, c.beta, sh.eps);
      EXPECT_TRUE(torch::equal(got.sum, want.sum)) << what << ": the sum is one rounding";
      EXPECT_LT(max_rel(got.y, want.y), 1e-5) << what << ": y";
      EXPECT_LT(max_rel(got.mean, want.mean), 1e-5) << what << ": mean";
      EXPECT_LT(max_rel(got.rstd, want.rstd), 1e-5) << what << ": rstd";
      for (const bool with_sum : {true, false}) {
        const torch::Tensor gs = with_sum ? c.g_sum : torch::Tensor();
        const auto r =
            fnvlp::kernels::add_layer_norm_backward_cuda(c.g_y, gs, got, c.gamma, b_dtype);
        const auto ref =
            fnvlp::kernels::add_layer_norm_backward_reference(c.g_y, gs, want, c.gamma, b_dtype);
        const std::string w2 = what + (with_sum ? ", with g_sum" : ", without g_sum");
        EXPECT_EQ(r.db.scalar_type(), b_dtype) << w2;
        EXPECT_LT(max_rel(r.da, ref.da), 1e-4) << w2 << ": da";
        EXPECT_LT(max_rel(r.db, ref.db), b_dtype == torch::kBFloat16 ? 8e-3 : 1e-4) << w2 << ": db";
        EXPECT_LT(max_rel(r.dgamma, ref.dgamma), 1e-4) << w2 << ": dgamma";
        EXPECT_LT(max_rel(r.dbeta, ref.dbeta), 1e-4) << w2 << ": dbeta";
      }
    }
  }
}

// No atomics: two runs give the same bits (train.deterministic's promise).
TEST(AddLayerNorm, CudaKernelsAreBitwiseRepeatable) {
  std::string why;
  if (skip_without_cuda(&why)) GTEST_SKIP() << why;
  const Case c = make_case({64, 257, 768}, torch::kFloat, torch::kBFloat16, torch::kCUDA, 8);
  const auto f1 = fnvlp::kernels::add_layer_norm_forward_cuda(c.a, c.b, c.gamma, c.beta, 1e-6);
  const auto f2 = fnvlp::kernels::add_layer_norm_forward_cuda(c.a, c.b, c.gamma, c.beta, 1e-6);
  EXPECT_TRUE(torch::equal(f1.y, f2.y));
  const auto r1 =
      fnvlp::kernels::add_layer_norm_backward_cuda(c.g_y, c.g_sum, f1, c.gamma, torch::kBFloat16);
  const auto r2 =
      fnvlp::kernels::add_layer_norm_backward_cuda(c.g_y, c.g_sum, f2, c.gamma, torch::kBFloat16);
  EXPECT_TRUE(torch::equal(r1.da, r2.da));
  EXPECT_TRUE(torch::equal(r1.db, r2.db));
  EXPECT_TRUE(torch::equal(r1.dgamma, r2.dgamma));
  EXPECT_TRUE(torch::equal(r1.dbeta, r2.dbeta));
}

// The model's path under autograd and bf16 autocast as the step runs it (a float32 stream, a bf16
// GEMM's output): norm_kernel=fnvlp against aten, outputs and every input's gradient.
TEST(AddLayerNorm, CudaModelPathMatchesAten) {
  std::string why;
  if (skip_without_cuda(&why)) GTEST_SKIP() << why;
  const auto saved = fnvlp::model::norm_kernel();
  torch::nn::LayerNorm norm(torch::nn::LayerNormOptions({768}).eps(1e-12));
  norm->to(torch::kCUDA);
  {
    torch::NoGradGuard no_grad;
    norm->weight.normal_(1.0, 0.2);
    norm->bias.normal_(0.0, 0.1);
  }
  const Case c = make_case({16, 30, 768}, torch::kFloat, torch::kBFloat16, torch::kCUDA, 9);
  torch::Tensor outs[2][2], grads[2][4];
  for (int k = 0; k < 2; ++k) {
    fnvlp::model::set_norm_kernel(k == 0 ? fnvlp::model::NormKernel::kAten
                                         : fnvlp::model::NormKernel::kFnvlp);
    norm->zero_grad();
    const auto a = c.a.detach().requires_grad_(true), b = c.b.detach().requires_grad_(true);
    const auto [s, y] = fnvlp::model::add_and_layer_norm(a, b, norm);
    torch::autograd::backward({s, y}, {c.g_sum, c.g_y});
    outs[k][0] = s;
    outs[k][1] = y;
    grads[k][0] = a.grad();
    grads[k][1] = b.grad();
    grads[k][2] = norm->weight.grad().clone();
    grads[k][3] = norm->bias.grad().clone();
  }
  fnvlp::model::set_norm_kernel(saved);
  EXPECT_TRUE(torch::equal(outs[0][0], outs[1][0])) << "sum";
  EXPECT_LT(max_rel(outs[1][1], outs[0][1]), 1e-5) << "y";
  EXPECT_EQ(grads[1][1].scalar_type(), torch::kBFloat16);
  EXPECT_LT(max_rel(grads[1][0], grads[0][0]), 1e-4) << "da";
  EXPECT_LT(max_rel(grads[1][1], grads[0][1]), 8e-3) << "db";
  EXPECT_LT(max_rel(grads[1][2], grads[0][2]), 1e-4) << "dgamma";
  EXPECT_LT(max_rel(grads[1][3], grads[0][3]), 1e-4) << "dbeta";
}

}  // namespace
