// fnvlp's at::parallel_for loops run on the threads torch::set_num_threads asks for: in the
// thread that set them and in a thread started later (the loader's), with the results of one.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <thread>

#include "fnvlp/core/intraop.hpp"
#include "fnvlp/model/gelu.hpp"

namespace {

struct ThreadCount {
  int saved = at::get_num_threads();
  explicit ThreadCount(int n) { at::set_num_threads(n); }
  ~ThreadCount() { at::set_num_threads(saved); }
};

TEST(IntraOp, LoopsRunOnTheRequestedThreadsHereAndInANewThread) {
  {
    const ThreadCount three(3);
    EXPECT_EQ(fnvlp::intraop_threads(), 3);
    int in_new_thread = 0;
    std::thread([&] { in_new_thread = fnvlp::intraop_threads(); }).join();
    EXPECT_EQ(in_new_thread, 3);
  }
  const ThreadCount one(1);
  EXPECT_EQ(fnvlp::intraop_threads(), 1);
}

TEST(IntraOp, GeluIsTheSameOnOneAndThreeThreads) {
  torch::manual_seed(0);
  const torch::Tensor x = torch::randn({5, 40000});  // several tasks of 2^15 elements
  auto run = [&](int threads) {
    const ThreadCount n(threads);
    const torch::Tensor in = x.clone().requires_grad_(true);
    const torch::Tensor y = fnvlp::model::gelu(in);
    y.backward(torch::ones_like(y) * 0.5);
    return std::make_pair(y.detach(), in.grad());
  };
  const auto [y1, g1] = run(1);
  const auto [y3, g3] = run(3);
  EXPECT_TRUE(torch::equal(y1, y3));
  EXPECT_TRUE(torch::equal(g1, g3));
}

}  // namespace
