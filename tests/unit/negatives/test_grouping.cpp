// Mini-batch construction of GRIT-VLP / FALCON (falcon.txt §3.1, Alg. 1–2): the q-quantile picker,
// the quantile profile Ŝ, search-space composition, the grouped sampler and the in-batch
// false-negative rate.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "../data/dataset_fixture.hpp"
#include "fnvlp/core/config.hpp"
#include "fnvlp/core/error.hpp"
#include "fnvlp/data/dataset.hpp"
#include "fnvlp/data/prefetch.hpp"
#include "fnvlp/data/sampler.hpp"
#include "fnvlp/negatives/fn_rate.hpp"
#include "fnvlp/negatives/grouped_sampler.hpp"
#include "fnvlp/negatives/quantile_pick.hpp"
#include "fnvlp/negatives/quantile_profile.hpp"
#include "fnvlp/negatives/search_space.hpp"
#include "fnvlp/similarity/row_quantiles.hpp"

namespace {

using namespace fnvlp::negatives;
using fnvlp::data::BlockPartition;
using json = nlohmann::json;

torch::Generator make_gen(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

torch::Tensor unit_rows(int64_t n, int64_t e, uint64_t seed) {
  auto x = torch::randn({n, e}, make_gen(seed));
  return x / x.norm(2, 1, true);
}

// Brute force: the candidate at ascending rank round(q (n−1)) of (row[c], c).
int64_t brute_pick(const std::vector<float>& row, std::vector<int64_t> cand, double q) {
  std::sort(cand.begin(), cand.end(),
            [&](int64_t a, int64_t b) { return row[a] < row[b] || (row[a] == row[b] && a < b); });
  const auto r = static_cast<size_t>(std::floor(q * static_cast<double>(cand.size() - 1) + 0.5));
  return cand[r];
}

// --- picker ----------------------------------------------------------------------------------

TEST(QuantilePick, HandMadeRow) {
  const std::vector<float> row = {0.5f, 0.1f, 0.9f, 0.3f, 0.7f};
  const std::vector<int64_t> all = {0, 1, 2, 3, 4};     // ascending by value: 1 3 0 4 2
  EXPECT_EQ(quantile_pick(row.data(), all, 1.0), 2);    // most similar (GRIT)
  EXPECT_EQ(quantile_pick(row.data(), all, 0.0), 1);    // least similar
  EXPECT_EQ(quantile_pick(row.data(), all, 0.5), 0);    // rank 2
  EXPECT_EQ(quantile_pick(row.data(), all, 0.25), 3);   // rank 1
  EXPECT_EQ(quantile_pick(row.data(), all, 0.6), 0);    // rank round(2.4) = 2
  EXPECT_EQ(quantile_pick(row.data(), all, 0.625), 4);  // rank round(2.5) = 3 (half away)
  const std::vector<int64_t> some = {4, 1, 3};          // ascending: 1 3 4
  EXPECT_EQ(quantile_pick(row.data(), some, 1.0), 4);
  EXPECT_EQ(quantile_pick(row.data(), some, 0.0), 1);
  EXPECT_EQ(quantile_pick(row.data(), some, 0.5), 3);
  EXPECT_EQ(quantile_pick(row.data(), std::vector<int64_t>{3}, 0.7), 3);
}

TEST(QuantilePick, TiesBreakByCandidateIndexWhateverTheOrder) {
  const std::vector<float> row = {0.2f, 0.5f, 0.5f, 0.5f, 0.1f};  // ascending: 4 0 1 2 3
  std::vector<int64_t> cand = {3, 1, 4, 2, 0};
  for (int perm = 0; perm < 5; ++perm) {
    std::rotate(cand.begin(), cand.begin() + 1, cand.end());
    EXPECT_EQ(quantile_pick(row.data(), cand, 1.0), 3);
    EXPECT_EQ(quantile_pick(row.data(), cand, 0.75), 2);
    EXPECT_EQ(quantile_pick(row.data(), cand, 0.5), 1);
    EXPECT_EQ(quantile_pick(row.data(), cand, 0.25), 0);
    EXPECT_EQ(quantile_pick(row.data(), cand, 0.0), 4);
  }
}

TEST(QuantilePick, MatchesBruteForceOnRowsWithDuplicates) {
  uint64_t key = 7;
  std::vector<int64_t> scratch;
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t n = 1 + static_cast<int64_t>(fnvlp::data::uniform_below(
                              fnvlp::data::counter_random(key, 3 * trial), 40));
    std::vector<float> row(64);
    for (size_t j = 0; j < row.size(); ++j)  // few distinct values: many ties
      row[j] = static_cast<float>(
          fnvlp::data::uniform_below(fnvlp::data::counter_random(key + 1, trial * 64 + j), 5));
    std::vector<int64_t> cand(64);
    std::iota(cand.begin(), cand.end(), 0);
    fnvlp::data::shuffle(cand, fnvlp::data::hash_key({key, static_cast<uint64_t>(trial)}));
    cand.resize(static_cast<size_t>(n));
    for (double q : {0.0, 0.1, 0.33, 0.5, 0.77, 0.9, 1.0})
      EXPECT_EQ(quantile_pick(row.data(), cand.data(), n, q, scratch), brute_pick(row, cand, q))
          << "trial " << trial << " q " << q;
  }
}

TEST(QuantilePick, RejectsBadQuantile) {
  const std::vector<float> row = {0.f, 1.f};
  EXPECT_THROW(quantile_pick(row.data(), std::vector<int64_t>{0, 1}, 1.5), fnvlp::Error);
  EXPECT_THROW(quantile_pick(row.data(), std::vector<int64_t>{0, 1}, -0.1), fnvlp::Error);
  EXPECT_THROW(quantile_pick(row.data(), std::vector<int64_t>{0, 1}, std::nan("")), fnvlp::Error);
  EXPECT_THROW(quantile_pick(row.data(), std::vector<int64_t>{}, 0.5), fnvlp::Error);
  EXPECT_EQ(quantile_rank(0.5, 4), 2);  // round(1.5) = 2
  EXPECT_EQ(quantile_rank(1.0, 1), 0);
}

TEST(QuantileStats, MeanAndPercentiles) {
  std::vector<double> v(101);
  std::iota(v.begin(), v.end(), 0.0);
  std::reverse(v.begin(), v.end());
  const ValueStats s = value_stats(v);
  EXPECT_EQ(s.n, 101);
  EXPECT_DOUBLE_EQ(s.mean, 50.0);
  EXPECT_DOUBLE_EQ(s.p5, 5.0);
  EXPECT_DOUBLE_EQ(s.p95, 95.0);
  EXPECT_TRUE(std::isnan(value_stats({}).mean));
}

// --- quantile profile --------------------------------------------------------------------------

TEST(QuantileProfile, MatchesBruteForceSort) {
  for (int64_t M : {2, 7, 33}) {
    auto S = torch::randn({M, M}, make_gen(M));
    S.select(0, 1).fill_(0.25f);  // a row of ties
    for (int64_t m : {2, 4, 100}) {
      const auto v = quantile_values(S, m);
      const auto p = quantile_profile(S, m);
      ASSERT_EQ(v.sizes(), (std::vector<int64_t>{M, m}));
      ASSERT_EQ(p.sizes(), (std::vector<int64_t>{M, m}));
      auto Sa = S.accessor<float, 2>();
      for (int64_t i = 0; i < M; ++i) {
        std::vector<float> off;
        for (int64_t j = 0; j < M; ++j)
          if (j != i) off.push_back(Sa[i][j]);
        std::sort(off.begin(), off.end());
        std::vector<double> expect(static_cast<size_t>(m));
        double z = 0;
        for (int64_t l = 0; l < m; ++l) {
          const double q = static_cast<double>(l) / static_cast<double>(m - 1);
          const auto r = static_cast<size_t>(std::floor(q * (off.size() - 1) + 0.5));
          expect[static_cast<size_t>(l)] = off[r];
          z += std::exp(off[r]);
        }
        for (int64_t l = 0; l < m; ++l) {
          EXPECT_FLOAT_EQ(v[i][l].item<float>(), static_cast<float>(expect[l]));
          EXPECT_NEAR(p[i][l].item<double>(), std::exp(expect[l]) / z, 1e-6);
        }
      }
      // Softmax keeps each row ascending and summing to 1.
      EXPECT_TRUE(torch::allclose(p.sum(1), torch::ones({M})));
      EXPECT_TRUE((p.narrow(1, 1, m - 1) >= p.narrow(1, 0, m - 1)).all().item<bool>());
    }
  }
  EXPECT_THROW(quantile_values(torch::zeros({1, 1}), 4), fnvlp::Error);
  EXPECT_THROW(quantile_values(torch::zeros({3, 4}), 4), fnvlp::Error);
  EXPECT_THROW(quantile_values(torch::zeros({3, 3}), 1), fnvlp::Error);
}

// The Kokkos kernel the scheduler uses gives the torch reference's values exactly (ties, several
// row blocks), and refuses NaN and out-of-range ranks.
TEST(QuantileProfile, KokkosKernelMatchesTorchReference) {
  for (int64_t M : {2, 5, 300}) {
    auto S = torch::randn({M, M}, make_gen(M + 1));
    S.select(0, M - 1).fill_(-0.5f);                             // a row of ties
    if (M > 4) S.select(0, 2).narrow(0, 0, M / 2).fill_(0.75f);  // half a row tied
    for (int64_t m : {2, 7, 100}) {
      std::vector<int64_t> ranks(static_cast<size_t>(m));
      for (int64_t l = 0; l < m; ++l)
        ranks[static_cast<size_t>(l)] =
            quantile_rank(static_cast<double>(l) / static_cast<double>(m - 1), M - 1);
      auto v = torch::empty({M, m});
      fnvlp::similarity::row_order_statistics(S.data_ptr<float>(), M, ranks, v.data_ptr<float>());
      EXPECT_TRUE(torch::equal(v, quantile_values(S, m))) << "M " << M << " m " << m;
    }
  }
  std::vector<float> bad = {0.f, 1.f, std::nanf(""), 0.f};
  std::vector<float> out(2);
  EXPECT_THROW(fnvlp::similarity::row_order_statistics(bad.data(), 2, {0}, out.data()),
               fnvlp::Error);
  bad[2] = 0.5f;
  EXPECT_THROW(fnvlp::similarity::row_order_statistics(bad.data(), 2, {1}, out.data()),
               fnvlp::Error);
  fnvlp::similarity::row_order_statistics(bad.data(), 2, {0}, out.data());
  EXPECT_EQ(out, (std::vector<float>{1.f, 0.5f}));
}

// --- search space composition ------------------------------------------------------------------

// Points on a line: S[i, j] = −|x_i − x_j| (symmetric, larger = closer).
torch::Tensor line_similarity(const std::vector<float>& x) {
  const auto n = static_cast<int64_t>(x.size());
  auto S = torch::empty({n, n});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) S[i][j] = -std::abs(x[i] - x[j]);
  return S;
}

