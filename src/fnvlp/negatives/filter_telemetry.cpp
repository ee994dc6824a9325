#include "fnvlp/negatives/filter_telemetry.hpp"

#include "fnvlp/negatives/glofnd.hpp"

namespace fnvlp::negatives {

void FilterTelemetry::record(const torch::Tensor& exclude_i2t, const torch::Tensor& exclude_t2i,
                             const torch::Tensor& negative, const torch::Tensor& label_row,
                             const torch::Tensor& label_all) {
  torch::NoGradGuard no_grad;
  const auto fc_i = fn_counts(exclude_i2t, negative, label_row, label_all);
  const auto fc_t = fn_counts(exclude_t2i, negative, label_row, label_all);
  negatives_ += static_cast<double>(fc_i.negatives);
  filtered_i2t_ += static_cast<double>(fc_i.filtered);
  filtered_t2i_ += static_cast<double>(fc_t.filtered);
  filtered_same_label_ += static_cast<double>(fc_i.filtered_true + fc_t.filtered_true);
  const auto known =
      (label_row.to(torch::kLong).unsqueeze(1) >= 0) & (label_all.unsqueeze(0) >= 0) & negative;
  filtered_known_ += static_cast<double>(
      ((exclude_i2t & known).sum() + (exclude_t2i & known).sum()).item<int64_t>());
  same_label_ += static_cast<double>(fc_i.same_label_neg + fc_t.same_label_neg);
  known_ += static_cast<double>(known.sum().item<int64_t>());
}

void FilterTelemetry::report(const Comm& comm, nlohmann::json& m) {
  std::vector<double> c = {negatives_,      filtered_i2t_, filtered_t2i_, filtered_same_label_,
                           filtered_known_, same_label_,   known_};
  comm.allreduce_sum(c);
  *this = {};
  if (c[0] <= 0) return;
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  m["filtered_frac_i2t"] = ratio(c[1], c[0]);
  m["filtered_frac_t2i"] = ratio(c[2], c[0]);
  if (c[6] <= 0) return;  // no label known: no ground truth
  const double p = ratio(c[3], c[4]), r = ratio(c[3], c[5]);
  m["fn_precision"] = p;
  m["fn_recall"] = r;
  m["fn_f1"] = p + r > 0 ? 2 * p * r / (p + r) : 0.0;
}

}  // namespace fnvlp::negatives
