// The fused CPU attention kernels (model/attention.hpp) against the matmul formulation they
// replace: outputs and gradients of self-attention (with and without a key mask, on strided views
// of a fused projection) and of cross-attention, the exact zero weight of padded keys, and NaN
// propagation.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "fnvlp/model/attention.hpp"

namespace {

using fnvlp::model::fused_cross_attention;
using fnvlp::model::fused_self_attention;

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

}  // namespace
