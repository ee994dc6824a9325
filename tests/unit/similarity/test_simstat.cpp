// Exactness of the similarity kernels against a brute-force full sort (random and adversarial
// inputs: ties, duplicates, k = 1, k = n_neg, anchors with few or no negatives), and identical
// results for every tile size and row block, on the fast path (BLAS GEMM, AVX2 chunk test) and on
// the generic path a device build takes (Params::generic_path forces it on the host; a build
// against a Kokkos on CUDA runs it on the GPU and compares with the host: Params::host).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iterator>
#include <limits>
#include <random>
#include <tuple>
#include <type_traits>

#include <dlfcn.h>
#include <unistd.h>

#include "fnvlp/data/embeddings.hpp"
#include "fnvlp/similarity/classify.hpp"
#include "fnvlp/similarity/device_kernels.hpp"
#include "fnvlp/similarity/spaces.hpp"
#include "simstat_reference.hpp"

namespace fnvlp {
namespace {

[[maybe_unused]] auto* const kokkos_env = ::testing::AddGlobalTestEnvironment(new test::KokkosEnv);

class Simstat : public test::NeedsKokkosDevice {};

struct Case {
  data::Embeddings e;
  std::vector<int64_t> batch;
};

similarity::RowStats run(const Case& c, const similarity::Params& p, bool with_lambda,
                         int64_t row0 = 0, int64_t rows = -1) {
  const int64_t n = c.e.size(), d = c.e.dim;
  if (rows < 0) rows = n;
  const similarity::CandidateReader reader = [&](int64_t c0, int64_t cn, float* out) {
    std::memcpy(out, c.e.text_emb.data() + c0 * d, sizeof(float) * cn * d);
  };
  return similarity::anchor_stats(c.e.image_emb.data() + row0 * d, row0, rows, d, reader, n,
                                  c.e.image_id, c.e.label, c.batch,
                                  with_lambda ? c.e.glofnd_lambda_image.data() + row0 : nullptr, p);
}

// The reference is over the similarities the path computes: the BLAS GEMM's on the fast path,
// dot_in_double's on the generic path.
void expect_matches_reference(const Case& c, const similarity::Params& p) {
  const int64_t n = c.e.size();
  const auto got = run(c, p, true);
  const auto ref =
      similarity::takes_generic_path(p)
          ? test::brute_force_of(
                test::generic_similarities(c.e.image_emb, c.e.text_emb, n, c.e.dim).data(), n,
                c.e.image_id, c.e.label, c.e.glofnd_lambda_image, c.batch, p.alpha)
          : test::brute_force(c.e.image_emb, c.e.text_emb, n, c.e.dim, c.e.image_id, c.e.label,
                              c.e.glofnd_lambda_image, c.batch, p.alpha);
  const float bound = 2.0f / static_cast<float>(p.bins);
  int64_t k_one = 0, k_all = 0;
  for (int64_t i = 0; i < n; ++i) {
    const auto u = static_cast<size_t>(i);
    SCOPED_TRACE("row " + std::to_string(i));
    ASSERT_EQ(got.n_neg[u], ref.n_neg[u]);
    EXPECT_EQ(got.n_label[u], ref.n_label[u]);
    EXPECT_TRUE(test::same_float(got.threshold[u], ref.threshold[u]))
        << got.threshold[u] << " vs " << ref.threshold[u];
    EXPECT_EQ(got.count[u], ref.count[u]);
    EXPECT_EQ(got.count_label[u], ref.count_label[u]);
    EXPECT_EQ(got.count_lambda[u], ref.count_lambda[u]);
    EXPECT_EQ(got.count_lambda_label[u], ref.count_lambda_label[u]);
    EXPECT_TRUE(test::same_float(got.fnc_threshold[u], ref.fnc_threshold[u]));
    EXPECT_EQ(got.count_fnc[u], ref.count_fnc[u]);
    EXPECT_EQ(got.count_fnc_label[u], ref.count_fnc_label[u]);
    EXPECT_EQ(got.n_batch_label[u], ref.n_batch_label[u]);
    const auto& sorted = ref.sorted_neg[u];
    const int64_t nn = static_cast<int64_t>(sorted.size());
    const int64_t k = similarity::target_rank(p.alpha, nn);
    k_one += k == 1;
    k_all += nn > 0 && k == nn;
    for (int64_t j = 0; j < p.quantiles; ++j) {
      const float q = got.quantiles[u * p.quantiles + j];
      if (nn == 0) {
        EXPECT_TRUE(std::isnan(q));
        continue;
      }
      const float exact =
          sorted[static_cast<size_t>(similarity::quantile_rank(j, p.quantiles, nn) - 1)];
      if (j == 0 || j == p.quantiles - 1)
        EXPECT_TRUE(test::same_float(q, exact)) << "extreme quantile " << j;
      else
        EXPECT_LE(std::fabs(q - exact), bound) << "quantile " << j;
    }
  }
  // The cases must really cover the edges they claim to.
  if (p.alpha <= 1e-6) EXPECT_GT(k_one, 0);
  if (p.alpha >= 1.0) EXPECT_GT(k_all, 0);
}

Case make_case(int64_t n, int64_t d, uint64_t seed, bool adversarial, int64_t batch) {
  Case c;
  c.e = test::make_embeddings(n, d, seed, adversarial);
  c.batch = similarity::fnc_batches(n, batch, seed + 1);
  return c;
}

similarity::Params params(double alpha, int64_t tile, int64_t row_block) {
  similarity::Params p;
  p.alpha = alpha;
  p.quantiles = 9;
  p.bins = 128;
  p.tile = tile;
  p.row_block = row_block;
  p.fnc_batch = 24;
  return p;
}

similarity::Params with_start(similarity::Params p, int64_t sample) {
  p.start_sample = sample;
  return p;
}

similarity::Params generic(similarity::Params p) {
  p.generic_path = true;
  return p;
}

// The device path: on the GPU in a device build, on the host (with the host's stand-ins for the
// GEMMs) elsewhere.
similarity::Params device(similarity::Params p) {
  p.device_path = true;
  return p;
}

// On the host execution space even where the default one is a device: the fast path, unless
// generic.
similarity::Params on_host(similarity::Params p) {
  p.host = true;
  return p;
}

// Every output of two runs has the same bits (NaN thresholds included).
void expect_same_stats(const similarity::RowStats& a, const similarity::RowStats& b) {
  ASSERT_EQ(a.rows, b.rows);
  const auto bytes = [](const std::vector<float>& v) { return v.size() * sizeof(float); };
  ASSERT_EQ(a.quantiles.size(), b.quantiles.size());
  EXPECT_EQ(std::memcmp(a.threshold.data(), b.threshold.data(), bytes(a.threshold)), 0);
  EXPECT_EQ(std::memcmp(a.quantiles.data(), b.quantiles.data(), bytes(a.quantiles)), 0);
  EXPECT_EQ(std::memcmp(a.fnc_threshold.data(), b.fnc_threshold.data(), bytes(a.fnc_threshold)), 0);
  EXPECT_EQ(a.n_neg, b.n_neg);
  EXPECT_EQ(a.n_label, b.n_label);
  EXPECT_EQ(a.count, b.count);
  EXPECT_EQ(a.count_label, b.count_label);
  EXPECT_EQ(a.count_lambda, b.count_lambda);
  EXPECT_EQ(a.count_lambda_label, b.count_lambda_label);
  EXPECT_EQ(a.count_fnc, b.count_fnc);
  EXPECT_EQ(a.count_fnc_label, b.count_fnc_label);
  EXPECT_EQ(a.n_batch_label, b.n_batch_label);
  EXPECT_EQ(a.start_sample, b.start_sample);
  EXPECT_EQ(a.restarted_rows, b.restarted_rows);
  EXPECT_EQ(a.scalar_values, b.scalar_values);
}

TEST_F(Simstat, RandomMatchesBruteForce) {
  const auto c = make_case(400, 32, 1, false, 24);
  for (const int64_t sample : {0, 100})
    for (double alpha : {0.01, 0.05, 0.3})
      expect_matches_reference(c, with_start(params(alpha, 64, 37), sample));
}

TEST_F(Simstat, AdversarialTiesDuplicatesFewNegatives) {
  const auto c = make_case(300, 8, 2, true, 24);
  for (const int64_t sample : {0, 60})
    for (double alpha : {1e-9, 0.01, 0.2, 0.5, 1.0})
      expect_matches_reference(c, with_start(params(alpha, 19, 50), sample));
}

// A start above the k-th largest (at a margin of -1e9 sigmas, rank 1: the sample's maximum) must be
// caught and the block streamed again, with the same exact results. At the default margin the
// rank here (26) exceeds the 19 values above the k-th largest (k = 20): no restart is possible.
// The host paths' starting thresholds (the device path has none: on_host).
TEST_F(Simstat, StartAboveTheKthLargestIsStreamedAgain) {
  const auto c = make_case(400, 32, 7, false, 24);
  auto p = on_host(with_start(params(0.05, 64, 37), 100));
  p.start_sigmas = -1e9;
  expect_matches_reference(c, p);
  EXPECT_GT(run(c, p, true).restarted_rows, 300);
  p.start_sigmas = 7.0;
  const auto calm = run(c, p, true);
  EXPECT_EQ(calm.restarted_rows, 0);
  EXPECT_EQ(calm.start_sample, 100);
}

// reset_rows clears only the bins a row's values can occupy. A row that started above all of its
// values (possible through the kernel interface) saw only its first value as a new minimum, so its
// vmax is that value, not the maximum: the bins up to its tau must be cleared as well, or the
// restarted stream counts every value twice. Ascending values make vmax the smallest one.
TEST_F(Simstat, ResetAfterAStartAboveEveryValueLeavesNoStaleCounts) {
  using Space = similarity::HostSpace;  // the test reads the views from the host
  const int64_t cols = 128, m = 9;
  const int32_t bins = 64;
  std::vector<float> values(static_cast<size_t>(cols));
  std::vector<int64_t> col_id(static_cast<size_t>(cols));
  std::vector<int32_t> col_label(static_cast<size_t>(cols), -1);
  for (int64_t j = 0; j < cols; ++j) {
    values[static_cast<size_t>(j)] = -0.5f + 1.2f * static_cast<float>(j) / (cols - 1);
    col_id[static_cast<size_t>(j)] = j;
  }
  const std::vector<int64_t> none(1, 0);
  const similarity::HostUnmanaged1<const int64_t> ids(col_id.data(), cols), empty(none.data(), 0);
  const similarity::HostUnmanaged1<const int32_t> labels(col_label.data(), cols);
  struct Out {
    bool restart;
    float threshold;
    std::vector<float> quantiles;
  };
  const auto stream = [&](const similarity::RowState<Space>& st, float tau0) {
    st.tau0(0) = tau0;
    similarity::reset_rows(Space(), st, 1);
    std::vector<float> tile = values;  // the kernel may overwrite positives in its tile
    const similarity::HostUnmanaged3<float> sims(tile.data(), 1, 1, static_cast<size_t>(cols));
    similarity::accumulate_tile(Space(), sims, cols, 0, ids, labels, empty, empty, st, 0, 1);
    const similarity::RowResult<Space> res(1, m);
    similarity::finalize_rows(Space(), st, res, 1);
    Out o{res.restart(0) != 0, res.threshold(0), {}};
    for (int64_t j = 0; j < m; ++j) o.quantiles.push_back(res.quantiles(0, j));
    return o;
  };
  const auto make_state = [&] {
    similarity::RowState<Space> st(1, bins, 16, 1);
    st.image_id(0) = -1;
    st.label(0) = -1;
    st.k(0) = 5;
    st.lambda(0) = std::numeric_limits<float>::quiet_NaN();
    return st;
  };
  const auto reused = make_state();
  EXPECT_TRUE(stream(reused, 2.0f).restart);
  const Out again = stream(reused, -std::numeric_limits<float>::infinity());
  const Out fresh = stream(make_state(), -std::numeric_limits<float>::infinity());
  ASSERT_FALSE(again.restart);
  EXPECT_EQ(again.threshold, values[static_cast<size_t>(cols - 5)]);
  EXPECT_EQ(again.threshold, fresh.threshold);
  EXPECT_EQ(std::memcmp(again.quantiles.data(), fresh.quantiles.data(), 4 * m), 0);
  EXPECT_EQ(again.quantiles[4], fresh.quantiles[4]) << "median";
}

// The point of the starting thresholds: at N = 32,768 (the default sample: N / 64 = 512
// candidates) far fewer values take the scalar path (5.6% -> ~3% of all at alpha = 1%), and every
// result keeps its bits. The host paths' (on_host).
TEST_F(Simstat, StartingThresholdsCutTheScalarPathNotTheResults) {
  const int64_t n = 32768, rows = 256;
  const auto c = make_case(n, 32, 8, false, 64);
  auto p = on_host(params(0.01, 4096, 4096));
  // Without lambda: these test lambdas are arbitrary, and every value >= lambda is scalar anyway.
  const auto off = run(c, with_start(p, 0), false, 0, rows);
  const auto on = run(c, with_start(p, -1), false, 0, rows);
  EXPECT_EQ(off.start_sample, 0);
  EXPECT_EQ(on.start_sample, n / 64);
  EXPECT_EQ(on.restarted_rows, 0);
  EXPECT_EQ(std::memcmp(on.threshold.data(), off.threshold.data(), 4 * rows), 0);
  EXPECT_EQ(std::memcmp(on.quantiles.data(), off.quantiles.data(), 4 * rows * 9), 0);
  EXPECT_EQ(std::memcmp(on.fnc_threshold.data(), off.fnc_threshold.data(), 4 * rows), 0);
  EXPECT_EQ(on.count, off.count);
  EXPECT_EQ(on.count_label, off.count_label);
  EXPECT_EQ(on.count_lambda, off.count_lambda);
  EXPECT_EQ(on.count_fnc, off.count_fnc);
  EXPECT_GT(off.scalar_values, rows * n / 25) << "from -inf: about 5.6% of the values";
  EXPECT_LT(on.scalar_values, off.scalar_values * 7 / 10)
      << on.scalar_values << " vs " << off.scalar_values;
}

// The host's SIMD chunk test gives the bins and the mask of the portable loop, for the edge values
// that matter: NaN (bin 0, never hot), infinities, the ends of [-1, 1], bin edges, values equal to
// the thresholds and just beside them.
TEST_F(Simstat, ClassifyChunkHostMatchesPortable) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (__builtin_cpu_supports("avx2")) EXPECT_STREQ(similarity::classify_chunk64_impl(), "avx2");
#endif
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.2f, 1.2f);
  const float inf = std::numeric_limits<float>::infinity();
  for (const int32_t bins : {2, 128, 4096})
    for (const float thr : {-inf, -0.2f, 0.5f, inf})
      for (const float lo : {inf, -0.5f, -1.0f}) {
        std::vector<float> x(similarity::kChunk);
        for (auto& v : x) v = u(rng);
        const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                                  inf,
                                  -inf,
                                  -1.0f,
                                  1.0f,
                                  0.0f,
                                  -1.0f + 2.0f * 3.0f / static_cast<float>(bins),
                                  thr,
                                  std::nextafter(thr, 0.0f),
                                  lo,
                                  std::nextafter(lo, 0.0f),
                                  std::numeric_limits<float>::denorm_min()};
        for (size_t i = 0; i < std::size(specials); ++i) x[5 * i + 1] = specials[i];
        std::vector<int32_t> b_host(similarity::kChunk), b_ref(similarity::kChunk);
        const uint64_t m_host =
            similarity::classify_chunk64_host(x.data(), thr, lo, bins, b_host.data());
        const uint64_t m_ref =
            similarity::classify_chunk(x.data(), similarity::kChunk, thr, lo, bins, b_ref.data());
        EXPECT_EQ(m_host, m_ref) << "bins " << bins << " thr " << thr << " lo " << lo;
        EXPECT_EQ(b_host, b_ref) << "bins " << bins << " thr " << thr << " lo " << lo;
        EXPECT_EQ(b_ref[1], 0) << "NaN goes to bin 0";
        EXPECT_EQ(m_ref >> 1 & 1, 0u) << "NaN is never hot";
      }
}

