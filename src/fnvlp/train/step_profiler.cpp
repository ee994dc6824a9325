#include "fnvlp/train/step_profiler.hpp"

#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <filesystem>
#include <set>

#include "fnvlp/comm/job_main.hpp"

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/autograd/profiler_kineto.h>
#endif

namespace fnvlp::train {

StepProfiler::StepProfiler(int64_t start, int64_t steps, std::string path, int rank)
    : start_(start), end_(start + steps), path_(std::move(path)), enabled_(steps > 0 && rank == 0) {
  if (steps > 0 && TORCH_VERSION_MAJOR < 2)
    throw UsageError(
        "train.profile_steps needs libtorch 2.x (the GPU build, FNVLP_GPU=1 "
        "env/build.sh); this build has libtorch " TORCH_VERSION);
}

StepProfiler::~StepProfiler() {
  if (!on_) return;
  try {  // a step that threw while profiling: the trace of what ran, if it can be written
    stop();
  } catch (const std::exception& e) {
    spdlog::warn("pretrain: profile not written: {}", e.what());
  }
}

#if TORCH_VERSION_MAJOR >= 2
namespace {
std::set<torch::profiler::impl::ActivityType> activities() {
  std::set<torch::profiler::impl::ActivityType> a{torch::profiler::impl::ActivityType::CPU};
  if (torch::cuda::is_available()) a.insert(torch::profiler::impl::ActivityType::CUDA);
  return a;
}
torch::profiler::impl::ProfilerConfig config() {
  return torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::KINETO,
                                               /*report_input_shapes=*/false);
}
}  // namespace
#endif

void StepProfiler::before_step(int64_t step) {
  if (!enabled_ || on_ || step != start_) return;
#if TORCH_VERSION_MAJOR >= 2
  if (torch::cuda::is_available()) torch::cuda::synchronize();  // earlier steps' kernels out
  torch::autograd::profiler::prepareProfiler(config(), activities());
  torch::autograd::profiler::enableProfiler(config(), activities());
  on_ = true;
  spdlog::info("pretrain: profiling steps {} to {} -> {}", start_, end_ - 1, path_);
#endif
}

void StepProfiler::after_step(int64_t step) {
  if (on_ && step + 1 >= end_) stop();
}

void StepProfiler::stop() {
#if TORCH_VERSION_MAJOR >= 2
  on_ = false;
  enabled_ = false;
  if (torch::cuda::is_available()) torch::cuda::synchronize();  // the last step's kernels in
  auto result = torch::autograd::profiler::disableProfiler();
  std::filesystem::create_directories(std::filesystem::path(path_).parent_path());
  result->save(path_);
  spdlog::info("pretrain: profile of {} steps written to {}", end_ - start_, path_);
#endif
}

}  // namespace fnvlp::train
