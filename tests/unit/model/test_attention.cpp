// The fused CPU attention kernels (model/attention.hpp) against the matmul formulation they
// replace: outputs and gradients of self-attention (with and without a key mask, on strided views
// of a fused projection) and of cross-attention, the exact zero weight of padded keys, and NaN
// propagation; then the kernels of every other case (heads_attention): the materialised scores
// with padded keys and SDPA against the plain formulation, on the CPU and on a GPU.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <functional>
#include <vector>

#include "fnvlp/model/attention.hpp"

namespace {

using fnvlp::model::fused_cross_attention;
using fnvlp::model::fused_self_attention;
using fnvlp::model::materialised_attention;
using fnvlp::model::sdpa_attention;
using fnvlp::model::sdpa_built;
using fnvlp::model::split_heads;

torch::Generator gen(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

// softmax(Q K^T / sqrt(d) + M) V per head, heads merged: the reference formulation.
torch::Tensor reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& mask, int64_t heads) {
  auto split = [&](const torch::Tensor& x) {
    return x.reshape({x.size(0), x.size(1), heads, x.size(2) / heads}).transpose(1, 2);
  };
  const auto qh = split(q), kh = split(k), vh = split(v);
  auto s = torch::matmul(qh, kh.transpose(-2, -1)) / std::sqrt(static_cast<double>(qh.size(-1)));
  if (mask.defined()) s = s + mask.view({mask.size(0), 1, 1, -1});
  const auto o = torch::matmul(torch::softmax(s, -1), vh);
  return o.transpose(1, 2).reshape({q.size(0), q.size(1), q.size(2)});
}

// Additive BERT mask for the given key lengths: 0 kept, -1e4 padded.
torch::Tensor key_mask(const std::vector<int64_t>& lengths, int64_t L) {
  auto m = torch::full({static_cast<int64_t>(lengths.size()), L}, -1e4);
  for (size_t i = 0; i < lengths.size(); ++i) m[i].narrow(0, 0, lengths[i]).fill_(0.0);
  return m;
}

double max_abs(const torch::Tensor& a) { return a.abs().max().item<double>(); }

void expect_close(const torch::Tensor& got, const torch::Tensor& want, double tol,
                  const char* what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const double err = max_abs(got - want), scale = std::max(1.0, max_abs(want));
  EXPECT_LT(err, tol * scale) << what << ": max |fused - reference| = " << err;
}

// One case: output and the gradients of a random upstream gradient, fused vs reference. The
// fused input is a column slice of a wider tensor so the kernels read strided rows in place.
void check_self(int64_t B, int64_t L, int64_t heads, int64_t d, bool masked, uint64_t seed) {
  auto g = gen(seed);
  const int64_t W = heads * d;
  const auto wide = torch::randn({B, L, 3 * W + 5}, g);
  const auto qkv = wide.narrow(2, 2, 3 * W).detach().requires_grad_(false);
  std::vector<int64_t> lengths;
  for (int64_t b = 0; b < B; ++b) lengths.push_back(1 + (b * 7 + 3) % L);
  const auto mask = masked ? key_mask(lengths, L) : torch::Tensor();
  const auto upstream = torch::randn({B, L, W}, g);

  auto a = qkv.clone().requires_grad_(true);
  const auto out_ref =
      reference(a.narrow(2, 0, W), a.narrow(2, W, W), a.narrow(2, 2 * W, W), mask, heads);
  out_ref.backward(upstream);

  auto wide_f = wide.clone().requires_grad_(true);
  const auto out = fused_self_attention(wide_f.narrow(2, 2, 3 * W), mask, heads);
  out.backward(upstream);

  expect_close(out, out_ref, 1e-5, "self-attention output");
  const auto grad = wide_f.grad();
  expect_close(grad.narrow(2, 2, 3 * W), a.grad(), 1e-4, "self-attention d(qkv)");
  EXPECT_EQ(max_abs(grad.narrow(2, 0, 2)), 0.0) << "gradient leaked outside the slice";
  EXPECT_TRUE(out.is_contiguous());
}

TEST(FusedAttention, SelfAttentionMatchesMatmulFormulation) {
  check_self(3, 65, 4, 32, false, 1);  // the tiny ViT's shape
  check_self(5, 17, 2, 8, true, 2);    // padded text
  check_self(2, 1, 1, 4, true, 3);     // a single token
  check_self(4, 30, 12, 64, true, 4);  // BERT-base heads
}

void check_cross(int64_t B, int64_t Lq, int64_t Lk, const torch::Tensor& mask, uint64_t seed) {
  auto g = gen(seed);
  const int64_t heads = 4, d = 16, W = heads * d;
  const auto q0 = torch::randn({B, Lq, W}, g), kv0 = torch::randn({B, Lk, 2 * W}, g);
  const auto upstream = torch::randn({B, Lq, W}, g);

  auto q = q0.clone().requires_grad_(true), kv = kv0.clone().requires_grad_(true);
  const auto ref = reference(q, kv.narrow(2, 0, W), kv.narrow(2, W, W), mask, heads);
  ref.backward(upstream);
  auto qf = q0.clone().requires_grad_(true), kvf = kv0.clone().requires_grad_(true);
  const auto out = fused_cross_attention(qf, kvf, heads, mask);
  out.backward(upstream);

  expect_close(out, ref, 1e-5, "cross-attention output");
  expect_close(qf.grad(), q.grad(), 1e-4, "cross-attention dq");
  expect_close(kvf.grad(), kv.grad(), 1e-4, "cross-attention d(kv)");
}

TEST(FusedAttention, CrossAttentionMatchesMatmulFormulation) {
  check_cross(4, 13, 65, {}, 5);  // text queries on image tokens: no mask
  // A few query rows against padded text keys (the last fusion layer at selected positions).
  check_cross(3, 2, 30, key_mask({30, 4, 11}, 30), 8);
  check_cross(5, 1, 17, key_mask({1, 17, 2, 9, 16}, 17).view({5, 1, 1, 17}), 9);
}

// Query rows reading shared keys and values through kv_index (one image's serving every text it
// is paired with): the reference on the gathered kv, gradients summed into the shared rows. Rows
// used twice, once and never, with a key mask over kv's rows.
TEST(FusedAttention, CrossAttentionWithKvIndexIsTheGatheredFormulation) {
  auto g = gen(10);
  const int64_t B = 6, Bk = 4, Lq = 3, Lk = 11, heads = 2, d = 8, W = heads * d;
  const auto index = torch::tensor(std::vector<int64_t>{2, 0, 2, 3, 0, 2});  // row 1 unused
  const auto mask = key_mask({11, 4, 7, 1}, Lk);
  const auto q0 = torch::randn({B, Lq, W}, g), kv0 = torch::randn({Bk, Lk, 2 * W}, g);
  const auto upstream = torch::randn({B, Lq, W}, g);

  auto q = q0.clone().requires_grad_(true), kv = kv0.clone().requires_grad_(true);
  const auto kvg = kv.index_select(0, index);
  reference(q, kvg.narrow(2, 0, W), kvg.narrow(2, W, W), mask.index_select(0, index), heads)
      .backward(upstream);
  auto qf = q0.clone().requires_grad_(true), kvf = kv0.clone().requires_grad_(true);
  const auto out = fused_cross_attention(qf, kvf, heads, mask, index);
  out.backward(upstream);

  const auto ref =
      reference(q0, kv0.index_select(0, index).narrow(2, 0, W),
                kv0.index_select(0, index).narrow(2, W, W), mask.index_select(0, index), heads);
  expect_close(out, ref, 1e-5, "indexed cross-attention output");
  expect_close(qf.grad(), q.grad(), 1e-4, "indexed cross-attention dq");
  expect_close(kvf.grad(), kv.grad(), 1e-4, "indexed cross-attention d(kv)");
  EXPECT_EQ(max_abs(kvf.grad()[1]), 0.0) << "an unread kv row got a gradient";
  // The index must name a kv row for every query row.
  EXPECT_THROW(fused_cross_attention(q0, kv0, heads, {}, torch::tensor({0, 1})), std::exception);
  EXPECT_THROW(fused_cross_attention(q0, kv0, heads, {}, torch::full({B}, Bk, torch::kLong)),
               std::exception);
}

// A padded key must get exactly zero weight: changing its key and value changes nothing, and no
// gradient reaches it (self-attention; the masked cross-attention shares the kernel and is
// checked against the reference above).
TEST(FusedAttention, PaddedKeysGetExactlyZeroWeight) {
  auto g = gen(6);
  const int64_t B = 2, L = 9, heads = 2, d = 4, W = heads * d;
  const auto mask = key_mask({5, 9}, L);
  auto qkv = torch::randn({B, L, 3 * W}, g).requires_grad_(true);
  const auto out = fused_self_attention(qkv, mask, heads);
  auto changed = qkv.detach().clone();
  changed[0].narrow(0, 5, 4).narrow(1, W, 2 * W).mul_(100.0).add_(3.0);  // row 0's padded k, v
  const auto out2 = fused_self_attention(changed, mask, heads);
  EXPECT_TRUE(torch::equal(out[0].narrow(0, 0, 5), out2[0].narrow(0, 0, 5)));
  out.sum().backward();
  EXPECT_EQ(max_abs(qkv.grad()[0].narrow(0, 5, 4).narrow(1, W, 2 * W)), 0.0);
}

// Softmax weights of one head, read back through V = identity: rows sum to 1 and match
// torch::softmax to float rounding over the whole range of scores, very negative ones included.
TEST(FusedAttention, SoftmaxWeightsMatchLibtorch) {
  const int64_t L = 40, heads = 1, d = L;  // V = I makes the output the weight matrix itself
  auto g = gen(7);
  auto q = torch::randn({1, L, d}, g) * 25.0;
  auto k = torch::randn({1, L, d}, g);
  const auto v = torch::eye(L).unsqueeze(0);
  const auto out = fused_self_attention(torch::cat({q, k, v}, 2), {}, heads);
  const auto want = torch::softmax(torch::matmul(q, k.transpose(1, 2)) / std::sqrt(double(d)), -1);
  expect_close(out, want, 2e-6, "softmax weights");
  expect_close(out.sum(-1), torch::ones({1, L}), 1e-5, "row sums");
  EXPECT_GT(max_abs(torch::matmul(q, k.transpose(1, 2)) / std::sqrt(double(d))), 60.0)
      << "the case should span scores whose exp underflows";
}

TEST(FusedAttention, NanPropagatesAndBadShapesThrow) {
  auto qkv = torch::randn({2, 5, 3 * 8});
  qkv[1][2][0] = std::nan("");  // a query of row 1
  const auto out = fused_self_attention(qkv, {}, 2);
  EXPECT_TRUE(torch::isnan(out[1][2]).any().item<bool>());
  EXPECT_FALSE(torch::isnan(out[0]).any().item<bool>());
  EXPECT_THROW(fused_self_attention(torch::randn({2, 5, 25}), {}, 2), std::exception);
  EXPECT_THROW(fused_self_attention(torch::randn({2, 5, 24}), {}, 5), std::exception);
  EXPECT_THROW(fused_self_attention(torch::randn({2, 5, 24}, torch::kDouble), {}, 2),
               std::exception);
  EXPECT_THROW(fused_cross_attention(torch::randn({2, 5, 8}), torch::randn({2, 7, 8}), 2),
               std::exception);
}

// ---------------------------------------------------------------------------------------------
// heads_attention's kernels on heads [B, h, L, d].

struct Heads {
  torch::Tensor q, k, v, mask;  // mask: [B, 1, 1, Lk] additive, or undefined
};

Heads heads(int64_t B, int64_t h, int64_t Lq, int64_t Lk, int64_t d, bool masked, uint64_t seed,
            torch::TensorOptions opts = {}) {
  auto g = gen(seed);
  Heads x{torch::randn({B, h, Lq, d}, g).to(opts),
          torch::randn({B, h, Lk, d}, g).to(opts),
          torch::randn({B, h, Lk, d}, g).to(opts),
          {}};
  if (masked) {
    std::vector<int64_t> lengths;
    for (int64_t b = 0; b < B; ++b) lengths.push_back(1 + (b * 5 + 2) % Lk);
    x.mask = key_mask(lengths, Lk).view({B, 1, 1, Lk}).to(opts);
  }
  return x;
}

using Kernel = std::function<torch::Tensor(const Heads&)>;

// Output and the gradients of q, k and v for one upstream gradient, of `kernel` against `want`.
void compare_kernels(const Heads& x, const Kernel& kernel, const Kernel& want, double tol,
                     const char* what) {
  auto run = [&](const Kernel& f) {
    Heads y{x.q.detach().clone().requires_grad_(true), x.k.detach().clone().requires_grad_(true),
            x.v.detach().clone().requires_grad_(true), x.mask};
    const auto out = f(y);
    auto upstream = torch::ones_like(out);
    upstream.narrow(2, 0, 1).mul_(-2.0);  // not a plain sum: the rows' gradients differ
    out.backward(upstream);
    return std::vector<torch::Tensor>{out, y.q.grad(), y.k.grad(), y.v.grad()};
  };
  const auto a = run(kernel), b = run(want);
  const char* names[] = {"output", "dq", "dk", "dv"};
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].sizes(), b[i].sizes()) << what << " " << names[i];
    const double err = max_abs((a[i] - b[i]).to(torch::kFloat).cpu());
    const double scale = std::max(1e-3, max_abs(b[i].to(torch::kFloat).cpu()));
    EXPECT_LT(err, tol * scale) << what << " " << names[i] << ": max |diff| " << err << " of "
                                << scale;
  }
}