TEST(NegativesComposition, QOneFollowsTheNearestNeighbourChainQZeroTheFarthest) {
  const std::vector<float> x = {5.0f, 0.0f, 9.0f, 2.0f, 14.0f, 4.5f};
  const std::vector<int64_t> ids = {100, 101, 102, 103, 104, 105};
  {
    SearchSpace space(ids, line_similarity(x));
    // draw 0 -> the first unselected member (local 0, x = 5).
    const ComposedBatch b = space.next_batch(6, 1.0, /*draw=*/0);
    // 5 -> 4.5 -> 2 -> 0 -> 9 -> 14: always the nearest unselected point (GRIT).
    EXPECT_EQ(b.local, (std::vector<int64_t>{0, 5, 3, 1, 2, 4}));
    EXPECT_EQ(b.pair_ids, (std::vector<int64_t>{100, 105, 103, 101, 102, 104}));
    EXPECT_EQ(b.q_rows, (std::vector<int64_t>{0, 5, 3, 1, 2}));
    EXPECT_EQ(b.q, std::vector<double>(5, 1.0));
  }
  {
    SearchSpace space(ids, line_similarity(x));
    // 5 -> 14 -> 0 -> 9 -> 2 -> 4.5: always the farthest unselected point.
    EXPECT_EQ(space.next_batch(6, 0.0, 0).local, (std::vector<int64_t>{0, 4, 1, 2, 3, 5}));
  }
  {
    // The first member is uniform among the unselected ones: draw ~ 2^64 · 3/6 picks local 3.
    SearchSpace space(ids, line_similarity(x));
    const uint64_t half = uint64_t{1} << 63;
    const ComposedBatch b = space.next_batch(3, 1.0, half);
    EXPECT_EQ(b.local, (std::vector<int64_t>{3, 1, 5}));  // 2 -> 0 -> 4.5
  }
}

