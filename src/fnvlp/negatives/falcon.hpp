#pragma once
// FALCON's negative mining scheduler (falcon.txt §3.2–3.3, App. C.1 Alg. 2, Table 5).
//
// Policy π_φ: a residual MLP applied to each row of Ŝ (quantile_profile.hpp) independently,
//     h0 = relu(W_in · (m · Ŝ_i) + b_in)          (m · Ŝ_i: the softmax row rescaled to mean 1)
//     h_k = h_{k−1} + relu(W_k h_{k−1} + b_k),   k = 1 .. blocks
//     (α_i, β_i) = softplus(W_out h_blocks + b_out) + c_min
// i.e. the paper's 4-layer residual MLP for blocks = 2 (input layer, 2 residual blocks, output
// layer; hidden 256, Table 5). Applied row by row it is permutation equivariant over the rows,
// which the paper obtains by sorting. softplus keeps α, β > 0 and c_min (default 0.01) keeps the
// Beta density and its lgamma terms finite. The output layer starts near zero with a bias of
// softplus⁻¹(1 − c_min), so an untrained policy draws q ~ Beta(1, 1) = Uniform(0, 1).
//
// Each anchor row i gets q_i ~ Beta(α_i, β_i) (Alg. 1 line 3); instance level by default, or
// one q per batch (the paper's "instance-based false" ablation, §4.3): then a single (α, β) comes
// from the mean Ŝ row of the search space and one draw serves every pick of the batch.
//
// Training (§3.3, Alg. 2 line 8): after the model step on the batch, the reward is
//     Δ_k = L_MLM(θ_k) − L_MLM(θ_{k+1})        (same batch, same masks; computed by the trainer)
// and the policy ascends Δ · ∇ log π(q | Ŝ) (REINFORCE), implemented as descent on
//     L_π = −(Δ − b) · Σ_{i in used rows} log Beta(q_i; α_i, β_i)
// with an optional baseline b: the bias-corrected exponential moving average of the previous
// rewards, b_t = EMA_t / (1 − decay^t), EMA_t = decay · EMA_{t−1} + (1 − decay) · Δ_t (b = 0
// before the first reward; the current Δ enters b only after its own update, so the gradient stays
// unbiased). Optimizer AdamW(lr 1e-4, betas (0.9, 0.999), weight decay 0.01) (Table 5).
//
// Randomness: Beta draws are X / (X + Y) with X ~ Gamma(α), Y ~ Gamma(β) by Marsaglia–Tsang on
// counter-based uniforms (fnvlp::data::counter_random), keyed by a 64-bit key per batch and the row
// — not a torch::Generator — so a resumed run needs no generator state: the sampler derives the
// key from (seed, epoch, block, search space, batch).
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fnvlp/negatives/grouped_sampler.hpp"
#include "fnvlp/negatives/method_config.hpp"

namespace fnvlp::negatives {

// --- Beta distribution ---------------------------------------------------------------------------

// One Gamma(shape) draw (shape > 0) from the counter-based stream `key`.
double sample_gamma(double shape, uint64_t key);
// One Beta(a, b) draw in [0, 1] from the stream `key` (computed in log space: no 0/0 for tiny a,
// b).
double sample_beta(double a, double b, uint64_t key);
// Element-wise draws: alpha, beta same shape (any float dtype, any device) -> float64 CPU tensor of
// that shape; element k uses the stream hash_key({key, k}).
torch::Tensor sample_beta(const torch::Tensor& alpha, const torch::Tensor& beta, uint64_t key);

// log Beta(q; α, β) = (α − 1) log q + (β − 1) log(1 − q) − [lgamma α + lgamma β − lgamma(α + β)],
// element-wise, differentiable w.r.t. α and β. q is clamped to [1e-6, 1 − 1e-6] (a draw can round
// to 0 or 1) and cast to α's dtype.
torch::Tensor beta_log_prob(const torch::Tensor& q, const torch::Tensor& alpha,
                            const torch::Tensor& beta);

// L_π = −advantage · Σ log π(q_i) (see above).
torch::Tensor reinforce_loss(double advantage, const torch::Tensor& log_probs);

// --- policy --------------------------------------------------------------------------------------

class FalconPolicyImpl : public torch::nn::Module {
 public:
  FalconPolicyImpl(int64_t quantiles, int64_t hidden, int64_t blocks, double min_concentration);
  // Deterministic initialisation from `seed` (PyTorch Linear's default bounds ±1/sqrt(fan_in);
  // output layer scaled by 1e-2 with the Beta(1, 1) bias above).
  void reset_parameters(uint64_t seed);
  // Ŝ rows float [n, m] -> (α [n], β [n]).
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& profile);

