#include "fnvlp/negatives/filter_telemetry.hpp"

#include "fnvlp/negatives/glofnd.hpp"

namespace fnvlp::negatives {

void FilterTelemetry::record(const torch::Tensor& exclude_i2t, const torch::Tensor& exclude_t2i,
                             const torch::Tensor& negative, const torch::Tensor& label_row,
                             const torch::Tensor& label_all) {
  torch::NoGradGuard no_grad;
  // fn_count_tensor's order: filtered, filtered_true, same_label_neg, negatives.
  const auto ci = fn_count_tensor(exclude_i2t, negative, label_row, label_all);
  const auto ct = fn_count_tensor(exclude_t2i, negative, label_row, label_all);
  const auto known =
      (label_row.to(torch::kLong).unsqueeze(1) >= 0) & (label_all.unsqueeze(0) >= 0) & negative;
  const torch::Tensor step =
      torch::stack({ci[3], ci[0], ct[0], ci[1] + ct[1],
                    (exclude_i2t & known).sum() + (exclude_t2i & known).sum(), ci[2] + ct[2],
                    known.sum()})
          .to(torch::kLong);
  if (!sums_.defined()) allocate(step.device());
  sums_.add_(step);
}

void FilterTelemetry::allocate(const torch::Device& device) {
  if (!sums_.defined() || sums_.device() != device)
    sums_ = torch::zeros({7}, torch::TensorOptions().dtype(torch::kLong).device(device));
}

void FilterTelemetry::report(const Comm& comm, nlohmann::json& m) {
  std::vector<double> c(7, 0.0);
  if (sums_.defined()) {
    const torch::Tensor h = sums_.to(torch::kCPU).contiguous();
    const int64_t* v = h.data_ptr<int64_t>();
    for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<double>(v[i]);
  }
  comm.allreduce_sum(c);
  if (sums_.defined()) sums_.zero_();
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