TEST(NegativesComposition, SimilarityIsImageTextPlusTextImage) {
  const auto img = unit_rows(9, 8, 1), txt = unit_rows(9, 8, 2);
  std::vector<int64_t> ids(9);
  std::iota(ids.begin(), ids.end(), 0);
  SearchSpace space(ids, img, txt);
  const auto a = torch::matmul(img, txt.t());
  EXPECT_TRUE(torch::allclose(space.similarity(), a + a.t(), 1e-5, 1e-6));
  // With q = 1 every pick is the row's largest S among the unselected (brute force check).
  const ComposedBatch b = space.next_batch(9, 1.0, 12345);
  const auto S = space.similarity();
  std::set<int64_t> left(b.local.begin(), b.local.end());
  left.erase(b.local[0]);
  for (size_t t = 1; t < b.local.size(); ++t) {
    const int64_t i = b.local[t - 1];
    for (int64_t j : left) EXPECT_GE(S[i][b.local[t]].item<float>(), S[i][j].item<float>());
    left.erase(b.local[t]);
  }
  EXPECT_THROW(SearchSpace(ids, img, txt.narrow(0, 0, 8)), fnvlp::Error);
  auto bad = space.similarity().clone();
  bad[2][3] = std::nanf("");
  EXPECT_THROW(SearchSpace(ids, bad), fnvlp::Error);
}

