// FALCON's scheduler (falcon.txt §3.2–3.3): Beta sampling and log-density, the residual MLP policy,
// REINFORCE on a reward, save/load, and the FalconSampler's resume guarantee.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>

#include <unistd.h>

#include "fnvlp/core/error.hpp"
#include "fnvlp/data/sampler.hpp"
#include "fnvlp/negatives/falcon.hpp"
#include "fnvlp/negatives/quantile_profile.hpp"

namespace {

using namespace fnvlp::negatives;
using fnvlp::data::BlockPartition;
using json = nlohmann::json;

torch::Generator make_gen(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

torch::Tensor unit_rows(int64_t n, int64_t e, uint64_t seed) {
  auto x = torch::randn({n, e}, make_gen(seed));
  return x / x.norm(2, 1, true);
}

double log_beta_pdf(double x, double a, double b) {
  return (a - 1) * std::log(x) + (b - 1) * std::log1p(-x) - std::lgamma(a) - std::lgamma(b) +
         std::lgamma(a + b);
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("fnvlp-falcon-" + std::to_string(::getpid()) + "-" + name))
      .string();
}

// --- Beta ------------------------------------------------------------------------------------

TEST(FalconBeta, LogProbMatchesTheClosedForm) {
  // Beta(2, 3) at 0.4: x (1 − x)² / B(2, 3), B(2, 3) = 1/12 -> 12 · 0.4 · 0.36 = 1.728.
  auto lp = beta_log_prob(torch::tensor({0.4, 0.5, 0.5, 0.9}, torch::kDouble),
                          torch::tensor({2.0, 1.0, 0.5, 7.5}, torch::kDouble),
                          torch::tensor({3.0, 1.0, 0.5, 0.8}, torch::kDouble));
  EXPECT_NEAR(lp[0].item<double>(), std::log(1.728), 1e-12);
  EXPECT_NEAR(lp[1].item<double>(), 0.0, 1e-12);                   // uniform
  EXPECT_NEAR(lp[2].item<double>(), std::log(2.0 / M_PI), 1e-12);  // arcsine density at 1/2
  EXPECT_NEAR(lp[3].item<double>(), log_beta_pdf(0.9, 7.5, 0.8), 1e-12);
  // Float parameters (the policy's dtype) agree to float precision.
  auto lpf = beta_log_prob(torch::tensor({0.4}), torch::tensor({2.0f}), torch::tensor({3.0f}));
  EXPECT_NEAR(lpf[0].item<double>(), std::log(1.728), 1e-5);
}

TEST(FalconBeta, DensityIntegratesToOne) {
  const int64_t n = 200000;
  auto x = (torch::arange(n, torch::kDouble) + 0.5) / static_cast<double>(n);  // midpoint rule
  for (auto [a, b] : std::vector<std::pair<double, double>>{{2, 5}, {3.5, 1.2}, {1, 1}, {7, 7}}) {
    auto lp =
        beta_log_prob(x, torch::full({n}, a, torch::kDouble), torch::full({n}, b, torch::kDouble));
    EXPECT_NEAR(lp.exp().mean().item<double>(), 1.0, 1e-4) << "Beta(" << a << ", " << b << ")";
  }
}

TEST(FalconBeta, LogProbGradientIsTheDigammaFormula) {
  // ∂/∂α log Beta(x; α, β) = log x − ψ(α) + ψ(α + β); ∂/∂β = log(1 − x) − ψ(β) + ψ(α + β).
  auto a = torch::tensor({2.0, 0.7}, torch::dtype(torch::kDouble).requires_grad(true));
  auto b = torch::tensor({3.0, 4.2}, torch::dtype(torch::kDouble).requires_grad(true));
  auto x = torch::tensor({0.3, 0.05}, torch::kDouble);
  beta_log_prob(x, a, b).sum().backward();
  auto ad = a.detach(), bd = b.detach();
  EXPECT_TRUE(torch::allclose(a.grad(), x.log() - torch::digamma(ad) + torch::digamma(ad + bd)));
  EXPECT_TRUE(
      torch::allclose(b.grad(), (1 - x).log() - torch::digamma(bd) + torch::digamma(ad + bd)));
}

TEST(FalconBeta, SampleMeansMatchAndDrawsAreDeterministic) {
  const int64_t n = 20000;
  for (auto [a, b] : std::vector<std::pair<double, double>>{{2, 5}, {0.3, 0.7}, {8, 1.5}}) {
    auto q = sample_beta(torch::full({n}, a), torch::full({n}, b),
                         /*key=*/static_cast<uint64_t>(a * 1000 + b * 10));
    const double mean = a / (a + b);
    const double sd = std::sqrt(a * b / ((a + b) * (a + b) * (a + b + 1)));
    EXPECT_NEAR(q.mean().item<double>(), mean, 5 * sd / std::sqrt(static_cast<double>(n)))
        << "Beta(" << a << ", " << b << ")";
    EXPECT_GE(q.min().item<double>(), 0.0);
    EXPECT_LE(q.max().item<double>(), 1.0);
  }
  double g1 = 0, g3 = 0;
  for (uint64_t k = 0; k < 20000; ++k) {
    g1 += sample_gamma(0.5, k);
    g3 += sample_gamma(3.0, k + 1000000);
  }
  EXPECT_NEAR(g1 / 20000, 0.5, 5 * std::sqrt(0.5 / 20000));
  EXPECT_NEAR(g3 / 20000, 3.0, 5 * std::sqrt(3.0 / 20000));
  auto x = sample_beta(torch::full({50}, 2.0), torch::full({50}, 2.0), 42);
  EXPECT_TRUE(torch::equal(x, sample_beta(torch::full({50}, 2.0), torch::full({50}, 2.0), 42)));
  EXPECT_FALSE(torch::equal(x, sample_beta(torch::full({50}, 2.0), torch::full({50}, 2.0), 43)));
  EXPECT_DOUBLE_EQ(sample_beta(2.0, 2.0, fnvlp::data::hash_key({42, 3})), x[3].item<double>());
  EXPECT_THROW(sample_beta(0.0, 1.0, 1), fnvlp::Error);
}

// --- policy and scheduler --------------------------------------------------------------------

FalconConfig small_config() {
  FalconConfig c;
  c.quantiles = 10;
  c.hidden = 32;
  c.init_seed = 17;
  return c;
}

TEST(FalconPolicy, OutputShapesAndUniformStart) {
  FalconConfig c;  // the paper's sizes: m = 100, hidden 256, 2 residual blocks
  FalconPolicy policy(c.quantiles, c.hidden, c.blocks, c.min_concentration);
  EXPECT_EQ(policy->parameters().size(), 8u);  // 4 linear layers
  auto S = torch::randn({30, 30}, make_gen(1));
  S = S + S.t();
  auto [a, b] = policy->forward(quantile_profile(S, 100));
  EXPECT_EQ(a.sizes(), (std::vector<int64_t>{30}));
  EXPECT_EQ(b.sizes(), (std::vector<int64_t>{30}));
  EXPECT_TRUE((a > c.min_concentration).all().item<bool>());
  EXPECT_TRUE((b > c.min_concentration).all().item<bool>());
  // Near Beta(1, 1) before training.
  EXPECT_NEAR(a.mean().item<double>(), 1.0, 0.05);
  EXPECT_NEAR(b.mean().item<double>(), 1.0, 0.05);
  EXPECT_THROW(policy->forward(torch::zeros({3, 99})), fnvlp::Error);
  // Identical initialisation on every rank for the same seed.
  FalconScheduler s1(small_config()), s2(small_config());
  for (size_t k = 0; k < s1.parameters().size(); ++k)
    EXPECT_TRUE(torch::equal(s1.parameters()[k], s2.parameters()[k]));
}

double draws_log_prob(FalconScheduler& s, const FalconDraws& d) {
  torch::NoGradGuard no_grad;
  auto [a, b] = s.policy()->forward(d.inputs);
  return beta_log_prob(d.q, a, b).sum().item<double>();
}

TEST(FalconScheduler, ReinforceStepRaisesTheLogProbOfRewardedDraws) {
  auto S = torch::randn({40, 40}, make_gen(2));
  S = S + S.t();
  for (double reward : {+1.0, -1.0}) {
    FalconConfig c = small_config();
    c.baseline = false;
    c.lr = 1e-3;
    FalconScheduler s(c);
    s.begin_search_space(S);
    s.begin_batch(99);
    for (int64_t row : {3, 17, 5, 30}) s.q(row);
    const FalconDraws d = s.take_draws();
    ASSERT_EQ(d.inputs.sizes(), (std::vector<int64_t>{4, 10}));
    ASSERT_EQ(d.rows, (std::vector<int64_t>{3, 17, 5, 30}));
    const double before = draws_log_prob(s, d);
    const double loss = s.update(reward, d);
    EXPECT_NEAR(loss, -reward * before, 1e-4);
    const double after = draws_log_prob(s, d);
    if (reward > 0)
      EXPECT_GT(after, before);  // positive advantage: the taken q become more likely
    else
      EXPECT_LT(after, before);
    EXPECT_EQ(s.updates(), 1);
  }
}

TEST(FalconScheduler, BaselineIsABiasCorrectedRunningMean) {
  FalconScheduler s(small_config());
  auto S = torch::randn({12, 12}, make_gen(3));
  s.begin_search_space(S);
  s.begin_batch(1);
  s.q(0);
  const FalconDraws d = s.take_draws();
  EXPECT_DOUBLE_EQ(s.baseline(), 0.0);
  // With b = Δ the advantage is 0: no gradient.
  s.loss_backward(1.0, d);
  EXPECT_NEAR(s.baseline(), 1.0, 1e-12);
  const double loss = s.loss_backward(1.0, d);
  EXPECT_DOUBLE_EQ(loss, 0.0);
  for (const auto& p : s.parameters()) EXPECT_EQ(p.grad().abs().sum().item<double>(), 0.0);
  s.loss_backward(3.0, d);
  // EMA: 0.1 -> 0.19 -> 0.471; corrected by 1 − 0.9³ = 0.271.
  EXPECT_NEAR(s.baseline(), 0.471 / 0.271, 1e-12);
  // No draws (a uniform epoch): zero gradients, defined for a cross-rank average.
  EXPECT_EQ(s.loss_backward(5.0, FalconDraws{}), 0.0);
  for (const auto& p : s.parameters()) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(p.grad().abs().sum().item<double>(), 0.0);
  }
  EXPECT_THROW(s.loss_backward(std::nan(""), d), fnvlp::Error);
}