Kernel materialised(int64_t key_align) {
  return [key_align](const Heads& x) {
    return materialised_attention(x.q, x.k, x.v, x.mask, 0.0, false, key_align);
  };
}

Kernel sdpa() {
  return [](const Heads& x) { return sdpa_attention(x.q, x.k, x.v, x.mask, 0.0, false); };
}

// Keys and values padded with masked rows to a multiple of 8 (the CUDA path's aligned GEMMs): the
// same output and gradients as without padding, with a key mask and without one, for key counts
// on either side of a multiple.
TEST(HeadsAttention, KeyPaddingChangesNothing) {
  for (int64_t Lk : {1, 7, 8, 13, 30}) {
    for (bool masked : {false, true}) {
      const Heads x = heads(2, 3, 5, Lk, 4, masked, static_cast<uint64_t>(10 + Lk));
      compare_kernels(x, materialised(8), materialised(1), 1e-6, "padded keys");
    }
  }
}

// SDPA (libtorch >= 2.0) against the materialised scores on the CPU, fp32: self-attention shapes
// with and without BERT's key mask, and cross-attention (more keys than queries).
TEST(HeadsAttention, SdpaMatchesMaterialised) {
  if (!sdpa_built())
    GTEST_SKIP() << "SKIPPED: libtorch " TORCH_VERSION " has no scaled_dot_product_attention";
  compare_kernels(heads(2, 3, 9, 9, 8, true, 21), sdpa(), materialised(1), 1e-5, "self, mask");
  compare_kernels(heads(2, 3, 9, 9, 8, false, 22), sdpa(), materialised(1), 1e-5, "self");
  compare_kernels(heads(3, 2, 6, 17, 8, false, 23), sdpa(), materialised(1), 1e-5, "cross");
}

