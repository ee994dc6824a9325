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
  const auto f = torch::TensorOptions().dtype(torch::kFloat).device(device_);
  const int64_t n = block.size() + 1;  // the spare slot last
  lambda_all_ = torch::full({n}, static_cast<float>(opt.init), f);
  m_all_ = torch::zeros({n}, f);
  v_all_ = torch::zeros({n}, f);
  count_all_ = torch::zeros({n}, f.dtype(torch::kInt));
  lambda_ = lambda_all_.narrow(0, 0, block.size());
  m_ = m_all_.narrow(0, 0, block.size());
  v_ = v_all_.narrow(0, 0, block.size());
  count_ = count_all_.narrow(0, 0, block.size());
  // The scalar recurrence's m / (1 − std::pow(β1, t)) and v / (1 − std::pow(β2, t)), up to the t
  // from which both are exactly 1 (about 1,850 rows at β2 = 0.98, 37,000 at 0.999).
  constexpr int64_t kMaxRows = int64_t{1} << 22;
  std::vector<double> host;
  for (int64_t t = 0;; ++t) {
    const double c1 = 1 - std::pow(opt_.beta1, static_cast<double>(t));
    const double c2 = 1 - std::pow(opt_.beta2, static_cast<double>(t));
    host.push_back(c1);
    host.push_back(c2);
    if (t > 0 && c1 == 1.0 && c2 == 1.0) {
      bias_saturated_ = t;
      break;
    }
    FNVLP_CHECK(t < kMaxRows, "glofnd: beta1 " << opt_.beta1 << " / beta2 " << opt_.beta2
                                               << " do not reach a bias correction of 1 within "
                                               << kMaxRows << " updates (too close to 1)");
  }
  bias_ = to_device_async(
      torch::tensor(host, torch::kDouble).view({static_cast<int64_t>(host.size() / 2), 2}),
      device_);
  epoch_t_ = torch::ones({1}, torch::TensorOptions().dtype(torch::kLong).device(device_));
}

void GlofndSide::set_epoch(int64_t epoch) {
  FNVLP_CHECK(epoch >= 0, "glofnd: epoch " << epoch << " < 0");
  const int64_t t = std::min(epoch + 1, bias_saturated_);
  if (t == epoch_t_host_) return;
  stage_into(epoch_t_, torch::tensor({t}, torch::kLong));
  epoch_t_host_ = t;
}

int64_t GlofndSide::local(int64_t pair_id) const {
  FNVLP_CHECK(block_.contains(pair_id),
              "glofnd: pair " << pair_id << " is outside this rank's block [" << block_.begin
                              << ", " << block_.end << "): its λ lives on another rank");
  return pair_id - block_.begin;
}

std::vector<int64_t> GlofndSide::local_indices(const std::vector<int64_t>& pair_ids) const {
  std::vector<int64_t> idx(pair_ids.size());
  for (size_t r = 0; r < pair_ids.size(); ++r) idx[r] = local(pair_ids[r]);
  return idx;
}

torch::Tensor GlofndSide::local_index(const std::vector<int64_t>& pair_ids) const {
  return to_device_async(torch::tensor(local_indices(pair_ids), torch::kLong), device_);
}

std::array<torch::Tensor, 4> GlofndSide::adam_rows(
    const torch::Tensor& lam, const torch::Tensor& m_old, const torch::Tensor& v_old,
    const torch::Tensor& c_old, const torch::Tensor& g, const torch::Tensor& ok) const {
  // Adam with per-anchor bias correction, each operation rounded as the scalar
  //   m = β1 m + (1 − β1) g;  v = β2 v + (1 − β2) g g;  t = count + 1 (visit) or epoch + 1 (epoch);
  //   λ = Π_[−1, 1](λ − lr (m / (1 − β1^t)) / (√(v / (1 − β2^t)) + ε))
  const torch::Tensor m = m_old.to(torch::kDouble) * opt_.beta1 + g * (1 - opt_.beta1);
  const torch::Tensor v = v_old.to(torch::kDouble) * opt_.beta2 + g * (1 - opt_.beta2) * g;
  const torch::Tensor t = opt_.bias_correction == GlofndBiasCorrection::kEpoch
                              ? epoch_t_.expand({c_old.size(0)})
                              : (c_old.to(torch::kLong) + 1).clamp_max(bias_saturated_);
  const torch::Tensor bc = bias_.index_select(0, t);
  const torch::Tensor m_hat = m / bc.select(1, 0), v_hat = v / bc.select(1, 1);
  const torch::Tensor next =
      (lam.to(torch::kDouble) - m_hat * opt_.lr / (v_hat.sqrt() + opt_.eps)).clamp(-1.0, 1.0);
  return {torch::where(ok, next.to(torch::kFloat), lam),
          torch::where(ok, m.to(torch::kFloat), m_old),
          torch::where(ok, v.to(torch::kFloat), v_old), torch::where(ok, c_old + 1, c_old)};
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
  const torch::Tensor sampled = n > 0;       // no negative in the batch: no subgradient sample
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
    const auto next = adam_rows(state(lambda_, lam0), state(m_, undo_m_), state(v_, undo_v_),
                                state(count_, undo_count_), gk, ok);
    lambda_.index_copy_(0, ids, next[0]);
    m_.index_copy_(0, ids, next[1]);
    v_.index_copy_(0, ids, next[2]);
    count_.index_copy_(0, ids, next[3]);
    if (rows.defined())
      last_.index_copy_(0, rows, torch::where(ok, next[0], pick(lam0)));
    else
      last_ = next[0];
  }
  return above_threshold(cos, negative, last_);
}