// One row streamed through accumulate_tile against a plain count, at the reservoir's hard cases:
// values exactly at the starting threshold (ties), lambda at, above and below tau, labels, a
// reservoir of 2k to 2k + 3 that fills mid-chunk, NaN positives, partial chunks, and starts above
// the k-th largest (a restart must be flagged). Values come from a small set, so ties are
// everywhere; the brute-force tests above go through the whole driver, this one through the
// kernels alone, with starts the driver's sample would not choose. Each row is folded twice: with
// the host's chunk test (AVX2 where the CPU has it) and with the portable one a device runs
// (accumulate_tile<true>); both must match the plain count, with the same bits.
TEST_F(Simstat, FoldMatchesPlainCountsWithTiesLambdaAndSmallReservoirs) {
  using Space = similarity::HostSpace;  // the test reads the views from the host
  std::mt19937 rng(11);
  const float levels[] = {-0.5f, -0.25f, 0.0f, 0.125f, 0.25f, 0.375f, 0.5f, 0.75f};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int32_t bins = 64;
  int64_t checked = 0, restarts = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int64_t cols = 1 + static_cast<int64_t>(rng() % 300);
    const int64_t width = (cols + similarity::kChunk - 1) / similarity::kChunk * similarity::kChunk;
    std::vector<float> row(static_cast<size_t>(width), 0.0f);
    std::vector<int64_t> col_id(static_cast<size_t>(cols)), pos;
    std::vector<int32_t> col_label(static_cast<size_t>(cols));
    const int64_t self = 1000;
    for (int64_t j = 0; j < cols; ++j) {
      const bool positive = rng() % 23 == 0;
      row[static_cast<size_t>(j)] = rng() % 4 == 0
                                        ? levels[rng() % 8] + 0.01f * static_cast<float>(rng() % 5)
                                        : levels[rng() % 8];
      col_id[static_cast<size_t>(j)] = positive ? self : j;
      if (positive) pos.push_back(j);
      col_label[static_cast<size_t>(j)] = static_cast<int32_t>(rng() % 3);
    }
    std::vector<float> neg;
    for (int64_t j = 0; j < cols; ++j)
      if (col_id[static_cast<size_t>(j)] != self) neg.push_back(row[static_cast<size_t>(j)]);
    if (neg.empty()) continue;
    const auto nn = static_cast<int64_t>(neg.size());
    const int64_t k = 1 + static_cast<int64_t>(rng() % static_cast<uint32_t>(nn));
    const int32_t lab = rng() % 3 == 0 ? -1 : 1;
    const float lam = rng() % 3 == 0 ? nan : levels[rng() % 8];
    const float tau0 = rng() % 4 == 0 ? -std::numeric_limits<float>::infinity() : levels[rng() % 8];
    const int64_t capacity = 2 * k + static_cast<int64_t>(rng() % 4);
    const std::vector<int64_t> none(1, 0);
    const similarity::HostUnmanaged1<const int64_t> ids(col_id.data(), cols),
        pos_cols(pos.empty() ? none.data() : pos.data(), pos.size()), empty(none.data(), 0);
    const similarity::HostUnmanaged1<const int32_t> labels(col_label.data(), cols);
    const auto fold = [&](auto generic) {
      similarity::RowState<Space> st(1, bins, capacity, 1);
      st.image_id(0) = self;
      st.label(0) = lab;
      st.k(0) = k;
      st.lambda(0) = lam;
      st.tau0(0) = tau0;
      st.pos_begin(0) = 0;  // the positives: all of `pos`
      st.pos_end(0) = static_cast<int64_t>(pos.size());
      similarity::reset_rows(Space(), st, 1);
      std::vector<float> tile = row;  // the kernel overwrites the positives in its tile
      const similarity::HostUnmanaged3<float> sims(tile.data(), 1, 1, static_cast<size_t>(width));
      similarity::accumulate_tile<decltype(generic)::value>(Space(), sims, cols, 0, ids, labels,
                                                            pos_cols, empty, st, 0, 1);
      const similarity::RowResult<Space> res(1, 5);
      similarity::finalize_rows(Space(), st, res, 1);
      return std::make_pair(st, res);
    };
    const auto [st, res] = fold(std::false_type{});
    const auto [gst, gres] = fold(std::true_type{});
    const auto same_bits = [](float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; };
    const std::string path = "trial " + std::to_string(trial) + ", portable chunk test";
    EXPECT_EQ(gres.restart(0), res.restart(0)) << path;
    EXPECT_TRUE(same_bits(gres.threshold(0), res.threshold(0))) << path;
    EXPECT_EQ(gres.count(0), res.count(0)) << path;
    EXPECT_EQ(gres.count_lab(0), res.count_lab(0)) << path;
    for (int64_t j = 0; j < 5; ++j)
      EXPECT_TRUE(same_bits(gres.quantiles(0, j), res.quantiles(0, j))) << path;
    EXPECT_EQ(gst.lam_n(0), st.lam_n(0)) << path;
    EXPECT_EQ(gst.lam_lab(0), st.lam_lab(0)) << path;
    EXPECT_EQ(gst.scalar_n(0), st.scalar_n(0)) << path;
    EXPECT_TRUE(same_bits(gst.vmin(0), st.vmin(0)) && same_bits(gst.vmax(0), st.vmax(0))) << path;
    // The plain count.
    std::vector<float> sorted = neg;
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    const float kth = sorted[static_cast<size_t>(k - 1)];
    int64_t at_least_tau0 = 0, count = 0, count_lab = 0, lam_n = 0, lam_lab = 0;
    for (int64_t j = 0; j < cols; ++j) {
      const auto u = static_cast<size_t>(j);
      if (col_id[u] == self) continue;
      const float v = row[u];
      const bool same = lab >= 0 && col_label[u] == lab;
      at_least_tau0 += v >= tau0;
      count += v >= kth;
      count_lab += v >= kth && same;
      lam_n += v >= lam;
      lam_lab += v >= lam && same;
    }
    const std::string where = "trial " + std::to_string(trial);
    EXPECT_EQ(st.lam_n(0), lam_n) << where;
    EXPECT_EQ(st.lam_lab(0), lam_lab) << where;
    const bool restart = at_least_tau0 < k;
    ASSERT_EQ(res.restart(0) != 0, restart) << where;
    if (restart) {
      ++restarts;
      continue;
    }
    EXPECT_EQ(st.vmin(0), sorted.back()) << where;
    EXPECT_EQ(st.vmax(0), sorted.front()) << where;
    EXPECT_EQ(res.threshold(0), kth) << where;
    EXPECT_EQ(res.count(0), count) << where;
    EXPECT_EQ(res.count_lab(0), count_lab) << where;
    ++checked;
  }
  EXPECT_GT(checked, 200);
  EXPECT_GT(restarts, 10);
}

