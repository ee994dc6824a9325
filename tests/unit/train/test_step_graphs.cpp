// StepGraphs (train/step_graphs.hpp): without graphs every call runs the function; with them (a
// GPU) the first call runs it, the second captures and replays it, later ones replay, and the
// replays compute what eager calls compute from the same inputs, random draws included.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "fnvlp/train/step_graphs.hpp"

namespace {

using fnvlp::train::StepGraphs;

TEST(StepGraphs, DisabledRunsEveryCallEagerly) {
  StepGraphs graphs(false);
  int calls = 0;
  for (int i = 0; i < 5; ++i) graphs.run(i % 2, [&] { ++calls; });
  EXPECT_EQ(calls, 5);
  EXPECT_EQ(graphs.eager(), 5);
  EXPECT_EQ(graphs.graphs(), 0);
  EXPECT_EQ(graphs.replays(), 0);
}

#if !FNVLP_WITH_CUDA
TEST(StepGraphs, TheCpuBuildRefusesGraphs) { EXPECT_THROW(StepGraphs(true), std::exception); }
#endif

// A step with the static step's ingredients: inputs refilled in place, an in-place update of a
// persistent tensor, a dropout mask from the default CUDA generator reseeded before each call, a
// result written into a persistent output. Captured, its replays must equal eager calls.
TEST(StepGraphs, CudaReplaysEqualEagerCalls) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "SKIPPED: no CUDA device visible";
  const auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat);
  auto run = [&](bool enabled) {
    StepGraphs graphs(enabled);
    torch::Tensor input = torch::empty({256}, opts), state = torch::zeros({256}, opts);
    torch::Tensor out = torch::empty({256}, opts);
    std::vector<torch::Tensor> outs;
    for (int step = 0; step < 6; ++step) {
      input.copy_(torch::arange(256, opts) * (step + 1));
      torch::manual_seed(100 + step);
      graphs.run(0, [&] {
        state.add_(input);
        out.copy_(torch::dropout(state, 0.5, /*train=*/true) + input.sin());
      });
      outs.push_back(out.cpu());
    }
    return std::make_pair(outs, graphs.graphs());
  };
  const auto [eager, none] = run(false);
  const auto [graphed, captured] = run(true);
  EXPECT_EQ(none, 0);
  EXPECT_EQ(captured, 1);
  for (size_t i = 0; i < eager.size(); ++i)
    EXPECT_TRUE(torch::equal(eager[i], graphed[i])) << "step " << i;
}

}  // namespace
