#include "fnvlp/train/step_telemetry.hpp"

#include <spdlog/spdlog.h>

#include "fnvlp/comm/tensors.hpp"
#include "fnvlp/negatives/fn_rate.hpp"
#include "fnvlp/train/signals.hpp"

namespace fnvlp::train {

using json = nlohmann::json;

void StepTelemetry::start(int64_t total_steps) {
  total_steps_ = total_steps;
  t0_ = window_start_ = std::chrono::steady_clock::now();
}

void StepTelemetry::add(const StepLosses& l, int64_t global_samples) {
  sum_.itc += l.itc;
  sum_.itm += l.itm;
  sum_.mlm += l.mlm;
  sum_.total += l.total;
  if (sum_.extra.empty())
    sum_.extra = l.extra;
  else
    for (size_t i = 0; i < l.extra.size(); ++i) sum_.extra[i].second += l.extra[i].second;
  samples_ += global_samples;
  ++window_steps_;
  ++step_;
}

void StepTelemetry::record_batch(const data::Batch& batch) {
  const negatives::BatchFnRate r =
      negatives::batch_false_negative_rate(to_vector(batch.image_id), to_vector(batch.label));
  batch_fn_[0] += static_cast<double>(r.negatives);
  if (r.negatives > 0) batch_fn_[1] += r.image * static_cast<double>(r.negatives);
  batch_fn_[2] += static_cast<double>(r.labelled);
  if (r.labelled > 0) batch_fn_[3] += r.label * static_cast<double>(r.labelled);
}

json StepTelemetry::window_metrics(int64_t step, int64_t epoch, double lr, double temp,
                                   double data_wait, int64_t skipped, StepClock& clock) {
  const auto n = static_cast<double>(window_steps_);
  // One reduction for the losses, the data wait and the mean ms per step of each phase.
  std::vector<double> v = {sum_.itc / n, sum_.itm / n, sum_.mlm / n, sum_.total / n, data_wait};
  const size_t ph0 = v.size();
  for (double x : clock.seconds) v.push_back(x * 1e3 / n);
  comm_.allreduce_mean(v);
  std::fill(clock.seconds.begin(), clock.seconds.end(), 0.0);
  const auto now = std::chrono::steady_clock::now();
  const double dt = std::chrono::duration<double>(now - window_start_).count();
  const double sps = dt > 0 ? static_cast<double>(samples_ - window_samples0_) / dt : 0;
  json m = {{"step", step},
            {"epoch", epoch},
            {"itc", v[0]},
            {"itm", v[1]},
            {"mlm", v[2]},
            {"loss", v[3]},
            {"lr", lr},
            {"temp", temp},
            {"samples_per_s", sps},
            {"samples_per_s_per_rank", sps / comm_.size()},
            {"data_wait", v[4]},
            {"skipped_steps", skipped},
            {"elapsed_s", std::chrono::duration<double>(now - t0_).count()}};
  json phase_ms = json::object();
  for (int i = 0; i < StepClock::kCount; ++i)
    phase_ms[StepClock::kNames[i]] = v[ph0 + static_cast<size_t>(i)];
  m["phase_ms"] = phase_ms;
  if (!sum_.extra.empty()) {
    std::vector<double> e;
    for (const auto& [name, s] : sum_.extra) e.push_back(s / n);
    comm_.allreduce_mean(e);
    for (size_t i = 0; i < e.size(); ++i) m[sum_.extra[i].first] = e[i];
  }
  std::vector<double> c = batch_fn_;
  comm_.allreduce_sum(c);
  std::fill(batch_fn_.begin(), batch_fn_.end(), 0.0);
  if (c[0] > 0) m["batch_fn_rate_image"] = c[1] / c[0];
  if (c[2] > 0) m["batch_fn_rate_label"] = c[3] / c[2];
  eta_s_ = dt > 0 ? static_cast<double>(total_steps_ - step) * dt / n : 0;
  return m;
}

void StepTelemetry::finish_window(MetricsWriter& metrics, const json& m) {
  metrics.write(m);
  last_metrics_ = m;
  if (comm_.is_root()) {
    std::string fn;
    for (const char* k : {"filtered_frac_i2t", "lambda_image_mean", "fn_precision", "fn_recall",
                          "batch_fn_rate_label", "q_mean", "falcon_reward", "imc", "lmi"})
      if (m.contains(k)) fn += fmt::format(" {}={:.4f}", k, m[k].get<double>());
    const double sps = m["samples_per_s"].get<double>();
    spdlog::info(
        "step={} epoch={} itc={:.4f} itm={:.4f} mlm={:.4f} lr={:.3e} samples/s={:.1f} "
        "samples/s/rank={:.1f} eta={:.0f}s data_wait={:.1f}%{}",
        m["step"].get<int64_t>(), m["epoch"].get<int64_t>(), m["itc"].get<double>(),
        m["itm"].get<double>(), m["mlm"].get<double>(), m["lr"].get<double>(), sps,
        sps / comm_.size(), eta_s_, 100 * m["data_wait"].get<double>(), fn);
  }
  sum_ = {};
  window_steps_ = 0;
  window_samples0_ = samples_;
  window_start_ = std::chrono::steady_clock::now();
}

RunSummary StepTelemetry::summary(RunStatus status, int64_t steps, int64_t skipped) const {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  RunSummary s;
  s.status = status;
  s.exit_code = status == RunStatus::kPreempted ? kExitRequeue : 0;
  s.steps = steps;
  s.samples = samples_;
  s.seconds = seconds;
  s.skipped_steps = skipped;
  s.final_metrics = last_metrics_;
  s.extra = {{"samples_per_second", seconds > 0 ? static_cast<double>(samples_) / seconds : 0.0}};
  return s;
}

}  // namespace fnvlp::train
