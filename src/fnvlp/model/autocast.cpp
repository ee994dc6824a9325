#include "fnvlp/model/autocast.hpp"

#include "fnvlp/core/error.hpp"

#if FNVLP_WITH_CUDA
#include <ATen/autocast_mode.h>
#endif

namespace fnvlp::model {

#if FNVLP_WITH_CUDA
bool begin_bf16_autocast() {
  const bool previous = at::autocast::is_autocast_enabled(at::kCUDA);
  at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  at::autocast::increment_nesting();
  return previous;
}

void end_bf16_autocast(bool previous) {
  // The cast weights are cached while autocast is on; freed when the outermost scope ends.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(at::kCUDA, previous);
}

AutocastCache::AutocastCache(bool enabled) : enabled_(enabled) {
  if (enabled_) at::autocast::increment_nesting();
}

AutocastCache::~AutocastCache() {
  if (enabled_ && at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
}
#else
AutocastCache::AutocastCache(bool enabled) : enabled_(enabled) {
  FNVLP_CHECK(!enabled, "bf16 autocast needs the CUDA build (FNVLP_GPU=1 env/build.sh)");
}
AutocastCache::~AutocastCache() = default;

bool begin_bf16_autocast() {
  FNVLP_FAIL("bf16 autocast needs the CUDA build (FNVLP_GPU=1 env/build.sh)");
}
void end_bf16_autocast(bool) {}
#endif

}  // namespace fnvlp::model
