// Data-parallel plumbing at np 1, 2, 4: broadcast, gradient averaging, row all-gather.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "fnvlp/train/grad_sync.hpp"

using fnvlp::Comm;

TEST(GradSync, BroadcastMakesReplicasIdentical) {
  Comm comm;
  torch::manual_seed(100 + comm.rank());  // every rank initialises differently
  torch::nn::Linear lin(5, 3);
  torch::nn::BatchNorm1d bn(3);
  bn->running_mean.fill_(comm.rank());
  fnvlp::train::broadcast_module(comm, *lin);
  fnvlp::train::broadcast_module(comm, *bn);
  torch::manual_seed(100);
  torch::nn::Linear ref(5, 3);
  EXPECT_TRUE(torch::equal(lin->weight, ref->weight));
  EXPECT_TRUE(torch::equal(bn->running_mean, torch::zeros(3)));
}

TEST(GradSync, GradientsAreAveragedInSmallAndLargeBuckets) {
  Comm comm;
  const int n = comm.size();
  for (size_t bucket : {size_t(8), size_t(16u << 20)}) {
    std::vector<torch::Tensor> params = {torch::zeros({3, 4}, torch::requires_grad()),
                                         torch::zeros({7}, torch::requires_grad()),
                                         torch::zeros({2}, torch::requires_grad())};
    params[0].mutable_grad() = torch::full({3, 4}, float(comm.rank() + 1));
    params[1].mutable_grad() = torch::arange(7, torch::kFloat) * float(comm.rank());
    // params[2] has no gradient on any rank: treated as zeros, layout stays consistent.
    const int calls = fnvlp::train::allreduce_gradients(comm, params, bucket);
    if (n == 1)
      EXPECT_EQ(calls, 0);  // nothing to average: no communication
    else
      EXPECT_GE(calls, 1);
    EXPECT_TRUE(torch::allclose(params[0].grad(), torch::full({3, 4}, (n + 1) / 2.0f)));
    EXPECT_TRUE(
        torch::allclose(params[1].grad(), torch::arange(7, torch::kFloat) * ((n - 1) / 2.0f)));
    EXPECT_TRUE(torch::equal(params[2].grad(), torch::zeros({2})));
  }
}

TEST(GradSync, AllgatherRowsKeepsRankOrderAndOffsets) {
  Comm comm;
  const int r = comm.rank();
  auto local = torch::full({r + 1, 2}, float(r));  // ragged: rank r has r+1 rows
  int64_t offset = -1;
  auto all = fnvlp::train::allgather_rows(comm, local, &offset);
  EXPECT_EQ(offset, int64_t(r) * (r + 1) / 2);
  ASSERT_EQ(all.size(0), int64_t(comm.size()) * (comm.size() + 1) / 2);
  EXPECT_TRUE(torch::equal(all.slice(0, offset, offset + r + 1), local));
  EXPECT_FALSE(all.requires_grad());
}