TEST(NegativesComposition, BatchesNeverRepeatAndConsumeTheSearchSpaceExactly) {
  const int64_t M = 50, B = 8;
  std::vector<int64_t> ids(M);
  for (int64_t k = 0; k < M; ++k) ids[k] = 1000 + 3 * k;
  SearchSpace space(ids, unit_rows(M, 16, 3), unit_rows(M, 16, 4));
  std::set<int64_t> seen;
  for (int64_t k = 0; k < M / B; ++k) {
    // A different q per row, as FALCON's policy gives.
    auto q_of_row = [](int64_t row) { return static_cast<double>(row % 11) / 10.0; };
    const ComposedBatch b = space.next_batch(B, q_of_row, fnvlp::data::counter_random(9, k));
    ASSERT_EQ(static_cast<int64_t>(b.pair_ids.size()), B);
    ASSERT_EQ(b.q.size(), static_cast<size_t>(B - 1));
    for (size_t t = 0; t < b.q_rows.size(); ++t) {
      EXPECT_EQ(b.q_rows[t], b.local[t]);
      EXPECT_DOUBLE_EQ(b.q[t], static_cast<double>(b.local[t] % 11) / 10.0);
    }
    for (int64_t id : b.pair_ids) EXPECT_TRUE(seen.insert(id).second) << "pair " << id << " twice";
    EXPECT_EQ(space.remaining(), M - (k + 1) * B);
  }
  // 48 used, the M mod B = 2 leftovers are exactly the unselected ones.
  for (int64_t k : space.unselected()) EXPECT_TRUE(seen.insert(ids[k]).second);
  EXPECT_EQ(static_cast<int64_t>(seen.size()), M);
  EXPECT_THROW(space.next_batch(B, 1.0, 0), fnvlp::Error);
  // The unselected set survives its hex mask.
  SearchSpace copy(ids, space.similarity());
  copy.set_unselected_mask(space.unselected_mask());
  EXPECT_EQ(copy.unselected(), space.unselected());
  EXPECT_THROW(copy.set_unselected_mask("zz"), fnvlp::Error);
}

// --- grouped sampler -------------------------------------------------------------------------

struct Drained {
  std::vector<std::vector<int64_t>> batches;
};

Drained drain(fnvlp::data::Sampler& s) {
  Drained r;
  std::vector<int64_t> b;
  while (s.next(b)) r.batches.push_back(b);
  return r;
}

GroupedConfig grit(int64_t M, double q = 1.0) {
  GroupedConfig c;
  c.search_space = M;
  c.q = q;
  c.epochs = 4;
  return c;
}

