// UniformSampler's replay of a resized epoch, block by block, against the whole-pool replay it
// replaced: the same batches on every rank, for a history of several rank counts and batch sizes.
#include <gtest/gtest.h>

#include <vector>

#include "fnvlp/data/sampler.hpp"
#include "whole_pool_replay.hpp"

namespace fnvlp::data {
namespace {

using whole_pool::Config;
using whole_pool::reference;

std::vector<std::vector<int64_t>> drain(UniformSampler& s) {
  std::vector<std::vector<int64_t>> out;
  std::vector<int64_t> ids;
  while (s.next(ids)) out.push_back(ids);
  return out;
}

TEST(UniformSamplerReplay, BlockByBlockEqualsTheWholePoolReplay) {
  const int64_t n = 1003, epoch = 4;
  const uint64_t seed = 11;
  // 3 ranks x 7 ran 5 batches, then 5 ranks x 9 ran 2, then 2 ranks x 7, then 8 ranks x 4.
  const std::vector<Config> configs = {{3, 7}, {5, 9}, {2, 7}, {8, 4}};
  const std::vector<int64_t> cursors = {5, 2, 3};
  nlohmann::json st;
  {
    UniformSampler s(BlockPartition(n, configs[0].ranks), configs[0].batch, seed, 0);
    s.start_epoch(epoch);
    std::vector<int64_t> ids;
    for (int64_t b = 0; b < cursors[0]; ++b) ASSERT_TRUE(s.next(ids));
    st = s.state();
  }
  for (size_t k = 1; k < configs.size(); ++k) {
    const BlockPartition p(n, configs[k].ranks);
    std::vector<nlohmann::json> states;
    for (int r = 0; r < p.ranks(); ++r) {
      UniformSampler s(p, configs[k].batch, seed, r);
      s.load_state(st);
      const std::vector<int64_t> done(cursors.begin(), cursors.begin() + static_cast<long>(k));
      const auto want = reference(n, configs, done, seed, epoch, r);
      ASSERT_FALSE(want.empty()) << "configuration " << k << " has no batch left";
      EXPECT_EQ(s.batches_remaining(), static_cast<int64_t>(want.size()));
      if (k + 1 < configs.size()) {  // run this segment's batches, then resize again
        std::vector<int64_t> ids;
        for (int64_t b = 0; b < cursors[k]; ++b) {
          ASSERT_TRUE(s.next(ids));
          EXPECT_EQ(ids, want[static_cast<size_t>(b)]) << "segment " << k << " rank " << r;
        }
        states.push_back(s.state());
      } else {
        EXPECT_EQ(drain(s), want) << "rank " << r << " of the last configuration";
      }
    }
    if (!states.empty()) {
      for (const auto& x : states) EXPECT_EQ(x, states[0]) << "ranks disagree on the state";
      st = states[0];
    }
  }
}

}  // namespace
}  // namespace fnvlp::data