// FALCON's premise (§3.3): the policy learns which hardness pays for which anchor. Two kinds of
// anchors with distinct similarity profiles (a steep one: near duplicates in the search space; a
// flat one) and a reward that peaks at q* = 0.2 for the first kind and 0.8 for the second: from
// Beta(1, 1) (mean 0.5 for every anchor), REINFORCE with the running-mean baseline moves each
// kind's Beta mean towards its own q*, driven only by the rewards of its draws.
TEST(FalconScheduler, PolicyLearnsTheBestQOfEachKindOfAnchor) {
  FalconConfig c = small_config();
  c.lr = 3e-3;
  FalconScheduler s(c);
  const int64_t M = 20, m = c.quantiles;
  auto values = torch::empty({M, m});
  const auto ramp = torch::linspace(0.0, 1.0, m);
  for (int64_t r = 0; r < M; ++r) values[r] = ramp * (r < M / 2 ? 4.0 : 0.1);
  s.begin_search_space_quantiles(values);
  auto mean_q = [&](int64_t row) {
    torch::NoGradGuard no_grad;
    auto [a, b] = s.policy()->forward(s.profile().index({torch::indexing::Slice(row, row + 1)}));
    return (a / (a + b)).item<double>();
  };
  EXPECT_NEAR(mean_q(0), 0.5, 0.02);
  EXPECT_NEAR(mean_q(M - 1), 0.5, 0.02);
  for (int64_t k = 0; k < 600; ++k) {
    const int64_t row = k % M;
    const double target = row < M / 2 ? 0.2 : 0.8;
    s.begin_batch(static_cast<uint64_t>(k));
    const double q = s.q(row);
    s.update(-(q - target) * (q - target), s.take_draws());
  }
  EXPECT_LT(mean_q(0), 0.35) << "steep-profile anchors did not move towards q* = 0.2";
  EXPECT_GT(mean_q(M - 1), 0.65) << "flat-profile anchors did not move towards q* = 0.8";
}