void set_block_embeddings(GroupedSampler& s, int64_t epoch, uint64_t seed) {
  const int64_t n = s.block().size();
  s.set_embeddings(epoch, unit_rows(n, 16, seed + 2 * epoch),
                   unit_rows(n, 16, seed + 2 * epoch + 1));
}

TEST(GroupedSampler, EpochZeroIsUniform) {
  const BlockPartition p(107, 3);
  GroupedSampler g(p, 4, 11, 1, grit(12));
  fnvlp::data::UniformSampler u(p, 4, 11, 1);
  g.start_epoch(0);
  u.start_epoch(0);
  EXPECT_FALSE(g.grouped());
  EXPECT_EQ(g.batches_per_epoch(), u.batches_per_epoch());
  EXPECT_EQ(drain(g).batches, drain(u).batches);
  // Epoch 1 without embeddings stays uniform too.
  g.start_epoch(1);
  u.start_epoch(1);
  EXPECT_FALSE(g.grouped());
  EXPECT_EQ(drain(g).batches, drain(u).batches);
  EXPECT_EQ(g.last_batch_q().n, 0);
}

TEST(GroupedSampler, SameSeedSameBatchesEveryPairAtMostOnceEqualCountsAcrossUnevenBlocks) {
  // Blocks of 36, 36 and 35 pairs; |M| = 12, B = 4: G(36) = 9 but G(35) = 2·3 + 11/4 = 8.
  const BlockPartition p(107, 3);
  const int64_t B = 4;
  for (int rank = 0; rank < 3; ++rank) {
    GroupedSampler a(p, B, 5, rank, grit(12)), b(p, B, 5, rank, grit(12)),
        c(p, B, 6, rank, grit(12));
    for (auto* s : {&a, &b, &c}) set_block_embeddings(*s, 1, 40);
    for (auto* s : {&a, &b, &c}) s->start_epoch(1);
    EXPECT_TRUE(a.grouped());
    EXPECT_EQ(a.batches_per_epoch(), 8) << "rank " << rank;
    EXPECT_EQ(a.grouped_batches_per_epoch(), 8);
    const Drained ra = drain(a), rb = drain(b), rc = drain(c);
    EXPECT_EQ(static_cast<int64_t>(ra.batches.size()), 8) << "rank " << rank;
    EXPECT_EQ(ra.batches, rb.batches);
    EXPECT_NE(ra.batches, rc.batches);  // another seed, other search spaces and anchors
    std::set<int64_t> seen;
    for (const auto& batch : ra.batches) {
      EXPECT_EQ(static_cast<int64_t>(batch.size()), B);
      for (int64_t id : batch) {
        EXPECT_TRUE(p.block(rank).contains(id)) << id;
        EXPECT_TRUE(seen.insert(id).second) << "pair " << id << " twice in the epoch";
      }
    }
    // The next epoch reshuffles the search spaces.
    set_block_embeddings(a, 2, 40);
    a.start_epoch(2);
    EXPECT_NE(drain(a).batches, ra.batches);
  }
  EXPECT_EQ(grouped_batches(36, 12, 4), 9);
  EXPECT_EQ(grouped_batches(35, 12, 4), 8);
  EXPECT_EQ(grouped_batches(10, 100, 4), 2);  // |M| beyond the block: one search space
  EXPECT_THROW(GroupedSampler(p, 16, 5, 0, grit(12)), fnvlp::Error);  // |M| < B
}

