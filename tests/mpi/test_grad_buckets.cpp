// The gradient all-reduce overlapped with the backward (train/grad_buckets.hpp) against the single
// all-reduce after it (FlatGradients::allreduce_mean), at np 1, 2 and 4, on a small model whose
// backward uses one parameter twice, accumulates the fused CPU dense layers' weight gradients in
// place and leaves one parameter unused: the same averaged gradients, bitwise at 2 ranks for every
// bucket size (one below the smallest parameter included), within 1e-6 relative at 4.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>

#include "fnvlp/comm/flat_gradients.hpp"
#include "fnvlp/comm/tensors.hpp"
#include "fnvlp/model/albef.hpp"
#include "fnvlp/train/grad_buckets.hpp"

using fnvlp::Comm;
using fnvlp::FlatGradients;
using fnvlp::train::GradBuckets;

namespace {

struct Toy {
  fnvlp::model::Dense a{16, 32}, b{32, 24}, unused{4, 4};
  torch::Tensor scale = torch::ones({1}).requires_grad_(true);
  // The unused layer first, as a model's unused heads often come: its bucket is the last to start,
  // so it holds no other back.
  std::vector<torch::Tensor> params() const {
    return {unused->weight, unused->bias, a->weight, a->bias, scale, b->weight, b->bias};
  }
};

// Three steps of the toy's loss on this rank's own data; the averaged gradient buffer after each.
std::vector<torch::Tensor> train(const Comm& comm, double bucket_mb, int64_t* buckets,
                                 int64_t* overlapped) {
  torch::manual_seed(11);
  Toy toy;
  for (auto& p : toy.params()) p.detach().normal_(0, 0.3);
  FlatGradients grads(toy.params());
  std::unique_ptr<GradBuckets> bucketed;
  if (bucket_mb > 0)
    bucketed = std::make_unique<GradBuckets>(comm, grads, toy.params(), bucket_mb, 30.0, nullptr);
  std::vector<torch::Tensor> out;
  for (int step = 0; step < 3; ++step) {
    grads.zero();
    torch::manual_seed(100 + 7 * comm.rank() + step);
    const auto x = torch::randn({8, 16});
    const auto y = toy.b(torch::gelu(toy.a(x) * toy.scale)) * toy.scale;  // scale used twice
    const auto loss = y.pow(2).mean();
    if (bucketed) bucketed->begin();
    loss.backward();
    if (bucketed) {
      bucketed->finish();
      *buckets = static_cast<int64_t>(bucketed->ranges().size());
      *overlapped = bucketed->started_in_backward();
    } else {
      grads.allreduce_mean(comm);
    }
    out.push_back(grads.buffer().clone());
  }
  return out;
}

}  // namespace

TEST(GradBuckets, MatchTheSingleAllreduce) {
  Comm comm;
  if (comm.size() == 1) {
    EXPECT_FALSE(GradBuckets::applies(comm, torch::zeros({1}), nullptr));
    GTEST_SKIP() << "one rank: nothing to reduce (the bucketed path applies from 2 ranks)";
  }
  int64_t none = 0;
  const auto single = train(comm, 0, &none, &none);
  // 1e-7 MiB: below the smallest parameter (one float), so every parameter is its own bucket.
  for (double mb : {1e-7, 2e-3, 25.0}) {
    int64_t buckets = 0, overlapped = 0;
    const auto got = train(comm, mb, &buckets, &overlapped);
    if (mb == 1e-7) EXPECT_EQ(buckets, 7);
    if (mb == 25.0) EXPECT_EQ(buckets, 1);
    // Every bucket but the unused parameters' starts during the backward (a parameter is done
    // when its accumulator has run, also for the dense layers' in-place weight gradients).
    if (mb == 1e-7) EXPECT_EQ(overlapped, 5);
    for (size_t s = 0; s < single.size(); ++s) {
      if (comm.size() == 2) {
        EXPECT_TRUE(torch::equal(got[s], single[s])) << "bucket_mb " << mb << ", step " << s;
      } else {
        const double err = (got[s] - single[s]).abs().max().item<double>();
        EXPECT_LE(err, 1e-6 * single[s].abs().max().item<double>()) << mb << ", step " << s;
      }
    }
  }
}

// Buckets cover the buffer exactly, in reverse parameter order, each at least bucket_mb unless it
// holds the first parameter.
TEST(GradBuckets, TileTheBufferBackwards) {
  Comm comm;
  if (comm.size() == 1) GTEST_SKIP() << "one rank: no buckets";
  Toy toy;
  FlatGradients grads(toy.params());
  GradBuckets b(comm, grads, toy.params(), 1e-3, 30.0, nullptr);  // 262 floats
  int64_t end = grads.buffer().numel();
  for (const auto& [lo, hi] : b.ranges()) {
    EXPECT_EQ(hi, end);
    EXPECT_TRUE(hi - lo >= 262 || lo == 0) << lo << ".." << hi;
    end = lo;
  }
  EXPECT_EQ(end, 0);
}