TEST(FalconScheduler, BatchLevelUsesOneQPerBatch) {
  FalconConfig c = small_config();
  c.instance_level = false;
  FalconScheduler s(c);
  s.begin_search_space(torch::randn({20, 20}, make_gen(4)));
  s.begin_batch(7);
  const double q0 = s.q(2);
  EXPECT_EQ(s.q(9), q0);
  EXPECT_EQ(s.q(11), q0);
  const FalconDraws d = s.take_draws();
  EXPECT_EQ(d.q.numel(), 1);
  EXPECT_EQ(d.inputs.sizes(), (std::vector<int64_t>{1, 10}));
  EXPECT_EQ(d.rows.size(), 3u);
  s.update(0.5, d);
  // Instance level: each row its own draw, reproducible by key.
  FalconScheduler t(small_config());
  t.begin_search_space(torch::randn({20, 20}, make_gen(4)));
  t.begin_batch(7);
  std::set<double> qs;
  for (int64_t r = 0; r < 10; ++r) qs.insert(t.q(r));
  EXPECT_EQ(qs.size(), 10u);
  const auto again = t.q_for_rows({0, 1, 2}, 7);
  EXPECT_DOUBLE_EQ(again[1].item<double>(), t.take_draws().q[1].item<double>());
}

// begin_search_space goes through the Kokkos kernel; feeding the torch reference's quantiles
// instead must give the same policy inputs and the same draws.
TEST(FalconScheduler, KokkosProfileEqualsTorchProfile) {
  const auto S = torch::randn({40, 40}, make_gen(8));
  FalconScheduler a(small_config()), b(small_config());
  a.begin_search_space(S);
  b.begin_search_space_quantiles(quantile_values(S, small_config().quantiles));
  a.begin_batch(3);
  b.begin_batch(3);
  for (int64_t r = 0; r < 40; ++r) EXPECT_EQ(a.q(r), b.q(r)) << r;
  EXPECT_TRUE(torch::equal(a.take_draws().inputs, b.take_draws().inputs));
}

