// sampler.embeddings=cached: the embeddings each pair of the block got in its last training step.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <limits>
#include <vector>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/core/error.hpp"
#include "fnvlp/store/checkpoint.hpp"
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

TEST(EpochCache, StateBytesCoverItsCheckpointFileForTheWholeSet) {
  // The rank's block is 6 pairs of 40: its file holds all 40 rows (the free-space check's count).
  EpochCache c({10, 16}, 2);
  c.record(torch::tensor({11, 12}, torch::kLong), torch::ones({2, 2}), torch::ones({2, 2}));
  const fnvlp::Comm comm;
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "fnvlp_cache_bytes";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  c.save(dir.string(), comm, 40);
  uint64_t payload = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::vector<int64_t> ids(40);
    for (int64_t p = 0; p < 40; ++p) ids[p] = p;
    const auto r = fnvlp::store::load_per_pair(dir.string(), e.path().stem().string(), comm, ids);
    payload += r.values.size() * sizeof(float) + r.valid.size();
  }
  EXPECT_EQ(c.state_bytes(40), payload);
  EXPECT_EQ(payload, 40u * (5u * 4u + 1u));
}