  int64_t quantiles() const { return quantiles_; }

 private:
  int64_t quantiles_;
  double min_concentration_;
  torch::nn::Linear input_{nullptr}, output_{nullptr};
  std::vector<torch::nn::Linear> blocks_;
};
TORCH_MODULE(FalconPolicy);

// --- scheduler -----------------------------------------------------------------------------------

// The q draws of one batch, kept for the policy update.
struct FalconDraws {
  torch::Tensor inputs;       // float [n, m]: the Ŝ rows whose q was used (batch level: 1 row)
  torch::Tensor q;            // float64 [n]
  std::vector<int64_t> rows;  // local rows of the picks (batch level: every pick's row)
  bool empty() const { return !q.defined() || q.numel() == 0; }
};

class FalconScheduler : public QSource {
 public:
  explicit FalconScheduler(const FalconConfig& config);

  // QSource (called by FalconSampler while it composes a batch, trainer thread):
  // Ŝ from S: the m quantiles of each row by the similarity/ Kokkos kernel
  // (row_quantiles.hpp), then quantile_softmax.
  void begin_search_space(const torch::Tensor& S) override;
  // The same from quantile values v [M, m] computed elsewhere (the similarity/ Kokkos kernel).
  void begin_search_space_quantiles(const torch::Tensor& values);
  // Runs the policy on every row of Ŝ with the current φ (no grad) and starts a batch's draws.
  void begin_batch(uint64_t key) override;
  // q_row ~ Beta(α_row, β_row) from the stream (key, row) (batch level: the batch's single q).
  double q(int64_t row) override;

  // The batch's draws so far, cleared (call once per batch, after next()).
  FalconDraws take_draws();
  // q for given rows without going through a sampler (the same draws q(row) would give).
  torch::Tensor q_for_rows(const std::vector<int64_t>& rows, uint64_t key);

  // Policy update after the model step: zeroes the policy's gradients, then backpropagates
  // L_π for `reward` = Δ_k (advantage Δ − b), then updates b. Empty draws give zero gradients
  // (so a cross-rank gradient average stays in step) and return 0. Returns L_π.
  double loss_backward(double reward, const FalconDraws& draws);
  // One AdamW step on the current gradients (average them across ranks in between).
  void step();
  // loss_backward + step.
  double update(double reward, const FalconDraws& draws);

  std::vector<torch::Tensor> parameters() const { return policy_->parameters(); }
  FalconPolicy& policy() { return policy_; }
  torch::optim::AdamW& optimizer() { return *optimizer_; }
  const torch::Tensor& profile() const { return profile_; }  // Ŝ [M, m] of the search space
  double baseline() const;                                   // b (0 before the first reward)
  int64_t updates() const { return updates_; }
  const FalconConfig& config() const { return config_; }
  // sha256 of the policy's parameters (bitwise): equal on every rank while the replicas agree.
  std::string policy_fingerprint() const;

  // Policy, optimizer moments and baseline in one torch archive (written to a temp file, renamed).
  // The optimizer's hyper-parameters come from the config, not from the file.
  void save(const std::string& path) const;
  void load(const std::string& path);

 private:
  FalconConfig config_;
  FalconPolicy policy_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  torch::Tensor profile_;       // Ŝ [M, m]
  torch::Tensor mean_profile_;  // [1, m] (batch level)
  torch::Tensor alpha_, beta_;  // float64 CPU [M] (batch level: [1]) for the current batch
  uint64_t batch_key_ = 0;
  bool batch_open_ = false;
  double batch_q_ = 0;  // batch level
  std::vector<int64_t> rows_;
  std::vector<double> qs_;
  double ema_ = 0;
  int64_t updates_ = 0;
};

}  // namespace fnvlp::negatives