TEST_F(Simstat, KEqualsOneAndKEqualsAll) {
  const auto c = make_case(200, 16, 3, false, 24);
  expect_matches_reference(c, params(1e-9, 50, 200));
  expect_matches_reference(c, params(1.0, 50, 200));
}

// The generic path (what a device build runs: similarities from similarity_kernel, the portable
// chunk test, the embeddings copied to the execution space) against the host's fast path: in a
// host build the generic path forced on the host, in a device build the device itself (simstat on
// the device against the host). Where every dot
// product is exact in float32 (adversarial embeddings: entries in {-2..2} / 4 and dim 8, so every
// partial sum is a multiple of 1/16 below 2 in magnitude), its similarities are the BLAS GEMM's
// bits, whatever either's order, so every output must have the fast path's bits too: thresholds,
// quantiles, counts and the cost diagnostics (starts, restarts; the scalar-path count as well, as
// both paths cut the same chunks: aligned to global multiples of kChunk, ending at the tile's end).
TEST_F(Simstat, GenericPathMatchesFastPathBitwiseWhereProductsAreExact) {
  const auto c = make_case(300, 8, 2, true, 24);
  for (const int64_t sample : {0, 60})
    for (const double alpha : {1e-9, 0.02, 0.5, 1.0})
      for (const auto [tile, block] : {std::pair<int64_t, int64_t>{19, 50}, {300, 7}}) {
        SCOPED_TRACE("sample " + std::to_string(sample) + " alpha " + std::to_string(alpha) +
                     " tile " + std::to_string(tile) + " block " + std::to_string(block));
        const auto p = with_start(params(alpha, tile, block), sample);
        expect_same_stats(run(c, generic(p), true), run(c, on_host(p), true));
      }
  // A start above the k-th largest: both paths restart the same rows.
  auto p = with_start(params(0.05, 64, 37), 60);
  p.start_sigmas = -1e9;
  const auto fast = run(c, on_host(p), true);
  EXPECT_GT(fast.restarted_rows, 0);
  expect_same_stats(run(c, generic(p), true), fast);
}

