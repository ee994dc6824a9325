#include "fnvlp/negatives/falcon.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <filesystem>

#include "fnvlp/core/error.hpp"
#include "fnvlp/core/sha256.hpp"
#include "fnvlp/data/sampler.hpp"
#include "fnvlp/negatives/quantile_pick.hpp"
#include "fnvlp/negatives/quantile_profile.hpp"
#include "fnvlp/similarity/row_quantiles.hpp"

namespace fnvlp::negatives {

namespace fs = std::filesystem;
namespace F = torch::nn::functional;

namespace {

constexpr uint64_t kTagBatchQ = 0x4251ull;  // the batch-level q's stream

// Uniform in the open interval (0, 1) from the counter-th draw of `key` (53 random bits).
double uniform01(uint64_t key, uint64_t& counter) {
  const uint64_t bits = data::counter_random(key, counter++) >> 11;
  return (static_cast<double>(bits) + 0.5) * 0x1p-53;
}

// Standard normal by Box–Muller (one of the pair is used: simpler state, draws are cheap).
double normal(uint64_t key, uint64_t& counter) {
  const double u1 = uniform01(key, counter), u2 = uniform01(key, counter);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

// log of a Gamma(shape, 1) draw. Marsaglia & Tsang (2000), "A simple method for generating gamma
// variables": for shape a >= 1, d = a − 1/3, c = 1 / sqrt(9d); x ~ N(0, 1), v = (1 + c x)³ > 0,
// accept d·v when log u < x²/2 + d − d v + d log v (u ~ U(0, 1)). For a < 1 the boost
// Gamma(a) = Gamma(a + 1) · U^(1/a), in log space so tiny shapes do not underflow to 0.
double log_gamma_draw(double shape, uint64_t key, uint64_t& counter) {
  FNVLP_CHECK(std::isfinite(shape) && shape > 0.0, "Gamma shape must be positive, got " << shape);
  if (shape < 1.0) {
    const double boosted = log_gamma_draw(shape + 1.0, key, counter);
    return boosted + std::log(uniform01(key, counter)) / shape;
  }
  const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (int attempt = 0; attempt < 100000; ++attempt) {
    const double x = normal(key, counter);
    double v = 1.0 + c * x;
    if (v <= 0.0) continue;
    v = v * v * v;
    const double u = uniform01(key, counter);
    if (u < 1.0 - 0.0331 * x * x * x * x) return std::log(d) + std::log(v);  // cheap squeeze
    if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return std::log(d) + std::log(v);
  }
  FNVLP_FAIL("Gamma(" << shape << ") sampler did not accept in 100000 attempts");
}

}  // namespace

// --- Beta ----------------------------------------------------------------------------------------

double sample_gamma(double shape, uint64_t key) {
  uint64_t counter = 0;
  return std::exp(log_gamma_draw(shape, key, counter));
}

double sample_beta(double a, double b, uint64_t key) {
  // Beta(a, b) = X / (X + Y), X ~ Gamma(a), Y ~ Gamma(b) = 1 / (1 + exp(log Y − log X)).
  uint64_t cx = 0, cy = 0;
  const double lx = log_gamma_draw(a, data::hash_key({key, 0}), cx);
  const double ly = log_gamma_draw(b, data::hash_key({key, 1}), cy);
  return 1.0 / (1.0 + std::exp(ly - lx));
}

torch::Tensor sample_beta(const torch::Tensor& alpha, const torch::Tensor& beta, uint64_t key) {
  FNVLP_CHECK(alpha.sizes() == beta.sizes(),
              "sample_beta: alpha " << alpha.sizes() << " and beta " << beta.sizes() << " differ");
  auto a = alpha.detach().to(torch::kCPU, torch::kDouble).contiguous();
  auto b = beta.detach().to(torch::kCPU, torch::kDouble).contiguous();
  auto out = torch::empty_like(a);
  const double* pa = a.data_ptr<double>();
  const double* pb = b.data_ptr<double>();
  double* po = out.data_ptr<double>();
  for (int64_t k = 0; k < a.numel(); ++k)
    po[k] = sample_beta(pa[k], pb[k], data::hash_key({key, static_cast<uint64_t>(k)}));
  return out;
}

torch::Tensor beta_log_prob(const torch::Tensor& q, const torch::Tensor& alpha,
                            const torch::Tensor& beta) {
  auto x = q.detach().to(alpha.device(), alpha.scalar_type()).clamp(1e-6, 1.0 - 1e-6);
  // log Beta(x; α, β) = (α−1) log x + (β−1) log(1−x) − log B(α, β),
  // log B(α, β) = lgamma α + lgamma β − lgamma(α + β).
  return (alpha - 1) * torch::log(x) + (beta - 1) * torch::log1p(-x) -
         (torch::lgamma(alpha) + torch::lgamma(beta) - torch::lgamma(alpha + beta));
}

torch::Tensor reinforce_loss(double advantage, const torch::Tensor& log_probs) {
  // Descent on −(Δ − b) Σ log π(q_i) is ascent on (Δ − b) ∇ log π (falcon.txt §3.3, Alg. 2 l. 8).
  return -advantage * log_probs.sum();
}

// --- policy --------------------------------------------------------------------------------------

void FalconConfig::validate() const {
  FNVLP_CHECK(quantiles >= 2, "falcon: quantiles m = " << quantiles << " (needs >= 2)");
  FNVLP_CHECK(hidden >= 1 && blocks >= 0, "falcon: hidden = " << hidden << ", blocks = " << blocks);
  FNVLP_CHECK(min_concentration > 0.0 && min_concentration < 1.0,
              "falcon: min_concentration = " << min_concentration << " outside (0, 1)");
  FNVLP_CHECK(lr > 0.0 && weight_decay >= 0.0,
              "falcon: lr = " << lr << ", weight_decay = " << weight_decay);
  FNVLP_CHECK(beta1 >= 0.0 && beta1 < 1.0 && beta2 >= 0.0 && beta2 < 1.0,
              "falcon: betas (" << beta1 << ", " << beta2 << ") outside [0, 1)");
  FNVLP_CHECK(baseline_decay >= 0.0 && baseline_decay < 1.0,
              "falcon: baseline_decay = " << baseline_decay << " outside [0, 1)");
}

FalconPolicyImpl::FalconPolicyImpl(int64_t quantiles, int64_t hidden, int64_t blocks,
                                   double min_concentration)
    : quantiles_(quantiles), min_concentration_(min_concentration) {
  input_ = register_module("input", torch::nn::Linear(quantiles, hidden));
  for (int64_t k = 0; k < blocks; ++k)
    blocks_.push_back(
        register_module("block" + std::to_string(k), torch::nn::Linear(hidden, hidden)));
  output_ = register_module("output", torch::nn::Linear(hidden, 2));
  reset_parameters(0);
}

void FalconPolicyImpl::reset_parameters(uint64_t seed) {
  torch::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto init = [&gen](torch::nn::Linear& l, double scale) {
    const double bound = scale / std::sqrt(static_cast<double>(l->weight.size(1)));
    l->weight.uniform_(-bound, bound, gen);
    l->bias.uniform_(-bound, bound, gen);
  };
  init(input_, 1.0);
  for (auto& b : blocks_) init(b, 1.0);
  init(output_, 1e-2);
  // softplus(z) + c_min = 1  <=>  z = log(exp(1 − c_min) − 1): Beta(1, 1) at the start.
  output_->bias.fill_(std::log(std::expm1(1.0 - min_concentration_)));
}

std::pair<torch::Tensor, torch::Tensor> FalconPolicyImpl::forward(const torch::Tensor& profile) {
  FNVLP_CHECK(profile.dim() == 2 && profile.size(1) == quantiles_,
              "falcon policy expects Ŝ rows [n, " << quantiles_ << "], got " << profile.sizes());
  // m · Ŝ: softmax rows sum to 1, so their entries are ~1/m; rescale to mean 1 for the MLP.
  auto h = torch::relu(input_(profile * static_cast<double>(quantiles_)));
  for (auto& b : blocks_) h = h + torch::relu(b(h));
  auto ab = F::softplus(output_(h)) + min_concentration_;
  return {ab.select(1, 0), ab.select(1, 1)};
}

// --- scheduler -----------------------------------------------------------------------------------

FalconScheduler::FalconScheduler(const FalconConfig& config)
    : config_(config),
      policy_(config.quantiles, config.hidden, config.blocks, config.min_concentration) {
  config_.validate();
  policy_->reset_parameters(config_.init_seed);
  optimizer_ = std::make_unique<torch::optim::AdamW>(policy_->parameters(),
                                                     torch::optim::AdamWOptions(config_.lr)
                                                         .betas({config_.beta1, config_.beta2})
                                                         .weight_decay(config_.weight_decay));
}

void FalconScheduler::begin_search_space(const torch::Tensor& S) {
  // v through the similarity/ Kokkos kernel (exact per-row order statistics); quantile_values is
  // its torch reference (tests check they agree bitwise).
  FNVLP_CHECK(S.dim() == 2 && S.size(0) == S.size(1) && S.size(0) >= 2,
              "falcon: search-space similarity must be [M, M] with M >= 2, got " << S.sizes());
  const int64_t M = S.size(0), m = config_.quantiles;
  std::vector<int64_t> ranks(static_cast<size_t>(m));
  for (int64_t l = 0; l < m; ++l)
    ranks[static_cast<size_t>(l)] =
        quantile_rank(static_cast<double>(l) / static_cast<double>(m - 1), M - 1);
  const auto Sc = S.to(torch::kCPU, torch::kFloat).contiguous();
  auto values = torch::empty({M, m}, torch::kFloat);
  similarity::row_order_statistics(Sc.data_ptr<float>(), M, ranks, values.data_ptr<float>());
  begin_search_space_quantiles(values);
}

void FalconScheduler::begin_search_space_quantiles(const torch::Tensor& values) {
  FNVLP_CHECK(
      values.dim() == 2 && values.size(1) == config_.quantiles,
      "falcon: quantile values must be [M, " << config_.quantiles << "], got " << values.sizes());
  torch::NoGradGuard no_grad;
  profile_ = quantile_softmax(values).to(torch::kCPU).contiguous();
  mean_profile_ = profile_.mean(0, /*keepdim=*/true);
  batch_open_ = false;
  rows_.clear();
  qs_.clear();
}

void FalconScheduler::begin_batch(uint64_t key) {
  FNVLP_CHECK(profile_.defined(), "falcon: begin_batch before begin_search_space");
  torch::NoGradGuard no_grad;
  auto [a, b] = policy_->forward(config_.instance_level ? profile_ : mean_profile_);
  alpha_ = a.to(torch::kDouble).contiguous();
  beta_ = b.to(torch::kDouble).contiguous();
  batch_key_ = key;
  if (!config_.instance_level)
    batch_q_ = sample_beta(alpha_.data_ptr<double>()[0], beta_.data_ptr<double>()[0],
                           data::hash_key({key, kTagBatchQ}));
  rows_.clear();
  qs_.clear();
  batch_open_ = true;
}

double FalconScheduler::q(int64_t row) {
  FNVLP_CHECK(batch_open_, "falcon: q() before begin_batch");
  FNVLP_CHECK(row >= 0 && row < profile_.size(0),
              "falcon: row " << row << " outside the search space of " << profile_.size(0));
  double v = batch_q_;
  if (config_.instance_level) {
    const auto k = static_cast<size_t>(row);
    v = sample_beta(alpha_.data_ptr<double>()[k], beta_.data_ptr<double>()[k],
                    data::hash_key({batch_key_, static_cast<uint64_t>(row)}));
  }
  rows_.push_back(row);
  qs_.push_back(v);
  return v;
}

torch::Tensor FalconScheduler::q_for_rows(const std::vector<int64_t>& rows, uint64_t key) {
  // A side query: the same draws begin_batch(key) + q(row) give, leaving any batch in progress
  // (its parameters, key and recorded draws) untouched.
  const auto saved_alpha = alpha_, saved_beta = beta_;
  const auto saved_rows = rows_;
  const auto saved_qs = qs_;
  const uint64_t saved_key = batch_key_;
  const double saved_q = batch_q_;
  const bool saved_open = batch_open_;
  begin_batch(key);
  std::vector<double> out;
  for (int64_t r : rows) out.push_back(q(r));
  alpha_ = saved_alpha;
  beta_ = saved_beta;
  rows_ = saved_rows;
  qs_ = saved_qs;
  batch_key_ = saved_key;
  batch_q_ = saved_q;
  batch_open_ = saved_open;
  return torch::tensor(out, torch::kDouble);
}

FalconDraws FalconScheduler::take_draws() {
  FalconDraws d;
  d.rows = std::move(rows_);
  if (!d.rows.empty()) {
    if (config_.instance_level) {
      d.inputs = profile_.index_select(0, torch::tensor(d.rows, torch::kLong)).clone();
      d.q = torch::tensor(qs_, torch::kDouble);
    } else {
      d.inputs = mean_profile_.clone();
      d.q = torch::tensor(std::vector<double>{batch_q_}, torch::kDouble);
    }
  }
  rows_.clear();
  qs_.clear();
  return d;
}

double FalconScheduler::baseline() const {
  if (updates_ == 0) return 0.0;
  // Bias-corrected EMA (as Adam's moments): the first reward gives b = Δ_1 exactly.
  return ema_ / (1.0 - std::pow(config_.baseline_decay, static_cast<double>(updates_)));
}

double FalconScheduler::loss_backward(double reward, const FalconDraws& draws) {
  FNVLP_CHECK(std::isfinite(reward), "falcon: non-finite reward " << reward);
  optimizer_->zero_grad();
  for (auto& p : policy_->parameters())
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
  if (draws.empty()) return 0.0;
  FNVLP_CHECK(draws.inputs.dim() == 2 && draws.inputs.size(0) == draws.q.numel(),
              "falcon: draws with " << draws.inputs.sizes() << " inputs and " << draws.q.numel()
                                    << " q values");
  const double advantage = reward - (config_.baseline ? baseline() : 0.0);
  auto [a, b] = policy_->forward(draws.inputs);
  auto loss = reinforce_loss(advantage, beta_log_prob(draws.q, a, b));
  loss.backward();
  ema_ = config_.baseline_decay * ema_ + (1.0 - config_.baseline_decay) * reward;
  ++updates_;
  return loss.item<double>();
}

void FalconScheduler::step() { optimizer_->step(); }

std::string FalconScheduler::policy_fingerprint() const {
  Sha256 h;
  for (const auto& p : policy_->parameters()) {
    const auto host = p.detach().to(torch::kCPU).contiguous();
    h.update(host.data_ptr(), static_cast<size_t>(host.nbytes()));
  }
  return h.hex();
}

double FalconScheduler::update(double reward, const FalconDraws& draws) {
  const double loss = loss_backward(reward, draws);
  step();
  return loss;
}

void FalconScheduler::save(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  try {
    torch::serialize::OutputArchive archive, pol, opt;
    policy_->save(pol);
    optimizer_->save(opt);
    archive.write("policy", pol);
    archive.write("optimizer", opt);
    archive.write("baseline_ema", torch::tensor(ema_, torch::kDouble));
    archive.write("updates", torch::tensor(updates_, torch::kLong));
    archive.save_to(tmp);
  } catch (const c10::Error& e) {
    FNVLP_FAIL("cannot write the FALCON scheduler to '" << tmp
                                                        << "': " << e.what_without_backtrace());
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  FNVLP_CHECK(!ec, "cannot rename '" << tmp << "' to '" << path << "': " << ec.message());
}

void FalconScheduler::load(const std::string& path) {
  FNVLP_CHECK(fs::exists(path), "FALCON scheduler file '" << path << "' is missing");
  try {
    torch::serialize::InputArchive archive, pol, opt;
    archive.load_from(path);
    archive.read("policy", pol);
    {
      torch::NoGradGuard no_grad;
      policy_->load(pol);
    }
    archive.read("optimizer", opt);
    optimizer_->load(opt);
    torch::Tensor ema, updates;
    archive.read("baseline_ema", ema);
    archive.read("updates", updates);
    ema_ = ema.item<double>();
    updates_ = updates.item<int64_t>();
  } catch (const c10::Error& e) {
    FNVLP_FAIL("cannot load the FALCON scheduler from '" << path
                                                         << "': " << e.what_without_backtrace());
  }
  batch_open_ = false;
}

}  // namespace fnvlp::negatives