TEST(GroupedSampler, StateLoadStateMidEpochGivesTheIdenticalRemainingBatches) {
  const BlockPartition p(107, 3);
  for (int64_t cut : {0, 1, 2, 3, 5, 7, 8}) {  // start, inside and at the end of spaces (3 each)
    GroupedSampler a(p, 4, 21, 2, grit(12, 0.5));
    set_block_embeddings(a, 1, 70);
    a.start_epoch(1);
    std::vector<int64_t> b;
    for (int64_t k = 0; k < cut; ++k) ASSERT_TRUE(a.next(b));
    const std::string saved = a.state().dump();
    const Drained rest = drain(a);
    EXPECT_EQ(static_cast<int64_t>(rest.batches.size()), 8 - cut);

    GroupedSampler fresh(p, 4, 21, 2, grit(12, 0.5));
    set_block_embeddings(fresh, 1, 70);
    fresh.load_state(json::parse(saved));
    EXPECT_TRUE(fresh.grouped());
    EXPECT_EQ(drain(fresh).batches, rest.batches) << "cut after " << cut;
  }
  // Resuming needs the very embeddings the epoch was composed from.
  GroupedSampler a(p, 4, 21, 2, grit(12));
  set_block_embeddings(a, 1, 70);
  a.start_epoch(1);
  std::vector<int64_t> b;
  a.next(b);
  const json st = a.state();
  GroupedSampler none(p, 4, 21, 2, grit(12));
  EXPECT_THROW(none.load_state(st), fnvlp::Error);
  GroupedSampler other(p, 4, 21, 2, grit(12));
  set_block_embeddings(other, 1, 71);
  EXPECT_THROW(other.load_state(st), fnvlp::Error);
  GroupedSampler rank1(p, 4, 21, 1, grit(12));
  set_block_embeddings(rank1, 1, 70);
  EXPECT_THROW(rank1.load_state(st), fnvlp::Error);
  // A uniform epoch's state round-trips through the delegate.
  GroupedSampler u(p, 4, 21, 2, grit(12));
  u.start_epoch(0);
  u.next(b);
  const json ust = u.state();
  const Drained urest = drain(u);
  GroupedSampler u2(p, 4, 21, 2, grit(12));
  u2.load_state(ust);
  EXPECT_EQ(drain(u2).batches, urest.batches);
}

// A grouped epoch stopped after `cut` batches on 3 ranks continues on 2 (batch 4 -> 5): the pairs
// the old ranks had not drawn, each in its new owner's block, none twice, the same count of batches
// on both ranks; the re-split state resumes exactly; a second re-split is refused.
TEST(GroupedSampler, ResplitContinuesAGroupedEpochOnOtherRanks) {
  const int64_t n = 107, M = 12;
  const torch::Tensor img = unit_rows(n, 16, 90), txt = unit_rows(n, 16, 91);
  auto embed = [&](GroupedSampler& s) {
    const auto b = s.block();
    s.set_embeddings(1, img.slice(0, b.begin, b.end), txt.slice(0, b.begin, b.end));
  };
  for (int64_t cut : {0, 2, 4, 8}) {
    const BlockPartition p3(n, 3), p2(n, 2);
    std::vector<json> old;
    std::set<int64_t> drawn;
    for (int r = 0; r < 3; ++r) {
      GroupedSampler s(p3, 4, 21, r, grit(M, 0.5));
      embed(s);
      s.start_epoch(1);
      std::vector<int64_t> b;
      for (int64_t k = 0; k < cut; ++k) {
        ASSERT_TRUE(s.next(b));
        drawn.insert(b.begin(), b.end());
      }
      old.push_back(s.state());
    }
    std::set<int64_t> after;
    int64_t steps = -1;
    for (int r = 0; r < 2; ++r) {
      GroupedSampler s(p2, 5, 21, r, grit(M, 0.5));
      embed(s);
      s.resplit(old);
      EXPECT_TRUE(s.grouped());
      if (steps < 0) steps = s.grouped_batches_per_epoch();
      EXPECT_EQ(s.grouped_batches_per_epoch(), steps) << "ranks out of step";
      std::vector<int64_t> first;
      ASSERT_TRUE(s.next(first));
      const json st = s.state();
      const Drained rest = drain(s);
      EXPECT_EQ(static_cast<int64_t>(rest.batches.size()) + 1, steps);
      std::vector<std::vector<int64_t>> all = {first};
      all.insert(all.end(), rest.batches.begin(), rest.batches.end());
      for (const auto& batch : all)
        for (int64_t id : batch) {
          EXPECT_TRUE(p2.block(r).contains(id)) << id;
          EXPECT_EQ(drawn.count(id), 0u) << "pair " << id << " drawn again after the re-split";
          EXPECT_TRUE(after.insert(id).second) << "pair " << id << " twice";
        }
      // The re-split state resumes exactly on the new ranks.
      GroupedSampler fresh(p2, 5, 21, r, grit(M, 0.5));
      embed(fresh);
      fresh.load_state(st);
      EXPECT_EQ(drain(fresh).batches, rest.batches) << "cut " << cut << " rank " << r;
      // ... but is not re-split again, and a re-split needs the epoch's embeddings.
      GroupedSampler again(p3, 4, 21, 0, grit(M, 0.5));
      embed(again);
      EXPECT_THROW(again.resplit({st, st}), fnvlp::Error);
      GroupedSampler bare(p2, 5, 21, r, grit(M, 0.5));
      EXPECT_THROW(bare.resplit(old), fnvlp::Error);
    }
    // Left undrawn: Alg. 2's M mod B per search space, the tail of each rank's last space and the
    // difference between the ranks' shares; a regression bound for this setting.
    EXPECT_GE(steps, 1);
    EXPECT_EQ(static_cast<int64_t>(after.size()), steps * 5 * 2);
    EXPECT_LE(n - static_cast<int64_t>(drawn.size()) - steps * 10, 2 * (M + 5)) << "cut " << cut;
  }
}