void GlofndSide::stage(const std::vector<int64_t>& pair_ids, int64_t rounds) {
  const auto b = static_cast<int64_t>(pair_ids.size());
  const std::vector<int64_t> idx = local_indices(pair_ids);
  std::vector<int64_t> round_index(static_cast<size_t>(rounds * b), block_.size());  // spare
  std::vector<uint8_t> in_round(static_cast<size_t>(rounds * b), 0);
  std::unordered_map<int64_t, int64_t> seen;
  for (int64_t r = 0; r < b; ++r) {
    const int64_t k = seen[idx[static_cast<size_t>(r)]]++;
    FNVLP_CHECK(k < rounds, "glofnd: pair " << pair_ids[static_cast<size_t>(r)]
                                            << " appears more than " << rounds
                                            << " times in the batch staged for " << rounds
                                            << " rounds");
    round_index[static_cast<size_t>(k * b + r)] = idx[static_cast<size_t>(r)];
    in_round[static_cast<size_t>(k * b + r)] = 1;
  }
  Staged& st = staged_[rounds];
  if (!st.index.defined() || st.index.size(0) != b) {
    const auto i64 = torch::TensorOptions().dtype(torch::kLong).device(device_);
    st.index = torch::empty({b}, i64);
    st.round_index = torch::empty({rounds, b}, i64);
    st.in_round = torch::empty({rounds, b}, i64.dtype(torch::kBool));
  }
  if (!staged_last_.defined() || staged_last_.size(0) != b)
    staged_last_ = torch::empty({b}, lambda_.options());
  stage_into(st.index, torch::tensor(idx, torch::kLong));
  stage_into(st.round_index, torch::tensor(round_index, torch::kLong).view({rounds, b}));
  stage_into(st.in_round,
             torch::tensor(in_round, torch::kUInt8).view({rounds, b}).to(torch::kBool));
  current_ = &st;
}

torch::Tensor GlofndSide::update_and_filter_staged(const torch::Tensor& cos,
                                                   const torch::Tensor& negative) {
  FNVLP_CHECK(current_ != nullptr, "glofnd: update_and_filter_staged before stage");
  const Staged& st = *current_;
  check_inputs(cos, negative, static_cast<size_t>(st.index.size(0)), device_, "glofnd");
  torch::NoGradGuard no_grad;
  const torch::Tensor lam0 = lambda_all_.index_select(0, st.index);
  undo_index_ = st.index;
  undo_lambda_ = lam0;
  undo_m_ = m_all_.index_select(0, st.index);
  undo_v_ = v_all_.index_select(0, st.index);
  undo_count_ = count_all_.index_select(0, st.index);
  const torch::Tensor n = negative.sum(1);
  const torch::Tensor g =
      opt_.alpha -
      above_threshold(cos, negative, lam0).sum(1).to(torch::kDouble) / n.to(torch::kDouble);
  const torch::Tensor sampled = n > 0;
  torch::Tensor last = lam0;
  // Every round over every row: a row outside round k reads and writes back the spare slot (the
  // same value from every such row), so the rows of round k are the only ones that change.
  for (int64_t k = 0; k < st.round_index.size(0); ++k) {
    const torch::Tensor ids = st.round_index[k];
    const torch::Tensor ok = st.in_round[k] & sampled;
    const auto next =
        adam_rows(lambda_all_.index_select(0, ids), m_all_.index_select(0, ids),
                  v_all_.index_select(0, ids), count_all_.index_select(0, ids), g, ok);
    lambda_all_.index_copy_(0, ids, next[0]);
    m_all_.index_copy_(0, ids, next[1]);
    v_all_.index_copy_(0, ids, next[2]);
    count_all_.index_copy_(0, ids, next[3]);
    last = torch::where(ok, next[0], last);
  }
  staged_last_.copy_(last);
  return above_threshold(cos, negative, last);
}

void GlofndSide::commit(const torch::Tensor& finite) {
  if (!undo_index_.defined()) return;
  torch::NoGradGuard no_grad;
  const torch::Tensor keep = finite.to(torch::kBool);
  // An anchor listed twice writes the same two values twice: the gathers below read one slot.
  const std::array<const torch::Tensor*, 4> before = {&undo_lambda_, &undo_m_, &undo_v_,
                                                      &undo_count_};
  const auto all = store();
  for (size_t i = 0; i < all.size(); ++i) {
    torch::Tensor& t = *all[i];
    t.index_copy_(0, undo_index_, torch::where(keep, t.index_select(0, undo_index_), *before[i]));
  }
  undo_index_ = undo_lambda_ = undo_m_ = undo_v_ = undo_count_ = torch::Tensor();
}

void GlofndSide::restart_from(const std::vector<float>& lambda) {
  FNVLP_CHECK(static_cast<int64_t>(lambda.size()) == block_.size(),
              "glofnd: " << lambda.size() << " starting λ for a block of " << block_.size());
  const auto next = to_device_async(torch::tensor(lambda, torch::kFloat), device_);
  lambda_.copy_(torch::where(torch::isnan(next), lambda_, next.clamp(-1.0f, 1.0f)));
  if (opt_.reanchor_moments == GlofndReanchorMoments::kReset) {
    m_.zero_();
    v_.zero_();
    count_.zero_();
  }
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
  // Into the store in place: a captured step holds its addresses.
  lambda_.copy_(d.select(1, 0));
  m_.copy_(d.select(1, 1));
  v_.copy_(d.select(1, 2));
  count_.copy_(d.select(1, 3).to(torch::kInt));
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