TEST(FalconScheduler, SaveLoadRestoresPolicyOptimizerAndBaseline) {
  auto S = torch::randn({16, 16}, make_gen(5));
  FalconScheduler a(small_config());
  a.begin_search_space(S);
  for (int k = 0; k < 3; ++k) {
    a.begin_batch(k);
    for (int64_t r = 0; r < 5; ++r) a.q(r);
    a.update(0.1 * (k + 1), a.take_draws());
  }
  const std::string path = temp_path("sched.pt");
  a.save(path);
  FalconScheduler b(small_config());
  b.load(path);
  std::remove(path.c_str());
  EXPECT_DOUBLE_EQ(b.baseline(), a.baseline());
  EXPECT_EQ(b.updates(), 3);
  // One more identical update keeps them bitwise equal (the Adam moments came back too).
  for (FalconScheduler* s : {&a, &b}) {
    s->begin_search_space(S);
    s->begin_batch(10);
    for (int64_t r = 0; r < 5; ++r) s->q(r);
    s->update(0.7, s->take_draws());
  }
  for (size_t k = 0; k < a.parameters().size(); ++k)
    EXPECT_TRUE(torch::equal(a.parameters()[k], b.parameters()[k])) << "parameter " << k;
  EXPECT_THROW(b.load(temp_path("missing.pt")), fnvlp::Error);
}