// On random unit vectors the generic similarities (double sums, one rounding) and the BLAS GEMM's
// (float32 sums in its own order) may differ in the last bits, so the paths cannot share bits. The
// generic path must then be exact on its own similarities (the brute force over dot_in_double), and
// its thresholds lie within the largest similarity difference D of the fast path's: the k-th
// largest of a row moves by at most the largest change of its values. D itself is float32
// rounding: at most dim * 2^-24 * sum |a_k c_k| <= 32 * 2^-24 ~ 1.9e-6 for unit vectors at dim 32.
TEST_F(Simstat, GenericPathIsExactOnItsOwnSimilarities) {
  const auto c = make_case(400, 32, 1, false, 24);
  for (const int64_t sample : {0, 100})
    for (const double alpha : {0.01, 0.3})
      expect_matches_reference(c, generic(with_start(params(alpha, 64, 37), sample)));
  const int64_t n = c.e.size();
  const auto g = test::generic_similarities(c.e.image_emb, c.e.text_emb, n, c.e.dim);
  std::vector<float> f(static_cast<size_t>(n * n));
  similarity::similarity_tile(c.e.image_emb.data(), n, c.e.text_emb.data(), n, c.e.dim, f.data());
  double d = 0;
  for (size_t u = 0; u < f.size(); ++u) d = std::max(d, std::fabs(double(g[u]) - double(f[u])));
  EXPECT_LE(d, 32 * std::ldexp(1.0, -24));
  const auto p = params(0.01, 64, 37);
  const auto fast = run(c, on_host(p), true), gen = run(c, generic(p), true);
  for (size_t u = 0; u < static_cast<size_t>(n); ++u)
    EXPECT_LE(std::fabs(double(gen.threshold[u]) - double(fast.threshold[u])), d) << "row " << u;
}

TEST_F(Simstat, AnchorsWithoutNegatives) {
  // Every pair shares one image: no anchor has a negative.
  auto c = make_case(12, 4, 4, false, 5);
  std::fill(c.e.image_id.begin(), c.e.image_id.end(), 7);
  const auto got = run(c, params(0.1, 5, 5), true);
  for (size_t i = 0; i < 12; ++i) {
    EXPECT_EQ(got.n_neg[i], 0);
    EXPECT_TRUE(std::isnan(got.threshold[i]));
    EXPECT_EQ(got.count[i], 0);
    EXPECT_EQ(got.count_fnc[i], 0);
  }
}

