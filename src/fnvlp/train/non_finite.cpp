#include "fnvlp/train/non_finite.hpp"

#include <spdlog/spdlog.h>

#include <cmath>
#include <string>

namespace fnvlp::train {

bool all_finite(const Comm& comm, double local_loss) {
  return comm.all_ok(std::isfinite(local_loss));
}

SkipCounter::SkipCounter(int64_t max_consecutive) : max_consecutive_(max_consecutive) {
  FNVLP_CHECK(max_consecutive >= 1,
              "non-finite guard: max_consecutive must be >= 1, got " << max_consecutive);
}

void SkipCounter::record(bool skipped, int64_t step) {
  if (!skipped) {
    consecutive_ = 0;
    return;
  }
  ++total_;
  ++consecutive_;
  spdlog::warn(
      "step {}: non-finite loss on at least one rank; optimizer step skipped ({} in a row, "
      "{} in total)",
      step, consecutive_, total_);
  if (consecutive_ >= max_consecutive_)
    throw CollectiveError("non-finite loss for " + std::to_string(consecutive_) +
                          " consecutive steps (last: step " + std::to_string(step) +
                          "; limit max_consecutive = " + std::to_string(max_consecutive_) +
                          "): training diverged");
}

}  // namespace fnvlp::train
