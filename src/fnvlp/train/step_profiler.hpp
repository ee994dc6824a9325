#pragma once
// train.profile_steps > 0: the PyTorch profiler (Kineto) over steps [profile_start,
// profile_start + profile_steps) of rank 0: host operators, and on a GPU its kernels, copies and
// synchronisations, saved as a Chrome trace (RUN/profile/trace-rank0.json; chrome://tracing or
// Perfetto opens it, tests/bench/trace_summary.py sums it). Where the GPU step's time goes is
// read off one run instead of guessed from throughputs. Needs libtorch 2.x (the GPU build): with
// 1.13 a run that asks for it is a usage error.
#include <cstdint>
#include <memory>
#include <string>

namespace fnvlp::train {

class StepProfiler {
 public:
  // steps == 0 or a rank other than 0: does nothing.
  StepProfiler(int64_t start, int64_t steps, std::string path, int rank);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;
  void before_step(int64_t step);  // starts recording at `start`
  void after_step(int64_t step);   // stops and writes the trace after the last profiled step

 private:
  void stop();
  int64_t start_, end_;
  std::string path_;
  bool on_ = false, enabled_;
};

}  // namespace fnvlp::train
