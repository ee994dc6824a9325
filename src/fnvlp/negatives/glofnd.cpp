#include "fnvlp/negatives/glofnd.hpp"

#include <algorithm>
#include <cmath>

#include "fnvlp/core/device_copy.hpp"
#include "fnvlp/core/error.hpp"

namespace fnvlp::negatives {

namespace {

void check_inputs(const torch::Tensor& cos, const torch::Tensor& negative, size_t rows,
                  const char* what) {
  FNVLP_CHECK(
      cos.dim() == 2 && negative.sizes() == cos.sizes() && negative.scalar_type() == torch::kBool,
      what << ": expected cos [b, N] float and negative [b, N] bool, got " << cos.sizes() << " and "
           << negative.sizes());
  FNVLP_CHECK(static_cast<size_t>(cos.size(0)) == rows,
              what << ": " << cos.size(0) << " rows but " << rows << " pair_ids");
}

torch::Tensor above_threshold(const torch::Tensor& cos, const torch::Tensor& negative,
                              const std::vector<float>& lam) {
  const auto t = to_device_async(torch::tensor(lam, torch::kFloat), cos.device()).unsqueeze(1);
  return negative & (cos.to(torch::kFloat) > t);
}

}  // namespace

GlofndSide::GlofndSide(data::PairRange block, const GlofndOptions& opt)
    : block_(block),
      opt_(opt),
      lambda_(static_cast<size_t>(block.size()), static_cast<float>(opt.init)),
      m_(static_cast<size_t>(block.size()), 0.0f),
      v_(static_cast<size_t>(block.size()), 0.0f),
      count_(static_cast<size_t>(block.size()), 0) {
  FNVLP_CHECK(opt.alpha >= 0 && opt.alpha <= 1, "glofnd: alpha " << opt.alpha << " not in [0, 1]");
  FNVLP_CHECK(opt.lr > 0, "glofnd: lr must be > 0, got " << opt.lr);
  FNVLP_CHECK(opt.init >= -1 && opt.init <= 1, "glofnd: init " << opt.init << " not in [-1, 1]");
}

int64_t GlofndSide::local(int64_t pair_id) const {
  FNVLP_CHECK(block_.contains(pair_id),
              "glofnd: pair " << pair_id << " is outside this rank's block [" << block_.begin
                              << ", " << block_.end << "): its λ lives on another rank");
  return pair_id - block_.begin;
}

torch::Tensor GlofndSide::update_and_filter(const torch::Tensor& cos, const torch::Tensor& negative,
                                            const std::vector<int64_t>& pair_ids) {
  check_inputs(cos, negative, pair_ids.size(), "glofnd");
  std::vector<float> lam(pair_ids.size());
  for (size_t r = 0; r < pair_ids.size(); ++r) lam[r] = lambda_[local(pair_ids[r])];
  // Both counts in one copy: on a GPU each copy to the host waits for the queued work.
  const auto counts = torch::stack({above_threshold(cos, negative, lam).sum(1), negative.sum(1)})
                          .to(torch::kCPU, torch::kLong)
                          .contiguous();
  const int64_t* a = counts.data_ptr<int64_t>();
  const int64_t* n = a + counts.size(1);
  undo_.clear();
  for (size_t r = 0; r < pair_ids.size(); ++r) {
    if (n[r] == 0) continue;  // no negative in the batch: no subgradient sample
    const size_t i = static_cast<size_t>(local(pair_ids[r]));
    undo_.push_back({i, lambda_[i], m_[i], v_[i], count_[i]});
    // ∇̂_i = α − (1/|B_i⁻|) Σ 1[sim > λ_i]   (§3.2.1), then Adam with per-anchor bias correction.
    const double g = opt_.alpha - static_cast<double>(a[r]) / static_cast<double>(n[r]);
    const double m = opt_.beta1 * m_[i] + (1 - opt_.beta1) * g;
    const double v = opt_.beta2 * v_[i] + (1 - opt_.beta2) * g * g;
    const int32_t t = ++count_[i];
    const double m_hat = m / (1 - std::pow(opt_.beta1, t));
    const double v_hat = v / (1 - std::pow(opt_.beta2, t));
    const double next = lambda_[i] - opt_.lr * m_hat / (std::sqrt(v_hat) + opt_.eps);
    m_[i] = static_cast<float>(m);
    v_[i] = static_cast<float>(v);
    lambda_[i] = static_cast<float>(std::clamp(next, -1.0, 1.0));  // Π_[−1, 1]
    lam[r] = lambda_[i];
  }
  return above_threshold(cos, negative, lam);
}

void GlofndSide::restart_from(const std::vector<float>& lambda) {
  FNVLP_CHECK(lambda.size() == lambda_.size(),
              "glofnd: " << lambda.size() << " starting λ for a block of " << lambda_.size());
  for (size_t i = 0; i < lambda.size(); ++i) {
    if (!std::isnan(lambda[i])) lambda_[i] = std::clamp(lambda[i], -1.0f, 1.0f);
    m_[i] = v_[i] = 0.0f;
    count_[i] = 0;
  }
  undo_.clear();
}

void GlofndSide::undo_last_update() {
  // Newest first: an anchor twice in one update gets its state from before the first.
  for (auto it = undo_.rbegin(); it != undo_.rend(); ++it) {
    lambda_[it->i] = it->lambda;
    m_[it->i] = it->m;
    v_[it->i] = it->v;
    count_[it->i] = it->count;
  }
  undo_.clear();
}

torch::Tensor GlofndSide::filter(const torch::Tensor& cos, const torch::Tensor& negative,
                                 const std::vector<int64_t>& pair_ids) const {
  check_inputs(cos, negative, pair_ids.size(), "glofnd");
  std::vector<float> lam(pair_ids.size());
  for (size_t r = 0; r < pair_ids.size(); ++r) lam[r] = lambda_[local(pair_ids[r])];
  return above_threshold(cos, negative, lam);
}

size_t GlofndSide::state_bytes() const {
  return lambda_.capacity() * sizeof(float) + m_.capacity() * sizeof(float) +
         v_.capacity() * sizeof(float) + count_.capacity() * sizeof(int32_t);
}

std::vector<float> GlofndSide::export_rows() const {
  std::vector<float> rows(lambda_.size() * kCols);
  for (size_t i = 0; i < lambda_.size(); ++i) {
    rows[i * kCols + 0] = lambda_[i];
    rows[i * kCols + 1] = m_[i];
    rows[i * kCols + 2] = v_[i];
    rows[i * kCols + 3] = static_cast<float>(count_[i]);  // exact below 2^24 updates per anchor
  }
  return rows;
}

void GlofndSide::import_rows(const std::vector<float>& rows) {
  FNVLP_CHECK(rows.size() == lambda_.size() * kCols, "glofnd: checkpoint state has "
                                                         << rows.size() << " values, expected "
                                                         << lambda_.size() * kCols);
  for (size_t i = 0; i < lambda_.size(); ++i) {
    lambda_[i] = rows[i * kCols + 0];
    m_[i] = rows[i * kCols + 1];
    v_[i] = rows[i * kCols + 2];
    count_[i] = static_cast<int32_t>(rows[i * kCols + 3]);
  }
}

torch::Tensor fnc_filter(const torch::Tensor& cos, const torch::Tensor& negative, double alpha) {
  FNVLP_CHECK(alpha >= 0 && alpha <= 1, "fnc: alpha " << alpha << " not in [0, 1]");
  FNVLP_CHECK(cos.dim() == 2 && negative.sizes() == cos.sizes(),
              "fnc: expected cos and negative of equal shape [b, N]");
  // One copy to the host for both (the mask as 0/1 floats).
  const auto both =
      torch::stack({cos.to(torch::kFloat), negative.to(torch::kFloat)}).to(torch::kCPU);
  const auto c = both[0].contiguous();
  const auto neg = both[1].to(torch::kBool).contiguous();
  auto out = torch::zeros(cos.sizes(), torch::kBool);
  const int64_t b = c.size(0), n = c.size(1);
  const float* cp = c.data_ptr<float>();
  const bool* np = neg.data_ptr<bool>();
  bool* op = out.data_ptr<bool>();
  std::vector<int64_t> cols;
  for (int64_t r = 0; r < b; ++r) {
    cols.clear();
    for (int64_t j = 0; j < n; ++j)
      if (np[r * n + j]) cols.push_back(j);
    // k = ⌈α · n_neg⌉ (GloFND §4, FNC baseline); with α > 0 at least one negative goes.
    const auto k = static_cast<int64_t>(std::ceil(alpha * static_cast<double>(cols.size())));
    if (k == 0) continue;
    const float* row = cp + r * n;
    std::partial_sort(cols.begin(), cols.begin() + k, cols.end(), [&](int64_t x, int64_t y) {
      return row[x] > row[y] || (row[x] == row[y] && x < y);
    });
    for (int64_t i = 0; i < k; ++i) op[r * n + cols[i]] = true;
  }
  return to_device_async(out, cos.device());
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
