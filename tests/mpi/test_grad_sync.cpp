// Data-parallel plumbing at np 1, 2, 4: broadcast, gradient averaging, row all-gather.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "fnvlp/comm/flat_gradients.hpp"
#include "fnvlp/comm/tensors.hpp"

using fnvlp::Comm;

namespace {

// The average over ranks one tensor at a time: the reference the flat buffer is checked against.
void average_each(const Comm& comm, const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  for (const auto& p : params) {
    auto g = p.grad().contiguous();
    comm.allreduce(g.data_ptr<float>(), static_cast<size_t>(g.numel()), fnvlp::ReduceOp::kSum);
    p.mutable_grad() = g.mul_(1.0f / static_cast<float>(comm.size()));
  }
}

}  // namespace

TEST(GradSync, BroadcastMakesReplicasIdentical) {
  Comm comm;
  torch::manual_seed(100 + comm.rank());  // every rank initialises differently
  torch::nn::Linear lin(5, 3);
  torch::nn::BatchNorm1d bn(3);
  bn->running_mean.fill_(comm.rank());
  fnvlp::broadcast_module(comm, *lin);
  fnvlp::broadcast_module(comm, *bn);
  torch::manual_seed(100);
  torch::nn::Linear ref(5, 3);
  EXPECT_TRUE(torch::equal(lin->weight, ref->weight));
  EXPECT_TRUE(torch::equal(bn->running_mean, torch::zeros(3)));
}

TEST(GradSync, GradientsAreAveragedInSmallAndLargeChunks) {
  Comm comm;
  const int n = comm.size();
  for (size_t chunk : {size_t(8), size_t(1) << 28}) {
    std::vector<torch::Tensor> params = {torch::zeros({3, 4}, torch::requires_grad()),
                                         torch::zeros({7}, torch::requires_grad()),
                                         torch::zeros({2}, torch::requires_grad())};
    fnvlp::FlatGradients grads(params);
    params[0].mutable_grad().fill_(float(comm.rank() + 1));  // written into its slot
    params[1].mutable_grad() = torch::arange(7, torch::kFloat) * float(comm.rank());  // replaced
    // params[2] has no gradient on any rank: treated as zeros, layout stays consistent.
    params[2].mutable_grad() = torch::Tensor();
    const int calls = grads.allreduce_mean(comm, chunk);
    EXPECT_EQ(calls, n == 1 ? 0 : (chunk == 8 ? 3 : 1));  // 21 floats
    EXPECT_TRUE(torch::allclose(params[0].grad(), torch::full({3, 4}, (n + 1) / 2.0f)));
    EXPECT_TRUE(
        torch::allclose(params[1].grad(), torch::arange(7, torch::kFloat) * ((n - 1) / 2.0f)));
    EXPECT_TRUE(torch::equal(params[2].grad(), torch::zeros({2})));
    EXPECT_EQ(grads.rebinds(), 2);
  }
}

TEST(GradSync, AllgatherRowsKeepsRankOrderAndOffsets) {
  Comm comm;
  const int r = comm.rank();
  auto local = torch::full({r + 1, 2}, float(r));  // ragged: rank r has r+1 rows
  int64_t offset = -1;
  auto all = fnvlp::allgather_rows(comm, local, &offset);
  EXPECT_EQ(offset, int64_t(r) * (r + 1) / 2);
  ASSERT_EQ(all.size(0), int64_t(comm.size()) * (comm.size() + 1) / 2);
  EXPECT_TRUE(torch::equal(all.slice(0, offset, offset + r + 1), local));
  EXPECT_FALSE(all.requires_grad());
}

// The gathered rows are a float copy without gradient at every rank count (at one rank no
// collective runs: still a copy, never a view of the caller's tensor).
TEST(GradSync, AllgatherRowsIsAFloatCopy) {
  Comm comm;
  const auto local =
      torch::arange(6, torch::kFloat).reshape({3, 2}).add(comm.rank()).requires_grad_(true);
  int64_t offset = -1;
  auto all = fnvlp::allgather_rows(comm, local, &offset);
  EXPECT_EQ(offset, 3 * comm.rank());
  ASSERT_EQ(all.scalar_type(), torch::kFloat);
  EXPECT_FALSE(all.requires_grad());
  all.zero_();
  EXPECT_EQ(local.detach().sum().item<float>(), 15.0f + 6.0f * comm.rank());
  auto halves = fnvlp::allgather_rows(comm, local.detach().to(torch::kBFloat16), nullptr);
  EXPECT_EQ(halves.scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::equal(halves.narrow(0, 3 * comm.rank(), 3), local.detach()));
}