// Each path (in a device build on the GPU, the default is the device path) for any tile (of the
// host's stream and of the device path's GEMMs) and row block.
TEST_F(Simstat, SameBitsForAnyTileAndRowBlock) {
  for (const int path : {0, 1, 2})
    for (bool adversarial : {false, true}) {
      SCOPED_TRACE(path == 0 ? "default path" : (path == 1 ? "generic path" : "device path"));
      const auto c = make_case(257, 24, 5, adversarial, 16);
      auto p = params(0.02, 257, 257);
      p.generic_path = path == 1;
      p.device_path = path == 2;
      p.device_tile = 257;
      const auto base = run(c, p, true);
      for (auto [tile, block] :
           {std::pair<int64_t, int64_t>{1, 300}, {7, 300}, {64, 16}, {4096, 3}}) {
        SCOPED_TRACE("tile " + std::to_string(tile) + " block " + std::to_string(block));
        p.tile = tile;
        p.device_tile = tile;
        p.row_block = block;
        const auto got = run(c, p, true);
        EXPECT_EQ(std::memcmp(got.threshold.data(), base.threshold.data(), 4 * 257), 0);
        EXPECT_EQ(std::memcmp(got.quantiles.data(), base.quantiles.data(), 4 * 257 * 9), 0);
        EXPECT_EQ(std::memcmp(got.fnc_threshold.data(), base.fnc_threshold.data(), 4 * 257), 0);
        EXPECT_EQ(got.count, base.count);
        EXPECT_EQ(got.count_lambda, base.count_lambda);
        EXPECT_EQ(got.count_fnc_label, base.count_fnc_label);
      }
      // A sub-range of anchors (a rank's block) gives that range of the full result.
      p.tile = 64;
      p.row_block = 10;
      const auto part = run(c, p, true, 100, 57);
      EXPECT_EQ(std::memcmp(part.threshold.data(), base.threshold.data() + 100, 4 * 57), 0);
      EXPECT_EQ(std::memcmp(part.quantiles.data(), base.quantiles.data() + 900, 4 * 57 * 9), 0);
    }
}

// Every anchor and candidate has a fixed place in the fixed-shape GEMM: its global index modulo the
// block size (simstat.hpp). Sub-ranges at any bases, spanning block and fold-group boundaries,
// give each pair the bits of the whole product, and the callback covers each of its rows and
// columns once. On kernels whose per-element order depends on the place (OpenBLAS's Haswell
// SGEMM: ctest also runs this on it, similarity.haswell_kernels) it fails without the places.
TEST_F(Simstat, SimilarityBlocksFixAPairsPlace) {
  const int64_t rows = 2200, cols = similarity::kFoldCols + 1504, dim = 24;
  std::mt19937 rng(9);
  std::normal_distribution<float> g;
  std::vector<float> a(static_cast<size_t>(rows * dim)), c(static_cast<size_t>(cols * dim));
  for (auto& v : a) v = g(rng);
  for (auto& v : c) v = g(rng);
  std::vector<float> full(static_cast<size_t>(rows * cols));
  similarity::similarity_tile(a.data(), rows, c.data(), cols, dim, full.data());
  struct Range {
    int64_t r0, nr, c0, nc;
  };
  for (const Range q : {Range{0, rows, 0, cols}, Range{5, 1, 7, 1}, Range{1000, 60, 1020, 10},
                        Range{3, 2100, 999, similarity::kFoldCols + 500},
                        Range{1024, 1024, 4096, 1024}, Range{2047, 153, 1, cols - 1}}) {
    SCOPED_TRACE("rows " + std::to_string(q.r0) + "+" + std::to_string(q.nr) + " cols " +
                 std::to_string(q.c0) + "+" + std::to_string(q.nc));
    std::vector<int32_t> seen(static_cast<size_t>(q.nr * q.nc), 0);
    int64_t differ = 0;
    similarity::similarity_blocks(
        a.data() + q.r0 * dim, q.nr, c.data() + q.c0 * dim, q.nc, dim,
        [&](int64_t r0, int64_t nr, int64_t c0, int64_t nc, float* s, int64_t co) {
          ASSERT_GE(co, 0);
          ASSERT_LE(co + nc, similarity::kFoldCols);
          for (int64_t i = 0; i < nr; ++i)
            for (int64_t j = 0; j < nc; ++j) {
              const int64_t gc = co + j;
              const float v =
                  s[gc / similarity::kGemmCols * similarity::kGemmRows * similarity::kGemmCols +
                    i * similarity::kGemmCols + gc % similarity::kGemmCols];
              ++seen[static_cast<size_t>((r0 + i) * q.nc + c0 + j)];
              const float want = full[static_cast<size_t>((q.r0 + r0 + i) * cols + q.c0 + c0 + j)];
              differ += std::memcmp(&v, &want, sizeof v) != 0;
            }
        },
        q.r0, q.c0);
    EXPECT_EQ(differ, 0) << "products with other bits than at their places in the whole";
    EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int32_t n) { return n == 1; }));
  }
  // And the products are the dot products (in double, to float rounding).
  for (const auto [i, j] : {std::pair<int64_t, int64_t>{0, 0}, {1500, 5000}, {2199, cols - 1}}) {
    double d = 0;
    for (int64_t k = 0; k < dim; ++k)
      d +=
          double(a[static_cast<size_t>(i * dim + k)]) * double(c[static_cast<size_t>(j * dim + k)]);
    EXPECT_NEAR(full[static_cast<size_t>(i * cols + j)], d, 1e-4);
  }
}

// OpenBLAS splits a GEMM among its threads so that some products get other bits, which made
// fnvlp-simstat's results depend on OPENBLAS_NUM_THREADS (and so, unset, on the node's cores).
// similarity_blocks multiplies on one OpenBLAS thread whatever the caller set, and gives the
// caller's count back.
TEST_F(Simstat, SimilaritiesDoNotDependOnTheBlasThreads) {
  using Get = int (*)();
  using Set = void (*)(int);
  const auto get = reinterpret_cast<Get>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  const auto set = reinterpret_cast<Set>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (!get || !set) GTEST_SKIP() << "SKIPPED: the BLAS of this process is not OpenBLAS";
  const int64_t rows = 2048, cols = 2048, dim = 256;
  std::mt19937 rng(11);
  std::normal_distribution<float> g;
  std::vector<float> a(static_cast<size_t>(rows * dim)), c(static_cast<size_t>(cols * dim));
  for (auto& v : a) v = g(rng);
  for (auto& v : c) v = g(rng);
  const int before = get();
  std::vector<std::vector<float>> out;
  int threads = 0;
  for (const int t : {1, 2}) {
    set(t);
    threads = get();
    out.emplace_back(static_cast<size_t>(rows * cols));
    similarity::similarity_tile(a.data(), rows, c.data(), cols, dim, out.back().data());
    EXPECT_EQ(get(), threads) << "the caller's OpenBLAS threads come back";
  }
  set(before);
  if (threads < 2) GTEST_SKIP() << "SKIPPED: OpenBLAS runs one thread here (one core)";
  EXPECT_EQ(std::memcmp(out[0].data(), out[1].data(), out[0].size() * sizeof(float)), 0)
      << "similarities with other bits on 2 OpenBLAS threads than on 1";
}

// KokkosEnv asks for Kokkos's own thread count: OMP_NUM_THREADS on a threaded host backend (the
// kokkos label runs these tests on 2 OpenMP threads), one on Serial.
TEST_F(Simstat, KokkosRunsTheThreadsOfOmpNumThreads) {
  const char* env = std::getenv("OMP_NUM_THREADS");
  const bool serial = std::is_same_v<similarity::HostSpace, Kokkos::Serial>;
  if (!serial && !env) GTEST_SKIP() << "SKIPPED: OMP_NUM_THREADS unset";
  EXPECT_EQ(similarity::HostSpace().concurrency(), serial ? 1 : std::atoi(env));
}

