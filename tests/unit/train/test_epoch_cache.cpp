// sampler.embeddings=cached: the embeddings each pair of the block got in its last training step.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <vector>

#include "fnvlp/core/error.hpp"
#include "fnvlp/train/epoch_cache.hpp"

using fnvlp::train::EpochCache;

TEST(EpochCache, KeepsEachPairsLastStepAndNamesThePairsNoStepEmbedded) {
  EpochCache c({10, 16}, 2);  // pairs 10..15, D = 2
  EXPECT_EQ(c.unseen(), (std::vector<int64_t>{10, 11, 12, 13, 14, 15}));
  c.record(torch::tensor({12, 10}), torch::tensor({{1.f, 2.f}, {3.f, 4.f}}),
           torch::tensor({{5.f, 6.f}, {7.f, 8.f}}));
  c.record(torch::tensor({12}), torch::tensor({{9.f, 9.f}}), torch::tensor({{-9.f, -9.f}}));
  EXPECT_EQ(c.unseen(), (std::vector<int64_t>{11, 13, 14, 15}));
  EXPECT_TRUE(c.image()[2].equal(torch::tensor({9.f, 9.f}))) << "the later step wins";
  EXPECT_TRUE(c.image()[0].equal(torch::tensor({3.f, 4.f})));
  EXPECT_TRUE(c.text()[0].equal(torch::tensor({7.f, 8.f})));
  // Rows embedded outside training fill the cache and stay unseen (re-embedded next time).
  c.fill({11, 15}, {1.f, 1.f, 2.f, 2.f}, {3.f, 3.f, 4.f, 4.f});
  EXPECT_TRUE(c.text()[5].equal(torch::tensor({4.f, 4.f})));
  EXPECT_EQ(c.unseen(), (std::vector<int64_t>{11, 13, 14, 15}));
  // A step with non-finite embeddings (skipped by the trainer) changes nothing.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  c.record(torch::tensor({13}), torch::tensor({{nan, 0.f}}), torch::tensor({{0.f, 0.f}}));
  EXPECT_EQ(c.unseen(), (std::vector<int64_t>{11, 13, 14, 15}));
  EXPECT_TRUE(torch::isfinite(c.image()).all().item<bool>());
}

// The guard issue 27 keeps: a rank's cache never takes a pair outside its block.
TEST(EpochCache, RefusesPairsOutsideTheBlockAndRowsOfAnotherWidth) {
  EpochCache c({10, 16}, 2);
  EXPECT_THROW(c.record(torch::tensor({16}), torch::zeros({1, 2}), torch::zeros({1, 2})),
               fnvlp::Error);
  EXPECT_THROW(c.record(torch::tensor({9}), torch::zeros({1, 2}), torch::zeros({1, 2})),
               fnvlp::Error);
  EXPECT_THROW(c.record(torch::tensor({10}), torch::zeros({1, 3}), torch::zeros({1, 3})),
               fnvlp::Error);
  EXPECT_EQ(c.unseen().size(), 6u);
}
