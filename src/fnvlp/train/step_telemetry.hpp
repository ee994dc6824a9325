#pragma once
// The pretraining loop's own telemetry: losses, throughput, phase times and the in-batch rate of
// known false negatives of every sampler (FALCON Fig. 2), summed over a logging window on each
// rank and reduced at log time into metrics.jsonl records; the run's totals for summary.json.
#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/core/timer.hpp"
#include "fnvlp/data/dataset.hpp"
#include "fnvlp/store/run_dir.hpp"

namespace fnvlp::train {

using store::MetricsWriter;
using store::RunStatus;
using store::RunSummary;

struct StepLosses {
  double itc = 0, itm = 0, mlm = 0, total = 0;
  std::vector<std::pair<std::string, double>> extra;  // the methods' losses (TCL: imc, lmi)
};

class StepTelemetry {
 public:
  explicit StepTelemetry(const Comm& comm) : comm_(comm) {}
  void start(int64_t total_steps);
  void add(const StepLosses& l, int64_t global_samples);
  // The composed batch's known false negatives (pairs sharing an image_id or a label).
  void record_batch(const data::Batch& batch);
  // Collective: the window's record (losses, lr, temperature, throughput, phase_ms, extra losses,
  // batch FN rates); resets the phase clock's sums.
  nlohmann::json window_metrics(int64_t step, int64_t epoch, double lr, double temp,
                                double data_wait, int64_t skipped, StepClock& clock);
  // Writes the record (rank 0 also logs the progress line) and starts a new window.
  void finish_window(MetricsWriter& metrics, const nlohmann::json& m);
  RunSummary summary(RunStatus status, int64_t steps, int64_t skipped) const;

 private:
  const Comm& comm_;
  int64_t total_steps_ = 0, step_ = 0;
  std::chrono::steady_clock::time_point t0_, window_start_;
  int64_t samples_ = 0, window_samples0_ = 0, window_steps_ = 0;
  double eta_s_ = 0;
  StepLosses sum_;
  // pairs of the window's batches, of those sharing an image_id, with both labels, same label
  std::vector<double> batch_fn_ = std::vector<double>(4, 0.0);
  nlohmann::json last_metrics_ = nlohmann::json::object();
};

}  // namespace fnvlp::train
