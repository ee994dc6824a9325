// GloFND, FNC and SRCL math on small hand-made similarity sets (negatives/), TCL's IMC/LMI
// (loss/tcl.hpp).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/core/error.hpp"
#include "fnvlp/loss/tcl.hpp"
#include "fnvlp/negatives/filter_telemetry.hpp"
#include "fnvlp/negatives/glofnd.hpp"
#include "fnvlp/negatives/srcl.hpp"

namespace fnvlp::negatives {
namespace {

std::vector<float> sorted_desc(torch::Tensor t) {
  t = t.contiguous();
  std::vector<float> v(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
  std::sort(v.begin(), v.end(), std::greater<float>());
  return v;
}

// With the full negative set every step (exact subgradient), λ settles at the (1−α)-quantile:
// the fraction of scores above it approaches α (Lemma: λ is the k-th largest, k = ⌈α n⌉, up to
// the oscillation of a constant-step method).
TEST(NegativesGlofnd, ConvergesToExactQuantileWithFullSet) {
  torch::manual_seed(1);
  const int64_t n = 1000;
  const auto scores = torch::rand({1, n}) * 1.6 - 0.8;  // in [-0.8, 0.8]
  const auto negative = torch::ones({1, n}, torch::kBool);
  GlofndOptions opt;
  opt.alpha = 0.1;
  opt.lr = 0.01;
  GlofndSide side({0, 1}, opt);
  for (int i = 0; i < 3000; ++i) side.update_and_filter(scores, negative, {0});
  const auto s = sorted_desc(scores);
  const int64_t k = static_cast<int64_t>(std::ceil(opt.alpha * n));  // 100
  const float lam = side.lambda(0);
  const double above = (scores > lam).sum().item<int64_t>() / static_cast<double>(n);
  EXPECT_NEAR(above, opt.alpha, 0.02) << "lambda " << lam << " exact " << s[k - 1];
  EXPECT_NEAR(lam, s[k - 1], 0.02);
}

// Mini-batches of 64 random negatives per step: the stochastic subgradient of eq. 2 still
// drives λ to the dataset-wide quantile, which no single batch contains.
TEST(NegativesGlofnd, StochasticBatchesTrackTheGlobalQuantile) {
  torch::manual_seed(2);
  const int64_t n = 4000, b = 64;
  const auto scores = torch::randn({n}) * 0.2;
  GlofndOptions opt;
  opt.alpha = 0.05;
  opt.lr = 0.01;
  GlofndSide side({10, 11}, opt);  // the anchor's pair_id is 10
  const auto negative = torch::ones({1, b}, torch::kBool);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  for (int i = 0; i < 4000; ++i) {
    const auto idx = torch::randint(n, {b}, gen, torch::kLong);
    side.update_and_filter(scores.index_select(0, idx).unsqueeze(0), negative, {10});
  }
  const auto s = sorted_desc(scores);
  const float exact = s[static_cast<size_t>(std::ceil(opt.alpha * n)) - 1];
  const double above = (scores > side.lambda(10)).sum().item<int64_t>() / static_cast<double>(n);
  EXPECT_NEAR(above, opt.alpha, 0.025) << "lambda " << side.lambda(10) << " exact " << exact;
}

TEST(NegativesGlofnd, FiltersOnlyNegativesAboveUpdatedLambda) {
  GlofndOptions opt;
  opt.alpha = 0.5;
  opt.init = 0.3;  // above 0.3 goes
  GlofndSide side({0, 2}, opt);
  const auto cos = torch::tensor({{0.9f, 0.5f, 0.1f, 0.95f}, {0.2f, 0.8f, 0.4f, 0.0f}});
  auto negative = torch::ones({2, 4}, torch::kBool);
  negative[0][3] = false;  // a same-image column: never filtered, whatever its similarity
  negative[1][1] = false;
  const auto before = side.filter(cos, negative, {0, 1});
  EXPECT_TRUE(before[0][0].item<bool>());
  EXPECT_TRUE(before[0][1].item<bool>());
  EXPECT_FALSE(before[0][3].item<bool>());
  EXPECT_FALSE(before[1][1].item<bool>());
  // Row 0: 2 of 3 negatives above 0.3 -> gradient 0.5 - 2/3 < 0 -> λ rises; row 1: 1 of 3 above
  // -> gradient 0.5 - 1/3 > 0 -> λ falls. Adam's first step moves each by lr (|m̂/√v̂| = 1).
  const auto after = side.update_and_filter(cos, negative, {0, 1});
  EXPECT_NEAR(side.lambda(0), 0.3 + opt.lr, 1e-6);
  EXPECT_NEAR(side.lambda(1), 0.3 - opt.lr, 1e-6);
  EXPECT_TRUE(torch::equal(after, side.filter(cos, negative, {0, 1})));
  EXPECT_FALSE(after.masked_select(~negative).any().item<bool>());
}

// A step skipped for a non-finite loss undoes its λ update: λ, both moments and the update
// counts return bitwise to their values before it (the bias correction would shift otherwise).
TEST(NegativesGlofnd, UndoRestoresTheStateBeforeTheLastUpdate) {
  GlofndOptions opt;
  opt.alpha = 0.25;
  GlofndSide side({0, 4}, opt);
  torch::manual_seed(5);
  const auto negative = torch::ones({3, 6}, torch::kBool);
  side.update_and_filter(torch::rand({3, 6}) * 2 - 1, negative, {0, 1, 2});
  const std::vector<float> after_first = side.export_rows();
  // The second update touches anchor 1 twice and anchor 3, which the first never did.
  side.update_and_filter(torch::rand({3, 6}) * 2 - 1, negative, {1, 3, 1});
  ASSERT_NE(side.export_rows(), after_first);
  side.undo_last_update();
  EXPECT_EQ(side.export_rows(), after_first);
  side.undo_last_update();  // nothing left to undo
  EXPECT_EQ(side.export_rows(), after_first);
}

TEST(NegativesGlofnd, ProjectsToUnitIntervalAndOwnsOnlyItsBlock) {
  GlofndOptions opt;
  opt.lr = 1.0;
  opt.alpha = 1.0;  // every step pushes λ down by lr: 1 -> 0 -> -1 -> held at -1
  GlofndSide side({100, 103}, opt);
  const auto cos = torch::full({1, 5}, 0.99f);
  const auto negative = torch::ones({1, 5}, torch::kBool);
  for (int i = 0; i < 5; ++i) side.update_and_filter(cos, negative, {101});
  EXPECT_FLOAT_EQ(side.lambda(101), -1.0f);
  EXPECT_FLOAT_EQ(side.lambda(100), 1.0f);  // untouched anchors keep their value
  EXPECT_THROW(side.update_and_filter(cos, negative, {103}), Error);
  EXPECT_THROW(side.lambda(99), Error);
}

TEST(NegativesGlofnd, ExportImportRoundTrip) {
  GlofndOptions opt;
  GlofndSide a({0, 3}, opt), b({0, 3}, opt);
  const auto cos = torch::rand({3, 6});
  const auto negative = torch::ones({3, 6}, torch::kBool);
  for (int i = 0; i < 3; ++i) a.update_and_filter(cos, negative, {0, 1, 2});
  b.import_rows(a.export_rows());
  EXPECT_EQ(a.export_rows(), b.export_rows());
  // The restored moments and counts continue the same trajectory.
  a.update_and_filter(cos, negative, {0, 1, 2});
  b.update_and_filter(cos, negative, {0, 1, 2});
  EXPECT_EQ(a.lambdas(), b.lambdas());
  EXPECT_THROW(b.import_rows(std::vector<float>(5)), Error);
  // O(block) memory: 4 values of 4 bytes per pair.
  EXPECT_EQ(GlofndSide({0, 1000}, opt).state_bytes(), 1000u * 16u);
}

// The scalar recurrence the device-resident state replaced (GlofndSide until stop 45: λ, m, v
// and the counts in host vectors, one anchor at a time), kept as the reference that the tensor
// update must reproduce bit for bit.
struct ScalarGlofnd {
  ScalarGlofnd(data::PairRange block, const GlofndOptions& opt)
      : begin(block.begin),
        opt(opt),
        lambda(static_cast<size_t>(block.size()), static_cast<float>(opt.init)),
        m(lambda.size(), 0.0f),
        v(lambda.size(), 0.0f),
        count(lambda.size(), 0) {}
  // Returns the mask and each row's λ after its update.
  std::pair<torch::Tensor, std::vector<float>> update(const torch::Tensor& cos,
                                                      const torch::Tensor& negative,
                                                      const std::vector<int64_t>& ids) {
    std::vector<float> lam(ids.size());
    for (size_t r = 0; r < ids.size(); ++r) lam[r] = lambda[static_cast<size_t>(ids[r] - begin)];
    const auto t = torch::tensor(lam).unsqueeze(1);
    const auto a = (negative & (cos > t)).sum(1).contiguous();
    const auto n = negative.sum(1).contiguous();
    saved = {lambda, m, v, count};
    for (size_t r = 0; r < ids.size(); ++r) {
      const int64_t nr = n[static_cast<int64_t>(r)].item<int64_t>();
      if (nr == 0) continue;
      const auto i = static_cast<size_t>(ids[r] - begin);
      const double g = opt.alpha - static_cast<double>(a[static_cast<int64_t>(r)].item<int64_t>()) /
                                       static_cast<double>(nr);
      const double mm = opt.beta1 * m[i] + (1 - opt.beta1) * g;
      const double vv = opt.beta2 * v[i] + (1 - opt.beta2) * g * g;
      const int32_t visits = ++count[i];
      const double tt = opt.bias_correction == GlofndBiasCorrection::kEpoch
                            ? static_cast<double>(epoch + 1)
                            : static_cast<double>(visits);
      const double m_hat = mm / (1 - std::pow(opt.beta1, tt));
      const double v_hat = vv / (1 - std::pow(opt.beta2, tt));
      const double next = lambda[i] - opt.lr * m_hat / (std::sqrt(v_hat) + opt.eps);
      m[i] = static_cast<float>(mm);
      v[i] = static_cast<float>(vv);
      lambda[i] = static_cast<float>(std::clamp(next, -1.0, 1.0));
      lam[r] = lambda[i];
    }
    return {negative & (cos > torch::tensor(lam).unsqueeze(1)), lam};
  }
  void undo() { std::tie(lambda, m, v, count) = saved; }
  std::vector<float> rows() const {
    std::vector<float> out;
    for (size_t i = 0; i < lambda.size(); ++i)
      out.insert(out.end(), {lambda[i], m[i], v[i], static_cast<float>(count[i])});
    return out;
  }
  int64_t begin;
  GlofndOptions opt;
  int64_t epoch = 0;  // bias_correction=epoch
  std::vector<float> lambda, m, v;
  std::vector<int32_t> count;
  std::tuple<std::vector<float>, std::vector<float>, std::vector<float>, std::vector<int32_t>>
      saved;
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<float> host_floats(const torch::Tensor& t) {
  const auto h = t.to(torch::kCPU).contiguous();
  return {h.data_ptr<float>(), h.data_ptr<float>() + h.numel()};
}

// Random steps for a block of 8 anchors: anchor 0 in every step (its count passes where both bias
// corrections round to 1, and the table's growth from 64 rows), repeated anchors, rows without a
// negative, similarities on a coarse grid (counts at λ's neighbourhood), every 7th step undone.
struct GlofndStep {
  std::vector<int64_t> ids;
  torch::Tensor cos, negative;
};
struct GlofndSteps {
  explicit GlofndSteps(uint64_t seed) : gen(at::make_generator<at::CPUGeneratorImpl>(seed)) {}
  GlofndStep next() {
    const int64_t b = 6, n = 10;
    const auto draw = torch::randint(8, {b - 1}, gen, torch::kLong).contiguous();
    GlofndStep s{{100}, {}, {}};
    for (int64_t r = 0; r < b - 1; ++r) s.ids.push_back(100 + draw[r].item<int64_t>());
    s.cos = (torch::randint(-64, 65, {b, n}, gen, torch::kLong).to(torch::kFloat) / 64.0f);
    s.negative = torch::rand({b, n}, gen) < 0.7;
    if (torch::rand({1}, gen).item<float>() < 0.3) s.negative[b - 1].fill_(false);
    return s;
  }
  at::Generator gen;
};

TEST(NegativesGlofnd, TensorUpdateIsTheScalarRecurrenceBitwise) {
  for (const auto bias : {GlofndBiasCorrection::kVisit, GlofndBiasCorrection::kEpoch})
    for (const double lr : {0.05, 0.7}) {  // 0.7: λ hits the projection's bounds
      GlofndOptions opt;
      opt.alpha = 0.2;
      opt.lr = lr;
      opt.beta2 = 0.6;  // 1 − β2^t rounds to 1 from t ≈ 74, 1 − β1^t from t ≈ 356
      opt.bias_correction = bias;
      GlofndSide side({100, 108}, opt);
      ScalarGlofnd ref({100, 108}, opt);
      GlofndSteps steps(11);
      for (int step = 0; step < 420; ++step) {
        ref.epoch = step / 3;  // epoch + 1 passes both saturations too
        side.set_epoch(ref.epoch);
        const auto [ids, cos, negative] = steps.next();
        const auto mask = side.update_and_filter(cos, negative, ids);
        const auto [ref_mask, ref_lam] = ref.update(cos, negative, ids);
        ASSERT_TRUE(torch::equal(mask, ref_mask)) << "lr " << lr << " step " << step;
        ASSERT_TRUE(same_bits(host_floats(side.last_lambdas()), ref_lam))
            << "lr " << lr << " step " << step;
        ASSERT_TRUE(same_bits(side.export_rows(), ref.rows())) << "lr " << lr << " step " << step;
        if (step % 7 == 3) {
          side.undo_last_update();
          ref.undo();
          ASSERT_TRUE(same_bits(side.export_rows(), ref.rows())) << "undo at step " << step;
        }
      }
      EXPECT_GT(side.export_rows()[3], 400.0f);  // anchor 0's count
    }
}

// The static step's update (staged anchors, every round over every row, the spare slot for the
// rows outside a round; more rounds than the batch needs, as when the ranks agree on a larger
// count) is the scalar recurrence bit for bit, and its commit on a 0 flag is the undo.
TEST(NegativesGlofnd, StagedUpdateIsTheScalarRecurrenceBitwise) {
  for (const auto bias : {GlofndBiasCorrection::kVisit, GlofndBiasCorrection::kEpoch}) {
    GlofndOptions opt;
    opt.alpha = 0.2;
    opt.lr = 0.7;
    opt.beta2 = 0.6;
    opt.bias_correction = bias;
    GlofndSide side({100, 108}, opt);
    ScalarGlofnd ref({100, 108}, opt);
    GlofndSteps steps(13);
    const auto taken = torch::ones({}), skipped = torch::zeros({});
    int64_t repeated = 0;
    for (int step = 0; step < 420; ++step) {
      ref.epoch = step / 5;
      side.set_epoch(ref.epoch);
      const auto [ids, cos, negative] = steps.next();
      std::map<int64_t, int64_t> seen;
      int64_t rounds = 0;
      for (const int64_t id : ids) rounds = std::max(rounds, ++seen[id]);
      repeated += rounds > 1;
      side.stage(ids, rounds + step % 3);
      const auto mask = side.update_and_filter_staged(cos, negative);
      const auto [ref_mask, ref_lam] = ref.update(cos, negative, ids);
      ASSERT_TRUE(torch::equal(mask, ref_mask)) << "step " << step;
      ASSERT_TRUE(same_bits(host_floats(side.staged_lambdas()), ref_lam)) << "step " << step;
      const bool skip = step % 7 == 3;
      side.commit(skip ? skipped : taken);
      if (skip) ref.undo();
      ASSERT_TRUE(same_bits(side.export_rows(), ref.rows())) << "step " << step;
    }
    EXPECT_GT(repeated, 50) << "the steps must exercise anchors listed twice";
    EXPECT_GT(side.export_rows()[3], 300.0f);  // anchor 0's count, past both saturations
    // Fewer rounds than an anchor's rows is a named error.
    EXPECT_THROW(side.stage({101, 101}, 1), Error);
  }
}

// bias_correction: an anchor's first update from a fresh tracker moves λ by exactly lr with the
// visit count (t = 1: m̂ / √v̂ = g / |g|), and with the authors' t = epoch + 1 by
// lr (1 − β1) / (1 − β1^t) / √((1 − β2) / (1 − β2^t)): about 0.46 lr at epoch 15.
TEST(NegativesGlofnd, BiasCorrectionByVisitOrByEpoch) {
  const auto cos = torch::full({1, 4}, 0.5f);  // every negative above λ = 0.2: g = α − 1 < 0
  const auto negative = torch::ones({1, 4}, torch::kBool);
  auto first_step = [&](GlofndBiasCorrection bias, int64_t epoch) {
    GlofndOptions opt;
    opt.alpha = 0.1;
    opt.init = 0.2;
    opt.bias_correction = bias;
    GlofndSide side({0, 1}, opt);
    side.set_epoch(epoch);
    side.update_and_filter(cos, negative, {0});
    return static_cast<double>(side.lambda(0)) - 0.2;
  };
  const GlofndOptions d;
  EXPECT_NEAR(first_step(GlofndBiasCorrection::kVisit, 15), d.lr, 1e-6);
  EXPECT_NEAR(first_step(GlofndBiasCorrection::kVisit, 0), d.lr, 1e-6);
  const double t = 16;
  const double authors = d.lr * (1 - d.beta1) / (1 - std::pow(d.beta1, t)) /
                         std::sqrt((1 - d.beta2) / (1 - std::pow(d.beta2, t)));
  EXPECT_NEAR(first_step(GlofndBiasCorrection::kEpoch, 15), authors, 1e-6);
  EXPECT_NEAR(authors / d.lr, 0.456, 0.001);
  EXPECT_NEAR(first_step(GlofndBiasCorrection::kEpoch, 0), d.lr, 1e-6);  // t = 1 at epoch 0
  EXPECT_THROW(GlofndSide({0, 1}, d).set_epoch(-1), Error);
}

// reanchor_moments: reset restarts Adam (the next step moves λ by ±lr), keep continues the
// tracker's moments and counts from the new λ.
TEST(NegativesGlofnd, ReanchorResetsOrKeepsTheMoments) {
  const auto cos = torch::tensor({{0.9f, 0.1f, -0.2f, -0.5f}});
  const auto negative = torch::ones({1, 4}, torch::kBool);
  for (const auto keep : {GlofndReanchorMoments::kReset, GlofndReanchorMoments::kKeep}) {
    GlofndOptions opt;
    opt.alpha = 0.25;
    opt.init = 1.0;
    opt.reanchor_moments = keep;
    GlofndSide side({0, 2}, opt);
    for (int i = 0; i < 5; ++i) side.update_and_filter(cos, negative, {0});
    const std::vector<float> before = side.export_rows();
    side.restart_from({0.5f, std::nanf("")});
    const std::vector<float> after = side.export_rows();
    EXPECT_EQ(after[0], 0.5f);
    EXPECT_EQ(after[4], before[4]);  // NaN: anchor 1 keeps its λ
    if (keep == GlofndReanchorMoments::kKeep) {
      EXPECT_EQ(std::vector<float>(after.begin() + 1, after.begin() + 4),
                std::vector<float>(before.begin() + 1, before.begin() + 4));
    } else {
      EXPECT_EQ(std::vector<float>(after.begin() + 1, after.begin() + 4),
                std::vector<float>({0.0f, 0.0f, 0.0f}));
    }
    // λ 0.5 with one negative of four above it: g = 0.25 − 0.25 = 0; reset's zero moments take
    // no step, kept moments (from λ's approach down from 1) still move it.
    side.update_and_filter(cos, negative, {0});
    const double moved = std::abs(static_cast<double>(side.lambda(0)) - 0.5);
    if (keep == GlofndReanchorMoments::kKeep)
      EXPECT_GT(moved, 1e-4);
    else
      EXPECT_EQ(moved, 0.0);
  }
}

// On a GPU the same inputs give the CPU's state and masks bit for bit: each update operation is a
// single IEEE-rounded one on both, the bias corrections come from the same host table.
TEST(NegativesGlofnd, CudaStateIsTheCpuStateBitwise) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "SKIPPED: no CUDA device visible";
  for (const auto bias : {GlofndBiasCorrection::kVisit, GlofndBiasCorrection::kEpoch}) {
    GlofndOptions opt;
    opt.alpha = 0.2;
    opt.beta2 = 0.6;
    opt.bias_correction = bias;
    GlofndSide cpu({100, 108}, opt), gpu({100, 108}, opt, torch::kCUDA);
    GlofndSteps steps(12);
    for (int step = 0; step < 420; ++step) {
      cpu.set_epoch(step / 3);
      gpu.set_epoch(step / 3);
      const auto [ids, cos, negative] = steps.next();
      const auto a = cpu.update_and_filter(cos, negative, ids);
      const auto b = gpu.update_and_filter(cos.cuda(), negative.cuda(), ids);
      ASSERT_TRUE(b.is_cuda() && torch::equal(a, b.cpu())) << "step " << step;
      ASSERT_TRUE(same_bits(cpu.export_rows(), gpu.export_rows())) << "step " << step;
    }
  }
}

// The static step's update and commit on a GPU are the CPU's, bit for bit.
TEST(NegativesGlofnd, CudaStagedStateIsTheCpuStateBitwise) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "SKIPPED: no CUDA device visible";
  GlofndOptions opt;
  opt.alpha = 0.2;
  opt.beta2 = 0.6;
  GlofndSide cpu({100, 108}, opt), gpu({100, 108}, opt, torch::kCUDA);
  GlofndSteps steps(14);
  for (int step = 0; step < 420; ++step) {
    const auto [ids, cos, negative] = steps.next();
    cpu.stage(ids, 6);
    gpu.stage(ids, 6);
    const auto a = cpu.update_and_filter_staged(cos, negative);
    const auto b = gpu.update_and_filter_staged(cos.cuda(), negative.cuda());
    ASSERT_TRUE(b.is_cuda() && torch::equal(a, b.cpu())) << "step " << step;
    const float flag = step % 5 == 2 ? 0.0f : 1.0f;
    cpu.commit(torch::full({}, flag));
    gpu.commit(torch::full({}, flag, torch::kCUDA));
    ASSERT_TRUE(same_bits(cpu.export_rows(), gpu.export_rows())) << "step " << step;
  }
}

// FNC as it was computed on the host until stop 45: per row a partial sort of the negatives'
// columns by similarity, ties by column.
torch::Tensor scalar_fnc(const torch::Tensor& cos, const torch::Tensor& negative, double alpha) {
  const auto c = cos.contiguous();
  const auto neg = negative.contiguous();
  auto out = torch::zeros(cos.sizes(), torch::kBool);
  const int64_t b = c.size(0), n = c.size(1);
  for (int64_t r = 0; r < b; ++r) {
    const float* row = c.data_ptr<float>() + r * n;
    std::vector<int64_t> cols;
    for (int64_t j = 0; j < n; ++j)
      if (neg.data_ptr<bool>()[r * n + j]) cols.push_back(j);
    const auto k = static_cast<int64_t>(std::ceil(alpha * static_cast<double>(cols.size())));
    std::partial_sort(cols.begin(), cols.begin() + k, cols.end(), [&](int64_t x, int64_t y) {
      return row[x] > row[y] || (row[x] == row[y] && x < y);
    });
    for (int64_t i = 0; i < k; ++i) out[r][cols[static_cast<size_t>(i)]] = true;
  }
  return out;
}

// Similarities on a grid of 1/8 (ties everywhere), both zeros, rows without a negative.
std::pair<torch::Tensor, torch::Tensor> fnc_inputs(uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto cos = torch::randint(-8, 9, {32, 40}, gen, torch::kLong).to(torch::kFloat) / 8.0f;
  cos.masked_fill_(torch::rand({32, 40}, gen) < 0.1, -0.0f);
  auto negative = torch::rand({32, 40}, gen) < 0.8;
  negative[5].fill_(false);
  return {cos, negative};
}

TEST(NegativesFnc, SelectionIsTheScalarPartialSortsSelection) {
  const auto [cos, negative] = fnc_inputs(3);
  for (const double alpha : {0.0, 0.01, 0.1, 0.37, 0.5, 1.0})
    EXPECT_TRUE(torch::equal(fnc_filter(cos, negative, alpha), scalar_fnc(cos, negative, alpha)))
        << "alpha " << alpha;
}

TEST(NegativesFnc, CudaSelectionIsTheCpuSelection) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "SKIPPED: no CUDA device visible";
  const auto [cos, negative] = fnc_inputs(4);
  for (const double alpha : {0.01, 0.1, 0.37, 1.0}) {
    const auto on_gpu = fnc_filter(cos.cuda(), negative.cuda(), alpha);
    EXPECT_TRUE(on_gpu.is_cuda() && torch::equal(on_gpu.cpu(), fnc_filter(cos, negative, alpha)))
        << "alpha " << alpha;
  }
}

TEST(NegativesFnc, TopCeilAlphaOfTheNegativesTiesByColumn) {
  const auto cos = torch::tensor({{0.9f, 0.8f, 0.8f, 0.1f, 0.99f}, {0.1f, 0.2f, 0.3f, 0.4f, 0.5f}});
  auto negative = torch::ones({2, 5}, torch::kBool);
  negative[0][4] = false;  // own positive: the highest similarity, not a candidate
  // Row 0: 4 negatives, alpha 0.5 -> k = 2: 0.9 (col 0) and the tie 0.8 -> lower column 1.
  const auto ex = fnc_filter(cos, negative, 0.5);
  EXPECT_TRUE(torch::equal(ex[0], torch::tensor({true, true, false, false, false})));
  // Row 1: 5 negatives, k = ceil(2.5) = 3: cols 4, 3, 2.
  EXPECT_TRUE(torch::equal(ex[1], torch::tensor({false, false, true, true, true})));
  // Any alpha > 0 removes at least one; alpha 0 none.
  EXPECT_EQ(fnc_filter(cos, negative, 0.01).sum().item<int64_t>(), 2);
  EXPECT_EQ(fnc_filter(cos, negative, 0.0).sum().item<int64_t>(), 0);
}

TEST(NegativesFnCounts, PrecisionRecallAgainstLabels) {
  const auto exclude = torch::tensor({{false, true, true, false}});
  const auto negative = torch::tensor({{false, true, true, true}});
  const auto lr = torch::tensor({3});
  const auto lc = torch::tensor({3, 3, 5, 3});  // cols 1 and 3 are same-label negatives
  const FnCounts c = fn_counts(exclude, negative, lr, lc);
  EXPECT_EQ(c.negatives, 3);
  EXPECT_EQ(c.filtered, 2);
  EXPECT_EQ(c.filtered_true, 1);   // precision 1/2
  EXPECT_EQ(c.same_label_neg, 2);  // recall 1/2
  // Unknown labels are never ground-truth positives.
  EXPECT_EQ(fn_counts(exclude, negative, torch::tensor({-1}), torch::full({4}, -1)).filtered_true,
            0);
}

// The window's counts are summed where the masks live and read at report(), which starts the next
// window: two records give the ratios of one, a report without records gives no keys.
TEST(NegativesFilterTelemetry, ReportsTheWindowsCountsAndStartsAnew) {
  Comm comm;  // one rank in the unit binary
  const auto negative = torch::tensor({{false, true, true, true}, {true, false, true, true}});
  const auto ex_i2t = torch::tensor({{false, true, true, false}, {true, false, false, false}});
  const auto ex_t2i = torch::tensor({{false, false, true, false}, {false, false, false, true}});
  const auto lr = torch::tensor({3, -1});       // row 1's label unknown
  const auto lc = torch::tensor({3, 3, 5, 3});  // row 0's same-label negatives: cols 1 and 3
  FilterTelemetry t;
  t.record(ex_i2t, ex_t2i, negative, lr, lc);
  t.record(ex_i2t, ex_t2i, negative, lr, lc);
  nlohmann::json m;
  t.report(comm, m);
  // Per record: 6 negatives; filtered 3 (i2t) and 2 (t2i); of those with both labels known
  // (row 0: 2 + 1) one shares the label; same-label negatives 2 per direction.
  EXPECT_DOUBLE_EQ(m.at("filtered_frac_i2t").get<double>(), 3.0 / 6);
  EXPECT_DOUBLE_EQ(m.at("filtered_frac_t2i").get<double>(), 2.0 / 6);
  EXPECT_DOUBLE_EQ(m.at("fn_precision").get<double>(), 1.0 / 3);
  EXPECT_DOUBLE_EQ(m.at("fn_recall").get<double>(), 1.0 / 4);
  EXPECT_DOUBLE_EQ(m.at("fn_f1").get<double>(), 2.0 / 7);

  const auto none = torch::zeros_like(negative);
  t.record(none, none, negative, lr, lc);
  nlohmann::json next;
  t.report(comm, next);
  EXPECT_EQ(next.at("filtered_frac_i2t").get<double>(), 0.0);
  EXPECT_EQ(next.at("fn_recall").get<double>(), 0.0);
  nlohmann::json empty;
  t.report(comm, empty);
  EXPECT_TRUE(empty.empty()) << empty.dump();
}

// The static step's record adds into the same tensor: its address survives records and reports.
TEST(NegativesFilterTelemetry, SumsKeepTheirAddressAcrossRecordsAndReports) {
  Comm comm;
  const auto negative = torch::ones({2, 3}, torch::kBool);
  const auto ex = torch::tensor({{true, false, false}, {false, false, false}});
  const auto labels = torch::tensor({0, 1});
  FilterTelemetry t;
  t.allocate(torch::kCPU);
  t.record(ex, ex, negative, labels, torch::tensor({0, 1, 0}));
  nlohmann::json first;
  t.report(comm, first);
  EXPECT_DOUBLE_EQ(first.at("filtered_frac_i2t").get<double>(), 1.0 / 6);
  t.record(ex, ex, negative, labels, torch::tensor({0, 1, 0}));
  t.record(ex, ex, negative, labels, torch::tensor({0, 1, 0}));
  nlohmann::json second;
  t.report(comm, second);
  EXPECT_DOUBLE_EQ(second.at("filtered_frac_i2t").get<double>(), 2.0 / 12);
}

TEST(NegativesSrcl, WeightsAverageOneAndFallWithSimilarity) {
  const auto cos = torch::tensor({{0.9f, 0.1f, -0.5f, 0.3f}, {0.0f, 0.0f, 0.0f, 0.0f}});
  auto negative = torch::ones({2, 4}, torch::kBool);
  negative[0][0] = false;
  const auto w = srcl_weights(cos, {}, 0.0, negative);
  const auto neg_mean = (w * negative).sum(1) / negative.sum(1);
  EXPECT_NEAR(neg_mean[0].item<float>(), 1.0f, 1e-5);
  EXPECT_NEAR(neg_mean[1].item<float>(), 1.0f, 1e-5);
  EXPECT_FLOAT_EQ(w[0][0].item<float>(), 1.0f);             // positive column untouched
  EXPECT_GT(w[0][2].item<float>(), w[0][1].item<float>());  // less similar -> larger weight
  EXPECT_GT(w[0][1].item<float>(), w[0][3].item<float>());
  // w ∝ 1/exp(s): ratio of two weights is exp(s_b - s_a).
  EXPECT_NEAR(w[0][2].item<float>() / w[0][1].item<float>(), std::exp(0.1 + 0.5), 1e-4);
  // a = 1: the helper alone decides (current similarities ignored).
  const auto helper = torch::tensor({{0.0f, 0.5f, 0.5f, 0.5f}, {0.0f, 0.0f, 0.0f, 0.0f}});
  const auto wh = srcl_weights(cos, helper, 1.0, negative);
  EXPECT_NEAR(wh[0][1].item<float>(), 1.0f, 1e-5);
  EXPECT_NEAR(wh[0][3].item<float>(), 1.0f, 1e-5);
  EXPECT_NEAR(srcl_helper_weight(1.0, 25, 100), 0.75, 1e-12);
  EXPECT_NEAR(srcl_helper_weight(0.8, 100, 100), 0.0, 1e-12);
  // a from memory (the static step): the weights of a double a.
  const auto wt = srcl_weights(cos, helper, torch::full({}, 0.25f), negative);
  EXPECT_TRUE(torch::allclose(wt, srcl_weights(cos, helper, 0.25, negative), 1e-6, 1e-6));
}

TEST(LossTcl, ImcIsSymmetricInfoNceWithSameImageMasked) {
  const auto a =
      torch::nn::functional::normalize(torch::tensor({{1.f, 0.f}, {0.f, 1.f}, {1.f, 1.f}}),
                                       torch::nn::functional::NormalizeFuncOptions().dim(1));
  const auto b =
      torch::nn::functional::normalize(torch::tensor({{1.f, .2f}, {.1f, 1.f}, {1.f, .8f}}),
                                       torch::nn::functional::NormalizeFuncOptions().dim(1));
  const auto temp = torch::tensor(0.5f);
  const auto ids = torch::tensor({0L, 1L, 2L});
  const auto logits = torch::matmul(a, b.t()) / 0.5;
  const auto tgt = torch::arange(3);
  const double expect =
      0.5 * (torch::nn::functional::cross_entropy(logits, tgt).item<double>() +
             torch::nn::functional::cross_entropy(logits.t(), tgt).item<double>());
  EXPECT_NEAR(loss::imc_loss(a, b, ids, temp).item<double>(), expect, 1e-5);
  // Samples 0 and 2 share an image: they stop being each other's negatives, the loss drops.
  EXPECT_LT(loss::imc_loss(a, b, torch::tensor({0L, 1L, 0L}), temp).item<double>(), expect);
}

TEST(LossTcl, LmiIgnoresInvalidPositionsAndPoolsPatches) {
  torch::manual_seed(3);
  auto norm = [](const torch::Tensor& t) {
    return torch::nn::functional::normalize(t,
                                            torch::nn::functional::NormalizeFuncOptions().dim(-1));
  };
  const auto g = norm(torch::randn({3, 4}));
  auto local = norm(torch::randn({3, 2, 4}));
  const auto ids = torch::tensor({0L, 1L, 2L});
  const auto temp = torch::tensor(0.1f);
  const auto all = loss::lmi_loss(g, local, {}, ids, temp);
  // Position 1 invalid for every sample: the loss is the position-0 InfoNCE alone.
  const auto valid = torch::tensor({{true, false}, {true, false}, {true, false}});
  const auto only0 = loss::lmi_loss(g, local, valid, ids, temp);
  const auto logits0 = torch::matmul(g, local.select(1, 0).t()) / 0.1;
  EXPECT_NEAR(only0.item<double>(),
              torch::nn::functional::cross_entropy(logits0, torch::arange(3)).item<double>(), 1e-4);
  // Changing the invalid position's embeddings changes nothing.
  auto local2 = local.clone();
  local2.select(1, 1).copy_(norm(torch::randn({3, 4})));
  EXPECT_NEAR(loss::lmi_loss(g, local2, valid, ids, temp).item<double>(), only0.item<double>(),
              1e-6);
  EXPECT_TRUE(std::isfinite(all.item<double>()));
  // 1 + 4x4 tokens pooled to 2x2: each output is the mean of one 2x2 quadrant.
  auto tokens = torch::zeros({1, 17, 1});
  for (int i = 0; i < 16; ++i) tokens[0][1 + i][0] = static_cast<float>(i);
  const auto pooled = loss::pool_patch_tokens(tokens, 2);
  ASSERT_EQ(pooled.sizes(), torch::IntArrayRef({1, 4, 1}));
  EXPECT_FLOAT_EQ(pooled[0][0][0].item<float>(), (0 + 1 + 4 + 5) / 4.0f);
  EXPECT_FLOAT_EQ(pooled[0][3][0].item<float>(), (10 + 11 + 14 + 15) / 4.0f);
  EXPECT_THROW(loss::pool_patch_tokens(tokens, 3), Error);
}

}  // namespace
}  // namespace fnvlp::negatives