TEST(GroupedSampler, QSchedulesAndTelemetry) {
  GroupedConfig h = grit(12);
  h.schedule = fnvlp::config::enum_from_name<QSchedule>("hardening", "sampler.grit.schedule");
  h.q_start = 0.0;
  h.q_end = 1.0;
  h.epochs = 5;  // grouped epochs 1..4
  EXPECT_DOUBLE_EQ(h.q_at(1), 0.0);
  EXPECT_DOUBLE_EQ(h.q_at(2), 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(h.q_at(4), 1.0);
  GroupedConfig s = h;
  s.schedule = QSchedule::kSoftening;
  EXPECT_THROW(s.validate(4), fnvlp::Error);  // softening needs q_start >= q_end
  s.q_start = 1.0;
  s.q_end = 0.0;
  s.validate(4);
  EXPECT_DOUBLE_EQ(s.q_at(1), 1.0);
  EXPECT_DOUBLE_EQ(s.q_at(3), 1.0 / 3.0);
  EXPECT_THROW(fnvlp::config::enum_from_name<QSchedule>("cosine", "sampler.grit.schedule"),
               fnvlp::Error);
  GroupedConfig bad = grit(12, 1.2);
  EXPECT_THROW(bad.validate(4), fnvlp::Error);

  // The scheduled q drives every pick; the last batch's q reaches the consumer through state().
  const BlockPartition p(60, 1);
  GroupedSampler g(p, 5, 3, 0, h);
  set_block_embeddings(g, 2, 90);
  g.start_epoch(2);
  std::vector<int64_t> b;
  ASSERT_TRUE(g.next(b));
  EXPECT_DOUBLE_EQ(g.epoch_q(), 1.0 / 3.0);
  EXPECT_EQ(g.last_batch().q, std::vector<double>(4, 1.0 / 3.0));
  const ValueStats st = GroupedSampler::q_stats_from_state(g.state());
  EXPECT_EQ(st.n, 4);
  EXPECT_DOUBLE_EQ(st.mean, 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(st.p95, 1.0 / 3.0);
}

TEST(GroupedSampler, RunsOnThePrefetcherThreadAndResumesFromItsConsumedState) {
  const std::string dir = ::testing::TempDir() + "/fnvlp_grouped_prefetch";
  fnvlp::testutil::write_test_dataset(dir, 30);  // 60 pairs
  fnvlp::data::PairDataset ds(dir);
  const BlockPartition p(ds.num_pairs(), 1);
  GroupedSampler direct(p, 4, 8, 0, grit(12, 0.5)), threaded(p, 4, 8, 0, grit(12, 0.5));
  set_block_embeddings(direct, 1, 3);
  set_block_embeddings(threaded, 1, 3);
  direct.start_epoch(1);
  fnvlp::data::Prefetcher pf(ds, threaded, 3);
  pf.start_epoch(1);
  fnvlp::data::Batch b;
  std::vector<int64_t> ids;
  json mid;
  Drained rest;
  int64_t n = 0;
  while (pf.next(b)) {
    ASSERT_TRUE(direct.next(ids));
    const std::vector<int64_t> got(b.pair_id.data_ptr<int64_t>(),
                                   b.pair_id.data_ptr<int64_t>() + b.size());
    EXPECT_EQ(got, ids);
    // The consumed state (not the read-ahead one) carries this batch's q.
    EXPECT_EQ(pf.state(), direct.state());
    EXPECT_DOUBLE_EQ(GroupedSampler::q_stats_from_state(pf.state()).mean, 0.5);
    if (++n == 4) mid = pf.state();
    if (n > 4) rest.batches.push_back(got);
  }
  EXPECT_EQ(n, direct.batches_per_epoch());
  GroupedSampler fresh(p, 4, 8, 0, grit(12, 0.5));
  set_block_embeddings(fresh, 1, 3);
  fnvlp::data::Prefetcher pf2(ds, fresh, 2);
  pf2.resume(mid);
  Drained again;
  while (pf2.next(b))
    again.batches.push_back(std::vector<int64_t>(b.pair_id.data_ptr<int64_t>(),
                                                 b.pair_id.data_ptr<int64_t>() + b.size()));
  EXPECT_EQ(again.batches, rest.batches);
  EXPECT_FALSE(rest.batches.empty());
}

// --- in-batch false negatives ------------------------------------------------------------------

TEST(NegativesFnRate, CountsSharedImagesAndKnownLabels) {
  // Ordered negative pairs: 4·3 = 12; (0, 1) and (1, 0) share image 1. Labels known for 3 members
  // (6 ordered pairs), all label 5.
  const BatchFnRate r = batch_false_negative_rate({1, 1, 2, 3}, {5, 5, 5, -1});
  EXPECT_EQ(r.negatives, 12);
  EXPECT_DOUBLE_EQ(r.image, 2.0 / 12.0);
  EXPECT_EQ(r.labelled, 6);
  EXPECT_DOUBLE_EQ(r.label, 1.0);
  const BatchFnRate s = batch_false_negative_rate({1, 2, 3, 4, 5}, {0, 1, 0, 2, 0});
  EXPECT_DOUBLE_EQ(s.image, 0.0);
  EXPECT_DOUBLE_EQ(s.label, 6.0 / 20.0);  // three members of label 0: 3·2 ordered pairs
  EXPECT_TRUE(std::isnan(batch_false_negative_rate({1, 2}, {-1, -1}).label));
  EXPECT_TRUE(std::isnan(batch_false_negative_rate({1}, {3}).image));
}

TEST(NegativesFnRate, HardGroupingRaisesTheInBatchFalseNegativeRate) {
  // Eight semantic classes, 20 pairs each, embeddings clustered by class: grouping with q = 1
  // packs a batch with one class (FALCON Fig. 2: q = 1 has the highest false-negative rate). (q = 0
  // need not spread a batch: the farthest point of the farthest point can be the first cluster.)
  const int64_t n = 160, classes = 8, B = 8;
  auto centres = unit_rows(classes, 32, 5);
  std::vector<int64_t> cls(n);
  for (int64_t k = 0; k < n; ++k) cls[k] = k % classes;
  auto idx = torch::tensor(cls, torch::kLong);
  auto noisy = centres.index_select(0, idx) + 0.1 * torch::randn({n, 32}, make_gen(6));
  auto emb = noisy / noisy.norm(2, 1, true);
  auto rate = [&](double q, bool grouped) {
    const BlockPartition p(n, 1);
    GroupedSampler g(p, B, 9, 0, grit(n, q));
    if (grouped) g.set_embeddings(1, emb, emb);
    g.start_epoch(1);
    double sum = 0;
    int64_t count = 0;
    std::vector<int64_t> b;
    while (g.next(b)) {
      std::vector<int64_t> ids(b.begin(), b.end()), labels;
      for (int64_t id : b) labels.push_back(cls[id]);
      sum += batch_false_negative_rate(ids, labels).label;
      ++count;
    }
    return sum / static_cast<double>(count);
  };
  const double hard = rate(1.0, true), mid = rate(0.5, true), uniform = rate(1.0, false);
  const std::string rates = "q=1 " + std::to_string(hard) + ", q=0.5 " + std::to_string(mid) +
                            ", uniform " + std::to_string(uniform);
  RecordProperty("fn_label_rates", rates);
  EXPECT_GT(hard, 0.5) << rates;
  EXPECT_GT(hard, mid) << rates;
  EXPECT_GT(hard, 2 * uniform) << rates;
  EXPECT_LT(uniform, 0.3) << rates;  // ~19/159 expected
}

}  // namespace