// The same on a GPU at ALBEF-base's shapes (257 image tokens, 30 text tokens, 12 heads of 64):
// fp32 within 1e-5 relative, bf16 within the bf16 step's tolerance (3e-2), and the padded CUDA
// materialised path (what deterministic runs use) against the unpadded one.
TEST(HeadsAttention, CudaSdpaMatchesMaterialised) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "SKIPPED: no CUDA device visible";
  if (!sdpa_built())
    GTEST_SKIP() << "SKIPPED: libtorch " TORCH_VERSION " has no scaled_dot_product_attention";
  const auto f32 = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat);
  const auto bf16 = f32.dtype(torch::kBFloat16);
  const struct {
    int64_t Lq, Lk;
    bool masked;
    const char* what;
  } cases[] = {
      {257, 257, false, "ViT self"}, {30, 30, true, "text self"}, {30, 257, false, "fusion cross"}};
  for (const auto& c : cases) {
    compare_kernels(heads(2, 12, c.Lq, c.Lk, 64, c.masked, 31, f32), sdpa(), materialised(1), 1e-5,
                    c.what);
    compare_kernels(heads(2, 12, c.Lq, c.Lk, 64, c.masked, 32, bf16), sdpa(), materialised(1), 3e-2,
                    c.what);
    compare_kernels(heads(2, 12, c.Lq, c.Lk, 64, c.masked, 33, bf16), materialised(8),
                    materialised(1), 3e-2, c.what);
  }
}