TEST(GradSync, FlatGradientsAverageInPlaceLikeTheBuckets) {
  Comm comm;
  const int n = comm.size();
  torch::manual_seed(7);  // the same replica on every rank
  torch::nn::Linear lin(6, 5), ref(6, 5);
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < lin->parameters().size(); ++i)
      ref->parameters()[i].copy_(lin->parameters()[i]);
  }
  fnvlp::FlatGradients grads(lin->parameters());
  const float* base = grads.buffer().data_ptr<float>();
  ASSERT_EQ(grads.buffer().numel(), 6 * 5 + 5);
  for (int step = 0; step < 2; ++step) {  // the second step checks zero() and re-accumulation
    // Different data per rank and step.
    auto x = torch::arange(12, torch::kFloat).reshape({2, 6}) * float(comm.rank() + 1 + step);
    grads.zero();
    lin->forward(x).pow(2).sum().backward();
    for (auto& p : ref->parameters()) p.mutable_grad() = torch::Tensor();
    ref->forward(x).pow(2).sum().backward();
    // Autograd accumulated into the bound views (weight first, then bias): nothing to re-bind.
    EXPECT_EQ(lin->weight.grad().data_ptr<float>(), base);
    EXPECT_EQ(lin->bias.grad().data_ptr<float>(), base + 6 * 5);
    const int calls = grads.allreduce_mean(comm, 7);  // small chunks: 35 floats in 5 calls
    EXPECT_EQ(calls, n == 1 ? 0 : 5);
    average_each(comm, ref->parameters());
    for (size_t i = 0; i < ref->parameters().size(); ++i)
      EXPECT_TRUE(torch::allclose(lin->parameters()[i].grad(), ref->parameters()[i].grad()))
          << "parameter " << i << ", step " << step;
  }
  EXPECT_EQ(grads.rebinds(), 0);

  // A gradient replaced behind the buffer's back still enters the average, and is bound again.
  lin->weight.mutable_grad() = torch::full({5, 6}, float(comm.rank()));
  lin->bias.mutable_grad() = torch::Tensor();  // no gradient: counts as zeros
  grads.allreduce_mean(comm);
  EXPECT_EQ(grads.rebinds(), 2);
  EXPECT_TRUE(torch::allclose(lin->weight.grad(), torch::full({5, 6}, (n - 1) / 2.0f)));
  EXPECT_TRUE(torch::equal(lin->bias.grad(), torch::zeros({5})));
  EXPECT_EQ(lin->weight.grad().data_ptr(), grads.buffer().data_ptr());
}

// clip_norm over the buffer is libtorch's clip_grad_norm_ over the parameters: the same global
// norm returned, the same scaled gradients above the limit, nothing changed below it.
TEST(GradSync, FlatGradientsClipLikeClipGradNorm) {
  torch::manual_seed(8);
  torch::nn::Linear lin(6, 5), ref(6, 5);
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < lin->parameters().size(); ++i)
      ref->parameters()[i].copy_(lin->parameters()[i]);
  }
  fnvlp::FlatGradients grads(lin->parameters());
  const auto x = torch::randn({4, 6}) * 3.0;
  for (double max_norm : {0.5, 1e6}) {
    grads.zero();
    for (auto& p : ref->parameters()) p.mutable_grad() = torch::Tensor();
    lin->forward(x).pow(2).sum().backward();
    ref->forward(x).pow(2).sum().backward();
    const double want = torch::nn::utils::clip_grad_norm_(ref->parameters(), max_norm);
    double norm = 0;
    const float factor = grads.clip_scale(max_norm, &norm);
    EXPECT_EQ(factor == 1.0f, max_norm > want) << "max_norm " << max_norm;
    EXPECT_NEAR(norm, want, 1e-5 * want) << "max_norm " << max_norm;
    const double got = grads.clip_in_place(max_norm);
    EXPECT_NEAR(got, want, 1e-5 * want) << "max_norm " << max_norm;
    EXPECT_GT(want, 0.5);  // the first case clips
    for (size_t i = 0; i < ref->parameters().size(); ++i)
      EXPECT_TRUE(
          torch::allclose(lin->parameters()[i].grad(), ref->parameters()[i].grad(), 1e-5, 1e-6))
          << "parameter " << i << ", max_norm " << max_norm;
  }
}
