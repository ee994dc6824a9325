// GloFND's partitioned state (ARCHITECTURE.md §7) at np 1, 2 and 4: every rank updates only the λ
// of its own block, and the union of the ranks' λ equals a single process updating all anchors from
// the same similarities.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/core/error.hpp"
#include "fnvlp/data/sampler.hpp"
#include "fnvlp/negatives/glofnd.hpp"

using fnvlp::Comm;
using namespace fnvlp::negatives;

namespace {

constexpr int64_t kPairs = 45;  // uneven blocks at 2 and 4 ranks
constexpr int64_t kPerRank = 5;

// Cosine of anchor i against column pair j at step s: a fixed smooth function, so every rank can
// recompute any row.
float sim(int64_t i, int64_t j, int64_t s) {
  return static_cast<float>(0.9 * std::sin(0.37 * i + 1.3 * j + 0.1 * s));
}

// The anchors rank r puts in its batch at step s: kPerRank pairs of its block, cycling.
std::vector<int64_t> anchors(const fnvlp::data::BlockPartition& part, int r, int64_t s) {
  const auto block = part.block(r);
  std::vector<int64_t> out;
  for (int64_t k = 0; k < kPerRank; ++k)
    out.push_back(block.begin + (s * kPerRank + k) % block.size());
  return out;
}

TEST(GlofndMpi, PartitionedLambdaEqualsSingleProcess) {
  Comm comm;
  const int ranks = comm.size();
  const fnvlp::data::BlockPartition part(kPairs, ranks);
  GlofndOptions opt;
  opt.alpha = 0.2;
  GlofndSide mine(part.block(comm.rank()), opt);
  GlofndSide reference({0, kPairs}, opt);  // what one process holding everything computes
  for (int64_t s = 0; s < 30; ++s) {
    std::vector<int64_t> cols;
    for (int r = 0; r < ranks; ++r)
      for (int64_t p : anchors(part, r, s)) cols.push_back(p);
    auto rows_for = [&](const std::vector<int64_t>& ids) {
      auto cos =
          torch::empty({static_cast<int64_t>(ids.size()), static_cast<int64_t>(cols.size())});
      auto neg = torch::empty(cos.sizes(), torch::kBool);
      for (size_t a = 0; a < ids.size(); ++a)
        for (size_t c = 0; c < cols.size(); ++c) {
          cos[a][c] = sim(ids[a], cols[c], s);
          neg[a][c] = ids[a] != cols[c];
        }
      return std::make_pair(cos, neg);
    };
    const auto local = anchors(part, comm.rank(), s);
    const auto [cos, neg] = rows_for(local);
    mine.update_and_filter(cos, neg, local);
    for (int r = 0; r < ranks; ++r) {
      const auto ids = anchors(part, r, s);
      const auto [c, n] = rows_for(ids);
      reference.update_and_filter(c, n, ids);
    }
  }
  // Blocks are contiguous and in rank order: the gather is in pair_id order.
  const std::vector<float> all = comm.allgatherv(mine.lambdas());
  ASSERT_EQ(all.size(), static_cast<size_t>(kPairs));
  EXPECT_EQ(all, reference.lambdas());
  // Something was learned (λ left its initial value 1 for the anchors that were updated).
  EXPECT_LT(*std::min_element(all.begin(), all.end()), 1.0f);
  // Ownership: a pair of another rank's block is refused, not silently created.
  if (ranks > 1) {
    const int other = (comm.rank() + 1) % ranks;
    EXPECT_THROW(mine.lambda(part.block(other).begin), fnvlp::Error);
  }
  // O(N / R) memory: this rank holds exactly its block.
  EXPECT_EQ(mine.lambdas().size(), static_cast<size_t>(part.block(comm.rank()).size()));
}

}  // namespace
