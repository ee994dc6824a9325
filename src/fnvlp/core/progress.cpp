#include "fnvlp/core/progress.hpp"

#include <atomic>

#include "fnvlp/core/fault.hpp"

namespace fnvlp {

namespace {
std::atomic<ProgressHook> g_hook{nullptr};
}  // namespace

void progress(const char* what) {
  if (const ProgressHook hook = g_hook.load(std::memory_order_acquire)) hook(what);
  fault::point("progress.sleep", -1, what);
}

ProgressHook set_progress_hook(ProgressHook hook) {
  return g_hook.exchange(hook, std::memory_order_acq_rel);
}

}  // namespace fnvlp