TEST_F(Simstat, SelectKthLargestLayout) {
  std::vector<float> v = {3, 1, 3, 2, 5, 3, 0, 5};
  std::vector<uint8_t> f(v.size(), 0);
  const auto s = similarity::select_kth_largest(v.data(), f.data(), 8, 4);
  EXPECT_EQ(s.value, 3.0f);
  EXPECT_EQ(s.gt, 2);
  EXPECT_EQ(s.ge, 5);
  for (int64_t i = 0; i < 8; ++i)
    EXPECT_TRUE(i < s.gt ? v[i] > 3 : (i < s.ge ? v[i] == 3 : v[i] < 3));
}

// The reservoir shrink keeps its invariant on both of its paths: the histogram cut (distinct values
// over many bins) and the exact selection it falls back to (ties: one value everywhere). With
// `pending` values counted in the histogram but not yet offered to the reservoir (the rest of the
// current chunk), at the top here, the cut must look that much deeper to keep k values and still
// be taken.
TEST_F(Simstat, ShrinkReservoirKeepsInvariant) {
  const int32_t bins = 64;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const int64_t pending : {0, 3})
    for (const bool ties : {false, true}) {
      if (pending > 0 && ties) continue;
      SCOPED_TRACE(ties ? "all equal" : "distinct, pending " + std::to_string(pending));
      const int64_t k = 10, cap = 2 * k;
      std::vector<float> vals(static_cast<size_t>(cap));
      std::vector<uint8_t> flags(static_cast<size_t>(cap));
      std::vector<int32_t> hist(static_cast<size_t>(bins), 0);
      for (int64_t i = 0; i < cap; ++i) {
        vals[static_cast<size_t>(i)] = ties ? 0.25f : u(rng);
        flags[static_cast<size_t>(i)] = static_cast<uint8_t>(i % 3 == 0);
        ++hist[static_cast<size_t>(similarity::sim_bin(vals[static_cast<size_t>(i)], bins))];
      }
      hist[static_cast<size_t>(bins - 1)] += static_cast<int32_t>(pending);  // values near 1
      const auto before = vals;
      const auto before_flags = flags;
      std::vector<float> sorted = before;
      std::sort(sorted.begin(), sorted.end(), std::greater<>());
      const float kth = sorted[static_cast<size_t>(k - 1)];
      int64_t n = cap, eq_n = 0, eq_lab = 0;
      float tau = -1.5f;
      similarity::shrink_reservoir(vals.data(), flags.data(), n, k, tau, eq_n, eq_lab, hist.data(),
                                   bins, pending > 0 ? 1.0f : sorted.front(), pending);
      EXPECT_LT(n, cap) << "no room made";
      EXPECT_LE(tau, kth);
      EXPECT_GE(n + eq_n, k) << "the k-th largest was lost";
      int64_t above = 0, equal = 0, equal_lab = 0, above_lab = 0, kept_lab = 0;
      for (size_t i = 0; i < before.size(); ++i) {
        above += before[i] > tau;
        above_lab += before[i] > tau ? before_flags[i] : 0;
        equal += before[i] == tau;
        equal_lab += before[i] == tau ? before_flags[i] : 0;
      }
      EXPECT_EQ(n, above);
      EXPECT_EQ(eq_n, equal);
      EXPECT_EQ(eq_lab, equal_lab);
      for (int64_t i = 0; i < n; ++i) {
        EXPECT_GT(vals[static_cast<size_t>(i)], tau);
        kept_lab += flags[static_cast<size_t>(i)];
      }
      EXPECT_EQ(kept_lab, above_lab) << "flags must move with their values";
      if (!ties) EXPECT_LT(tau, kth) << "distinct values over 64 bins: the histogram cut";
      if (ties) EXPECT_EQ(tau, kth) << "one value: the exact selection";
    }
}

// The kernels' NaN (std::numeric_limits is host code) has the bits of the host's, which reach
// STATS.h5 for anchors without negatives.
TEST_F(Simstat, KernelQuietNanHasTheBitsOfStdQuietNan) {
  const float a = similarity::quiet_nan(), b = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0);
  static_assert(similarity::kOnHost<similarity::HostSpace>, "the host space runs host code");
}

// shrink_reservoir takes the largest value below its cut as a maximum of order keys: the keys must
// sort as the floats do (negatives included, -0 just below +0) and map back to the same bits.
TEST_F(Simstat, OrderKeysSortAsTheFloatsAndRoundTrip) {
  const float inf = std::numeric_limits<float>::infinity();
  const float denorm = std::numeric_limits<float>::denorm_min();
  std::vector<float> v = {-inf,  -1.0f, -0.5f,  -0.25f, -1e-30f, -denorm,
                          -0.0f, 0.0f,  denorm, 1e-30f, 0.25f,   std::nextafter(0.25f, 1.0f),
                          0.5f,  1.0f,  inf};
  for (size_t i = 0; i < v.size(); ++i) {
    const int32_t key = similarity::order_key(v[i]);
    const float back = similarity::from_order_key(key);
    EXPECT_EQ(std::memcmp(&back, &v[i], sizeof back), 0) << v[i];
    if (i > 0) EXPECT_LT(similarity::order_key(v[i - 1]), key) << v[i - 1] << " vs " << v[i];
  }
}

TEST_F(Simstat, FncBatchesArePartitionOfPairs) {
  const auto b = similarity::fnc_batches(103, 10, 9);
  std::vector<int> size(11, 0);
  for (auto x : b) ++size[static_cast<size_t>(x)];
  for (int i = 0; i < 10; ++i) EXPECT_EQ(size[static_cast<size_t>(i)], 10);
  EXPECT_EQ(size[10], 3);
  EXPECT_EQ(b, similarity::fnc_batches(103, 10, 9));
  EXPECT_NE(b, similarity::fnc_batches(103, 10, 8));
}

// GloFND's exact initialisation: one rank's block of anchors, both modalities, read from an
// embeddings file and streamed against all its pairs, gives the brute-force thresholds bit for bit
// (as simstat's, whatever the block).
TEST_F(Simstat, ExactThresholdsOfABlockFromAFileMatchBruteForce) {
  const Case c = make_case(300, 16, 41, /*adversarial=*/true, 0);
  const int64_t n = c.e.size(), d = c.e.dim;
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("fnvlp-exact-" + std::to_string(::getpid()) + ".h5"))
                               .string();
  data::write_embeddings(path, c.e);
  const double alpha = 0.05;
  const auto ref_i = test::brute_force(c.e.image_emb, c.e.text_emb, n, d, c.e.image_id, c.e.label,
                                       {}, c.batch, alpha);
  const auto ref_t = test::brute_force(c.e.text_emb, c.e.image_emb, n, d, c.e.image_id, c.e.label,
                                       {}, c.batch, alpha);
  for (const auto& [row0, rows] : {std::pair<int64_t, int64_t>{0, n}, {110, 90}, {299, 1}}) {
    const auto got = similarity::exact_thresholds(path, row0, rows, alpha);
    ASSERT_EQ(static_cast<int64_t>(got.image.size()), rows);
    ASSERT_EQ(static_cast<int64_t>(got.text.size()), rows);
    for (int64_t i = 0; i < rows; ++i) {
      const auto g = static_cast<size_t>(row0 + i), u = static_cast<size_t>(i);
      EXPECT_TRUE(test::same_float(got.image[u], ref_i.threshold[g])) << "image anchor " << g;
      EXPECT_TRUE(test::same_float(got.text[u], ref_t.threshold[g])) << "text anchor " << g;
    }
  }
  EXPECT_THROW(similarity::exact_thresholds(path, 250, 51, alpha), Error);
  std::filesystem::remove(path);
}