// split_heads: the views of the fused projection, and a backward that gives the view formulation's
// gradient bit for bit (every part used, one unused), and hands a gradient already packed as
// [B, L, n, h, d] back as it is.
TEST(SplitHeads, BackwardIsTheViewFormulationsBitwise) {
  torch::manual_seed(41);
  const int64_t B = 2, L = 5, h = 4, d = 3;
  for (int64_t n = 1; n <= 3; ++n) {
    for (const bool all_used : {true, false}) {
      const auto x0 = torch::randn({B, L, n * h * d});
      const auto x = x0.clone().requires_grad_(true), x2 = x0.clone().requires_grad_(true);
      const auto parts = split_heads(x, n, h);
      const auto ref = x2.view({B, L, n, h, d}).permute({2, 0, 3, 1, 4}).unbind(0);
      ASSERT_EQ(parts.size(), static_cast<size_t>(n));
      torch::Tensor loss = torch::zeros({}), loss2 = torch::zeros({});
      for (int64_t i = 0; i < (all_used ? n : 1); ++i) {
        EXPECT_TRUE(torch::equal(parts[i], ref[i])) << "n " << n << ", part " << i;
        EXPECT_EQ(parts[i].data_ptr<float>(), x.data_ptr<float>() + i * h * d) << "a view of x";
        const auto w = torch::randn({B, h, L, d});
        loss = loss + (parts[i] * w).sum();
        loss2 = loss2 + (ref[i] * w).sum();
      }
      loss.backward();
      loss2.backward();
      EXPECT_TRUE(torch::equal(x.grad(), x2.grad())) << "n " << n << ", all used " << all_used;
    }
  }
}

