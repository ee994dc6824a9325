#include "fnvlp/negatives/glofnd.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "fnvlp/core/device_copy.hpp"
#include "fnvlp/core/error.hpp"

namespace fnvlp::negatives {

namespace {

void check_inputs(const torch::Tensor& cos, const torch::Tensor& negative, size_t rows,
                  const torch::Device& device, const char* what) {
  FNVLP_CHECK(
      cos.dim() == 2 && negative.sizes() == cos.sizes() && negative.scalar_type() == torch::kBool,
      what << ": expected cos [b, N] float and negative [b, N] bool, got " << cos.sizes() << " and "
           << negative.sizes());
  FNVLP_CHECK(static_cast<size_t>(cos.size(0)) == rows,
              what << ": " << cos.size(0) << " rows but " << rows << " pair_ids");
  FNVLP_CHECK(cos.device() == device && negative.device() == device,
              what << ": similarities on " << cos.device() << ", mask on " << negative.device()
                   << ", state on " << device);
}

// lam: float [b] on the masks' device.
torch::Tensor above_threshold(const torch::Tensor& cos, const torch::Tensor& negative,
                              const torch::Tensor& lam) {
  return negative & (cos.to(torch::kFloat) > lam.unsqueeze(1));
}

}  // namespace

GlofndSide::GlofndSide(data::PairRange block, const GlofndOptions& opt, torch::Device device)
    : block_(block), opt_(opt), device_(resolved_device(device)) {
  FNVLP_CHECK(opt.alpha >= 0 && opt.alpha <= 1, "glofnd: alpha " << opt.alpha << " not in [0, 1]");
  FNVLP_CHECK(opt.lr > 0, "glofnd: lr must be > 0, got " << opt.lr);
  FNVLP_CHECK(opt.init >= -1 && opt.init <= 1, "glofnd: init " << opt.init << " not in [-1, 1]");
  const auto f = torch::TensorOptions().dtype(torch::kFloat).device(device);
  lambda_ = torch::full({block.size()}, static_cast<float>(opt.init), f);
  m_ = torch::zeros({block.size()}, f);
  v_ = torch::zeros({block.size()}, f);
  count_ = torch::zeros({block.size()}, f.dtype(torch::kInt));
}

int64_t GlofndSide::local(int64_t pair_id) const {
  FNVLP_CHECK(block_.contains(pair_id),
              "glofnd: pair " << pair_id << " is outside this rank's block [" << block_.begin
                              << ", " << block_.end << "): its λ lives on another rank");
  return pair_id - block_.begin;
}

torch::Tensor GlofndSide::local_index(const std::vector<int64_t>& pair_ids) const {
  std::vector<int64_t> idx(pair_ids.size());
  for (size_t r = 0; r < pair_ids.size(); ++r) idx[r] = local(pair_ids[r]);
  return to_device_async(torch::tensor(idx, torch::kLong), device_);
}

const torch::Tensor& GlofndSide::bias_table(int64_t visits) {
  count_bound_ += visits;
  int64_t need = count_bound_ + 1;
  if (bias_saturated_ >= 0) need = std::min(need, bias_saturated_ + 1);
  if (bias_.defined() && bias_.size(0) >= need) return bias_;
  // Grown geometrically: a new table is one host-to-device copy, not one per step.
  const int64_t rows = std::max<int64_t>({need, 64, bias_.defined() ? 2 * bias_.size(0) : 0});
  std::vector<double> host;
  host.reserve(static_cast<size_t>(2 * rows));
  for (int64_t t = 0; t < rows; ++t) {
    // The scalar recurrence's m / (1 − std::pow(β1, t)) and v / (1 − std::pow(β2, t)).
    const double c1 = 1 - std::pow(opt_.beta1, static_cast<double>(t));
    const double c2 = 1 - std::pow(opt_.beta2, static_cast<double>(t));
    host.push_back(c1);
    host.push_back(c2);
    if (t > 0 && c1 == 1.0 && c2 == 1.0) {  // β^t only shrinks: 1 from here on
      bias_saturated_ = t;
      break;
    }
  }
  const auto n = static_cast<int64_t>(host.size() / 2);
  bias_ = to_device_async(torch::tensor(host, torch::kDouble).view({n, 2}), device_);
  return bias_;
}

torch::Tensor GlofndSide::update_and_filter(const torch::Tensor& cos, const torch::Tensor& negative,
                                            const std::vector<int64_t>& pair_ids) {
  check_inputs(cos, negative, pair_ids.size(), device_, "glofnd");
  torch::NoGradGuard no_grad;
  // An anchor's k-th row in this call is updated in round k, after its earlier rows.
  std::vector<int64_t> occurrence(pair_ids.size());
  int64_t rounds = 0;
  std::unordered_map<int64_t, int64_t> seen;
  for (size_t r = 0; r < pair_ids.size(); ++r) {
    occurrence[r] = seen[pair_ids[r]]++;
    rounds = std::max(rounds, occurrence[r] + 1);
  }
  const torch::Tensor idx = local_index(pair_ids);
  const torch::Tensor lam0 = lambda_.index_select(0, idx);
  undo_index_ = idx;
  undo_lambda_ = lam0;
  undo_m_ = m_.index_select(0, idx);
  undo_v_ = v_.index_select(0, idx);
  undo_count_ = count_.index_select(0, idx);

  // ∇̂_i = α − (1/|B_i⁻|) Σ 1[sim > λ_i]   (§3.2.1), against λ from before the call.
  const torch::Tensor n = negative.sum(1);
  const torch::Tensor g =
      opt_.alpha -
      above_threshold(cos, negative, lam0).sum(1).to(torch::kDouble) / n.to(torch::kDouble);
  const torch::Tensor sampled = n > 0;  // no negative in the batch: no subgradient sample
  const torch::Tensor& bias = bias_table(rounds);
  last_ = rounds > 1 ? lam0.clone() : lam0;  // one round replaces it whole
  for (int64_t k = 0; k < rounds; ++k) {
    torch::Tensor rows;  // undefined: every row
    if (rounds > 1) {
      std::vector<int64_t> r_k;
      for (size_t r = 0; r < occurrence.size(); ++r)
        if (occurrence[r] == k) r_k.push_back(static_cast<int64_t>(r));
      rows = to_device_async(torch::tensor(r_k, torch::kLong), device_);
    }
    auto pick = [&](const torch::Tensor& t) {
      return rows.defined() ? t.index_select(0, rows) : t;
    };
    const torch::Tensor ids = pick(idx), gk = pick(g), ok = pick(sampled);
    // Round 0 reads the state as the undo copies hold it; later rounds what earlier ones wrote.
    const auto state = [&](const torch::Tensor& t, const torch::Tensor& before) {
      return k == 0 ? pick(before) : t.index_select(0, ids);
    };
    const torch::Tensor lam = state(lambda_, lam0), m_old = state(m_, undo_m_),
                        v_old = state(v_, undo_v_), c_old = state(count_, undo_count_);
    // Adam with per-anchor bias correction, each operation rounded as the scalar
    //   m = β1 m + (1 − β1) g;  v = β2 v + (1 − β2) g g;  t = count + 1;
    //   λ = Π_[−1, 1](λ − lr (m / (1 − β1^t)) / (√(v / (1 − β2^t)) + ε))
    const torch::Tensor m = m_old.to(torch::kDouble) * opt_.beta1 + gk * (1 - opt_.beta1);
    const torch::Tensor v = v_old.to(torch::kDouble) * opt_.beta2 + gk * (1 - opt_.beta2) * gk;
    torch::Tensor t = c_old.to(torch::kLong) + 1;
    if (bias_saturated_ >= 0) t = t.clamp_max(bias_saturated_);
    const torch::Tensor bc = bias.index_select(0, t);
    const torch::Tensor m_hat = m / bc.select(1, 0), v_hat = v / bc.select(1, 1);
    const torch::Tensor next =
        (lam.to(torch::kDouble) - m_hat * opt_.lr / (v_hat.sqrt() + opt_.eps)).clamp(-1.0, 1.0);
    const torch::Tensor lam_new = torch::where(ok, next.to(torch::kFloat), lam);
    lambda_.index_copy_(0, ids, lam_new);
    m_.index_copy_(0, ids, torch::where(ok, m.to(torch::kFloat), m_old));
    v_.index_copy_(0, ids, torch::where(ok, v.to(torch::kFloat), v_old));
    count_.index_copy_(0, ids, torch::where(ok, c_old + 1, c_old));
    if (rows.defined())
      last_.index_copy_(0, rows, torch::where(ok, lam_new, lam0.index_select(0, rows)));
    else
      last_ = lam_new;
  }
  return above_threshold(cos, negative, last_);
}

void GlofndSide::restart_from(const std::vector<float>& lambda) {
  FNVLP_CHECK(static_cast<int64_t>(lambda.size()) == block_.size(),
              "glofnd: " << lambda.size() << " starting λ for a block of " << block_.size());
  const auto next = to_device_async(torch::tensor(lambda, torch::kFloat), device_);
  lambda_ = torch::where(torch::isnan(next), lambda_, next.clamp(-1.0f, 1.0f));
  m_.zero_();
  v_.zero_();
  count_.zero_();
  undo_index_ = torch::Tensor();
}

void GlofndSide::undo_last_update() {
  if (!undo_index_.defined()) return;
  // Values gathered before the update: an anchor listed twice gets the same values twice.
  lambda_.index_copy_(0, undo_index_, undo_lambda_);
  m_.index_copy_(0, undo_index_, undo_m_);
  v_.index_copy_(0, undo_index_, undo_v_);
  count_.index_copy_(0, undo_index_, undo_count_);
  undo_index_ = undo_lambda_ = undo_m_ = undo_v_ = undo_count_ = torch::Tensor();
}

torch::Tensor GlofndSide::filter(const torch::Tensor& cos, const torch::Tensor& negative,
                                 const std::vector<int64_t>& pair_ids) const {
  check_inputs(cos, negative, pair_ids.size(), device_, "glofnd");
  torch::NoGradGuard no_grad;
  return above_threshold(cos, negative, lambda_.index_select(0, local_index(pair_ids)));
}

float GlofndSide::lambda(int64_t pair_id) const { return lambda_[local(pair_id)].item<float>(); }

std::vector<float> GlofndSide::lambdas() const {
  const auto h = lambda_.to(torch::kCPU).contiguous();
  return {h.data_ptr<float>(), h.data_ptr<float>() + h.numel()};
}

size_t GlofndSide::state_bytes() const {
  return lambda_.nbytes() + m_.nbytes() + v_.nbytes() + count_.nbytes();
}

std::vector<float> GlofndSide::export_rows() const {
  // The count as float: exact below 2^24 updates per anchor.
  const auto h =
      torch::stack({lambda_, m_, v_, count_.to(torch::kFloat)}, 1).to(torch::kCPU).contiguous();
  return {h.data_ptr<float>(), h.data_ptr<float>() + h.numel()};
}

void GlofndSide::import_rows(const std::vector<float>& rows) {
  FNVLP_CHECK(static_cast<int64_t>(rows.size()) == block_.size() * kCols,
              "glofnd: checkpoint state has " << rows.size() << " values, expected "
                                              << block_.size() * kCols);
  const auto h = torch::tensor(rows, torch::kFloat).view({block_.size(), kCols});
  const auto d = h.to(device_);
  lambda_ = d.select(1, 0).contiguous();
  m_ = d.select(1, 1).contiguous();
  v_ = d.select(1, 2).contiguous();
  count_ = d.select(1, 3).to(torch::kInt).contiguous();
  count_bound_ = 0;
  for (size_t i = 3; i < rows.size(); i += kCols)
    count_bound_ = std::max(count_bound_, static_cast<int64_t>(rows[i]));
  undo_index_ = torch::Tensor();
}

torch::Tensor fnc_filter(const torch::Tensor& cos, const torch::Tensor& negative, double alpha) {
  FNVLP_CHECK(alpha >= 0 && alpha <= 1, "fnc: alpha " << alpha << " not in [0, 1]");
  FNVLP_CHECK(cos.dim() == 2 && negative.sizes() == cos.sizes() &&
                  negative.scalar_type() == torch::kBool && negative.device() == cos.device(),
              "fnc: expected cos and a bool negative mask of equal shape [b, N], one device");
  torch::NoGradGuard no_grad;
  // Each row's negatives by similarity, descending, ties by column (a stable sort); the others
  // last. + 0 makes −0 and +0 one key, as they are for a comparison.
  const auto key =
      torch::where(negative, cos.to(torch::kFloat) + 0.0f, -std::numeric_limits<float>::infinity());
  const auto order = std::get<1>(key.sort(/*stable=*/true, /*dim=*/1, /*descending=*/true));
  const auto rank = torch::empty_like(order).scatter_(
      1, order, torch::arange(cos.size(1), order.options()).expand_as(order));
  // k = ⌈α · n_neg⌉ (GloFND §4, FNC baseline); with α > 0 at least one negative goes.
  const auto k = torch::ceil(negative.sum(1).to(torch::kDouble) * alpha).to(torch::kLong);
  return negative & (rank < k.unsqueeze(1));
}

torch::Tensor fn_count_tensor(const torch::Tensor& exclude, const torch::Tensor& negative,
                              const torch::Tensor& label_row, const torch::Tensor& label_col) {
  const auto lr = label_row.to(torch::kLong).unsqueeze(1);
  const auto lc = label_col.to(torch::kLong).unsqueeze(0);
  const auto same = (lr == lc) & (lr >= 0) & negative;
  return torch::stack(
             {(exclude & negative).sum(), (exclude & same).sum(), same.sum(), negative.sum()})
      .to(torch::kLong);
}

FnCounts fn_counts(const torch::Tensor& exclude, const torch::Tensor& negative,
                   const torch::Tensor& label_row, const torch::Tensor& label_col) {
  const auto t =
      fn_count_tensor(exclude, negative, label_row, label_col).to(torch::kCPU).contiguous();
  const int64_t* v = t.data_ptr<int64_t>();
  return {v[0], v[1], v[2], v[3]};
}

}  // namespace fnvlp::negatives