// Issue 27: a training rank's exact_init must not hold the N-pair columns. anchor_stats reads the
// columns' ids, labels and batches through a ColumnReader a tile at a time (the anchors' own once),
// and gives the bits of the in-memory call, on both paths, with FNC batches and a start sample.
TEST_F(Simstat, ColumnsAreReadATileAtATime) {
  const auto c = make_case(900, 16, 43, /*adversarial=*/true, 24);
  const int64_t n = c.e.size(), d = c.e.dim, tile = 128, row0 = 300, rows = 70;
  const similarity::CandidateReader reader = [&](int64_t c0, int64_t cn, float* out) {
    std::memcpy(out, c.e.text_emb.data() + c0 * d, sizeof(float) * cn * d);
  };
  for (const auto& p : {with_start(params(0.05, tile, 32), 300),
                        generic(with_start(params(0.05, tile, 32), 300))}) {
    int64_t widest = 0, read = 0;
    const similarity::ColumnReader columns = [&](int64_t c0, int64_t cn, int64_t* id, int32_t* lab,
                                                 int64_t* bat) {
      widest = std::max(widest, cn);
      read += cn;
      std::copy_n(c.e.image_id.data() + c0, cn, id);
      std::copy_n(c.e.label.data() + c0, cn, lab);
      std::copy_n(c.batch.data() + c0, cn, bat);
    };
    const auto got = similarity::anchor_stats(c.e.image_emb.data() + row0 * d, row0, rows, d,
                                              reader, n, columns, nullptr, p);
    expect_same_stats(got, run(c, p, false, row0, rows));
    EXPECT_LE(widest, tile);
    EXPECT_GT(read, n);  // the counting pass and the streams read every column, in tiles
    EXPECT_GT(got.count_fnc[0] + got.count_fnc[1], 0);  // FNC batches were really gathered
  }
  // --fnc-batch 0 (every batch -1) is no simulation: no threshold, no counts (it used to gather
  // one column as a batch of all pairs).
  Case off = c;
  off.batch = similarity::fnc_batches(n, 0, 1);
  const auto none = run(off, params(0.05, tile, 32), false, row0, rows);
  for (int64_t i = 0; i < rows; ++i) {
    const auto u = static_cast<size_t>(i);
    EXPECT_TRUE(std::isnan(none.fnc_threshold[u])) << i;
    EXPECT_EQ(none.count_fnc[u] + none.n_batch_label[u], 0) << i;
  }
}

TEST_F(Simstat, RejectsBadParameters) {
  const auto c = make_case(10, 4, 6, false, 5);
  EXPECT_THROW(run(c, params(0.0, 4, 4), false), Error);
  auto p = params(0.1, 4, 4);
  p.quantiles = 1;
  EXPECT_THROW(run(c, p, false), Error);
  auto bad = c;
  bad.e.text_emb[4 * 3 + 1] = std::numeric_limits<float>::quiet_NaN();
  try {
    run(bad, params(0.1, 4, 4), false);
    ADD_FAILURE() << "NaN candidate accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pair 3"), std::string::npos) << e.what();
  }
}

// ---- The device path (device_path.hpp, device_kernels.hpp) ------------------------------------

// Every output but the cost diagnostics (the paths differ there) has the same bits.
void expect_same_results(const similarity::RowStats& a, const similarity::RowStats& b) {
  auto x = a, y = b;
  x.start_sample = y.start_sample = x.restarted_rows = y.restarted_rows = 0;
  x.scalar_values = y.scalar_values = x.buffer_bytes = y.buffer_bytes = 0;
  expect_same_stats(x, y);
}

// The device path's statistics are the generic path's, bit for bit: on the GPU in a build against
// Kokkos on CUDA (against the host's generic path), on the host elsewhere (its GEMMs are then the
// host's stand-ins: a double sum in another order, and TF32-truncated operands summed in float, so
// that pass 2's window and re-checks work on errors of TF32's size). Random unit vectors (the
// TF32 window and the exact re-checks at work) and ties everywhere; tiles that end inside chunks,
// blocks smaller than a tile, FNC batches, lambda, k = 1 and k = n_neg.
TEST_F(Simstat, DevicePathGivesTheGenericPathsBits) {
  for (const bool adversarial : {false, true}) {
    const auto c = make_case(400, adversarial ? 8 : 32, 21, adversarial, 24);
    for (const double alpha : {1e-9, 0.01, 0.3, 1.0})
      for (const auto [tile, block] : {std::pair<int64_t, int64_t>{64, 37}, {400, 400}, {7, 150}}) {
        SCOPED_TRACE(std::string(adversarial ? "ties" : "random") + " alpha " +
                     std::to_string(alpha) + " tile " + std::to_string(tile) + " block " +
                     std::to_string(block));
        auto p = params(alpha, 50, block);
        p.device_tile = tile;
        const auto got = run(c, device(p), true);
        expect_same_results(got, run(c, on_host(generic(p)), true));
        EXPECT_EQ(got.start_sample + got.restarted_rows, 0);
        EXPECT_GT(got.buffer_bytes, 0);
      }
    expect_matches_reference(c, device(params(0.05, 50, 64)));
  }
}

// One value everywhere: every negative of a row lies in the threshold's bin, so pass 2 collects
// them all (about 600 per row), more for a block than a 1 MiB budget's bucket holds (26,214
// values): the rows go through pass 2 in groups.
TEST_F(Simstat, DevicePathWithEveryValueInOneBin) {
  auto c = make_case(600, 8, 22, false, 24);
  for (auto* m : {&c.e.image_emb, &c.e.text_emb}) std::fill(m->begin(), m->end(), 0.25f);
  auto p = device(params(0.01, 64, 600));
  p.device_memory_mb = 1;
  p.device_tile = 128;
  const auto got = run(c, p, true);
  expect_same_results(got, run(c, on_host(generic(p)), true));
  EXPECT_FLOAT_EQ(got.threshold[0], 8 * 0.25f * 0.25f);
  EXPECT_EQ(got.count[0], got.n_neg[0]);
}