TEST(SplitHeads, PackedGradientIsReturnedWithoutACopy) {
  const int64_t B = 2, L = 3, n = 3, h = 2, d = 4;
  const auto x = torch::randn({B, L, n * h * d}).requires_grad_(true);
  const auto parts = split_heads(x, n, h);
  const auto packed = torch::randn({B, L, n, h, d});
  std::vector<torch::Tensor> grads;
  for (int64_t i = 0; i < n; ++i) grads.push_back(packed.select(2, i).transpose(1, 2));
  const auto gx = torch::autograd::grad(parts, {x}, grads)[0];
  EXPECT_TRUE(torch::equal(gx, packed.view({B, L, n * h * d})));
  EXPECT_EQ(gx.data_ptr(), packed.data_ptr());
  // The same slices in another order are not the buffer's layout: copied, still right.
  std::vector<torch::Tensor> swapped = {grads[1], grads[0], grads[2]};
  const auto gs = torch::autograd::grad(parts, {x}, swapped)[0];
  EXPECT_NE(gs.data_ptr(), packed.data_ptr());
  EXPECT_TRUE(torch::equal(gs.view({B, L, n, h, d}).select(2, 0), packed.select(2, 1)));
}

// On a GPU through both attention kernels at ALBEF-base's shapes, bf16: split_heads' gradient is
// the view formulation's, bitwise through the materialised scores (deterministic kernels) and
// within bf16 rounding through SDPA (whose backward may write the packed layout itself).
TEST(SplitHeads, CudaGradientsThroughAttentionMatchTheViews) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "SKIPPED: no CUDA device visible";
  torch::manual_seed(43);
  const int64_t B = 4, L = 257, h = 12, d = 64;
  const auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const auto x0 = torch::randn({B, L, 3 * h * d}, opts);
  const auto up = torch::randn({B, h, L, d}, opts);
  for (const bool sdpa : {false, true}) {
    if (sdpa && !sdpa_built()) continue;
    torch::Tensor grads[2];
    for (int k = 0; k < 2; ++k) {
      const auto x = x0.clone().requires_grad_(true);
      const auto t = k == 0 ? split_heads(x, 3, h)
                            : x.view({B, L, 3, h, d}).permute({2, 0, 3, 1, 4}).unbind(0);
      const auto o = sdpa ? sdpa_attention(t[0], t[1], t[2], {}, 0.0, false)
                          : materialised_attention(t[0], t[1], t[2], {}, 0.0, false, 8);
      (o.to(torch::kFloat) * up.to(torch::kFloat)).sum().backward();
      grads[k] = x.grad();
    }
    if (sdpa)
      EXPECT_LT(((grads[0] - grads[1]).abs().max() / grads[1].abs().max()).item<double>(), 3e-2);
    else
      EXPECT_TRUE(torch::equal(grads[0], grads[1]));
  }
}

}  // namespace