// --- FalconSampler -----------------------------------------------------------------------------

struct Step {
  std::vector<int64_t> batch;
  std::vector<double> q;
};

// Runs the rest of the epoch with a policy update after every batch (reward from the batch).
std::vector<Step> run_epoch(FalconSampler& sampler, FalconScheduler& sched) {
  std::vector<Step> out;
  std::vector<int64_t> b;
  while (sampler.next(b)) {
    FalconDraws d = sched.take_draws();
    out.push_back(
        {b, std::vector<double>(d.q.data_ptr<double>(), d.q.data_ptr<double>() + d.q.numel())});
    EXPECT_EQ(sampler.last_batch().q, out.back().q);
    sched.update(static_cast<double>(b[0] % 7) / 7.0 - 0.4, d);
  }
  return out;
}

TEST(FalconSampler, ResumeMidEpochGivesTheIdenticalRemainingBatches) {
  const BlockPartition p(90, 2);  // blocks of 45; |M| = 20, B = 6: G(45) = 2·3 + 0 = 6
  const int rank = 1;
  auto img = unit_rows(45, 16, 8), txt = unit_rows(45, 16, 9);
  FalconScheduler sched(small_config());
  FalconSampler sampler(p, 6, 33, rank, 20, sched);
  sampler.set_embeddings(1, img, txt);
  sampler.start_epoch(1);
  EXPECT_EQ(sampler.batches_per_epoch(), 6);
  std::vector<int64_t> b;
  std::vector<Step> head;
  for (int k = 0; k < 4; ++k) {  // into the second search space
    ASSERT_TRUE(sampler.next(b));
    FalconDraws d = sched.take_draws();
    EXPECT_EQ(d.q.numel(), 5);
    sched.update(0.05 * k, d);
  }
  const json state = sampler.state();
  EXPECT_EQ(state.at("sampler"), "falcon");
  const std::string path = temp_path("resume.pt");
  sched.save(path);
  const std::vector<Step> rest = run_epoch(sampler, sched);
  ASSERT_EQ(rest.size(), 2u);

  FalconScheduler sched2(small_config());
  sched2.load(path);
  std::remove(path.c_str());
  FalconSampler resumed(p, 6, 33, rank, 20, sched2);
  resumed.set_embeddings(1, img, txt);
  resumed.load_state(json::parse(state.dump()));
  const std::vector<Step> again = run_epoch(resumed, sched2);
  ASSERT_EQ(again.size(), rest.size());
  for (size_t k = 0; k < rest.size(); ++k) {
    EXPECT_EQ(again[k].batch, rest[k].batch);
    EXPECT_EQ(again[k].q, rest[k].q);
  }
  // Every pair at most once in the epoch, with q from the policy in [0, 1].
  FalconScheduler s3(small_config());
  FalconSampler full(p, 6, 33, rank, 20, s3);
  full.set_embeddings(1, img, txt);
  full.start_epoch(1);
  std::set<int64_t> seen;
  for (const Step& st : run_epoch(full, s3)) {
    for (int64_t id : st.batch) EXPECT_TRUE(seen.insert(id).second);
    for (double q : st.q) EXPECT_TRUE(q >= 0.0 && q <= 1.0);
  }
  EXPECT_EQ(seen.size(), 36u);
  // A grouped sampler's state is not a FALCON one.
  GroupedConfig g;
  g.search_space = 20;
  GroupedSampler grouped(p, 6, 33, rank, g);
  grouped.set_embeddings(1, img, txt);
  EXPECT_THROW(grouped.load_state(state), fnvlp::Error);
}

}  // namespace