// Pass 1's rounding: a double product d within e = f64_error_factor(dim) |a| |c| of
// dot_in_double's double sum (here another summation order, moved by up to e / 2 more) gives
// dot_in_double's float, recomputed where [d - e, d + e] holds a float rounding boundary. Near-zero
// similarities (c made orthogonal to a, up to float rounding) have tiny ulps, where rounding d
// itself would give other bits: the test counts that it does, and that the re-check is rare
// otherwise.
TEST_F(Simstat, DoubleGemmRoundsToDotInDoubleOrRechecks) {
  const int64_t dim = 64, n = 4000;
  std::mt19937_64 rng(23);
  std::normal_distribution<float> g;
  std::uniform_real_distribution<double> shift(-0.5, 0.5);
  int64_t naive_wrong = 0, rechecked = 0;
  std::vector<float> a(dim), c(dim);
  for (int64_t t = 0; t < n; ++t) {
    for (auto& v : a) v = g(rng);
    for (auto& v : c) v = g(rng);
    if (t % 2 == 0) {  // nearly orthogonal: the similarity is float rounding of a projection
      double ac = 0, aa = 0;
      for (int64_t k = 0; k < dim; ++k) ac += double(a[k]) * c[k], aa += double(a[k]) * a[k];
      for (int64_t k = 0; k < dim; ++k) c[k] = static_cast<float>(c[k] - ac / aa * a[k]);
    }
    double desc = 0, na = 0, nc = 0;
    for (int64_t k = dim - 1; k >= 0; --k) desc += double(a[k]) * double(c[k]);
    for (int64_t k = 0; k < dim; ++k) na += double(a[k]) * a[k], nc += double(c[k]) * c[k];
    const double e = similarity::f64_error_factor(dim) * std::sqrt(na) * std::sqrt(nc) * 1.001;
    const double d = desc + shift(rng) * e;
    const float want = similarity::dot_in_double(a.data(), c.data(), dim);
    const float got = similarity::exact_from_f64(d, e, a.data(), c.data(), dim, rechecked);
    ASSERT_TRUE(test::same_float(got, want)) << "t " << t << ": " << got << " vs " << want;
    naive_wrong += !test::same_float(static_cast<float>(d), want);
  }
  EXPECT_GT(naive_wrong, 10) << "rounding the double GEMM's value alone would have passed";
  EXPECT_GE(rechecked, naive_wrong);
  EXPECT_LT(rechecked, n * 3 / 4) << "the re-check is for values near a rounding boundary only";
}

// The floats of a histogram bin are what sim_bin does: bin_low(b) is the first float of bin b,
// bin_high(b) its last (the floats beside them are in the bins beside it).
TEST_F(Simstat, BinFloatsAreSimBinsOwn) {
  for (const int32_t bins : {2, 128, 4096})
    for (const int32_t b : {0, 1, bins / 3, bins / 2, bins - 2, bins - 1}) {
      SCOPED_TRACE("bins " + std::to_string(bins) + " bin " + std::to_string(b));
      const float lo = similarity::bin_low(b, bins), hi = similarity::bin_high(b, bins);
      EXPECT_EQ(similarity::sim_bin(lo, bins), b);
      EXPECT_EQ(similarity::sim_bin(hi, bins), b);
      if (b > 0) EXPECT_EQ(similarity::sim_bin(std::nextafter(lo, -2.0f), bins), b - 1);
      if (b < bins - 1) EXPECT_EQ(similarity::sim_bin(std::nextafter(hi, 2.0f), bins), b + 1);
    }
  EXPECT_TRUE(std::isinf(similarity::bin_low(0, 64)) && similarity::bin_low(0, 64) < 0);
  EXPECT_TRUE(std::isinf(similarity::bin_high(63, 64)) && similarity::bin_high(63, 64) > 0);
}

// Pass 2 on one row, on the host space: TF32-sized errors up to the bound leave the bin's values
// and the labels above it exact; an error beyond the bound shows as a collected count other than
// pass 1's (which the device path refuses) instead of a silently wrong threshold.
TEST_F(Simstat, WindowFilterIsExactWithinTheTf32BoundAndCountsWhatItMisses) {
  using Space = similarity::HostSpace;
  const int64_t dim = 16, n = 3000;
  const int32_t bins = 64;
  std::mt19937_64 rng(24);
  std::normal_distribution<float> g;
  similarity::View2<float, Space> a("a", 1, dim), cand("c", n, dim);
  // Unit vectors: similarities in [-1, 1], spread over the bins.
  const auto unit = [&](float* v) {
    double s = 0;
    for (int64_t k = 0; k < dim; ++k) s += double(v[k] = g(rng)) * v[k];
    for (int64_t k = 0; k < dim; ++k) v[k] = static_cast<float>(v[k] / std::sqrt(s));
  };
  unit(&a(0, 0));
  for (int64_t j = 0; j < n; ++j) unit(&cand(j, 0));
  similarity::View1<int32_t, Space> label("label", n);
  for (int64_t j = 0; j < n; ++j) label(j) = static_cast<int32_t>(j % 3);
  // The exact floats, and the bin of the 50th largest as finalize_bins would name it.
  std::vector<float> f(n);
  double na = 0, cmax = 0;
  for (int64_t k = 0; k < dim; ++k) na += double(a(0, k)) * a(0, k);
  for (int64_t j = 0; j < n; ++j) {
    f[j] = similarity::dot_in_double(&a(0, 0), &cand(j, 0), dim);
    double nc = 0;
    for (int64_t k = 0; k < dim; ++k) nc += double(cand(j, k)) * cand(j, k);
    cmax = std::max(cmax, std::sqrt(nc));
  }
  std::vector<float> sorted = f;
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  const int32_t bin = similarity::sim_bin(sorted[49], bins);
  int64_t need = 0, above_label = 0;
  for (int64_t j = 0; j < n; ++j) {
    const int32_t b = similarity::sim_bin(f[j], bins);
    need += b == bin;
    above_label += b > bin && label(j) == 1;
  }
  ASSERT_GT(need, 3);
  const double e = similarity::tf32_error_factor(dim) * std::sqrt(na) * cmax;
  const auto pass2 = [&](double error) {
    similarity::RowState<Space> st(1, bins, 1, 1);
    st.label(0) = 1;
    similarity::DeviceRows<Space> dr(1);
    dr.err32(0) = e;
    dr.bin(0) = bin;
    dr.bin_lo(0) = similarity::bin_low(bin, bins);
    dr.bin_hi(0) = similarity::bin_high(bin, bins);
    dr.need(0) = need;
    similarity::View2<float, Space> sims("sims", 1, n);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    for (int64_t j = 0; j < n; ++j) sims(0, j) = static_cast<float>(f[j] + error * u(rng));
    similarity::View1<float, Space> bucket("bucket", need);
    similarity::View1<uint8_t, Space> flags("flags", need);
    const similarity::View1<int64_t, Space> no_positives("pos", 0);
    similarity::filter_window(Space(), sims, n, 0, a, cand, label, no_positives, st, dr, bucket,
                              flags, 0, 1);
    std::vector<float> got(bucket.data(), bucket.data() + std::min(need, dr.got(0)));
    std::sort(got.begin(), got.end());
    return std::make_tuple(dr.got(0), dr.above_label(0), got, st.scalar_n(0));
  };
  std::vector<float> want;
  for (int64_t j = 0; j < n; ++j)
    if (similarity::sim_bin(f[j], bins) == bin) want.push_back(f[j]);
  std::sort(want.begin(), want.end());
  const auto [got, labels, values, rechecked] = pass2(0.9 * e / 2);  // float rounding of f + err
  EXPECT_EQ(got, need);
  EXPECT_EQ(labels, above_label);
  EXPECT_EQ(values, want);
  EXPECT_LT(rechecked, n / 2) << "the window, not every value";
  EXPECT_NE(std::get<0>(pass2(20 * e)), need) << "errors 20 times the bound went unnoticed";
}

}  // namespace
}  // namespace fnvlp
