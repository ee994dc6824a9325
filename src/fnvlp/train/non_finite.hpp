#pragma once
// The non-finite loss guard of the trainer: a step whose loss is not finite on some rank is
// skipped on every rank at once, and too many in a row end the run.
#include <cstdint>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/core/config_fields.hpp"

namespace fnvlp::train {

struct NonFiniteConfig {
  // clang-format off
  FNVLP_CONFIG_FIELDS(
      // this many skipped steps in a row end the run
      (int64_t, max_consecutive, 10, config::at_least(1)))
  // clang-format on
};

// Collective: true on every rank when every rank's loss is finite. When false, every rank skips
// the optimizer step (no rank may apply an update the others do not).
bool all_finite(const Comm& comm, double local_loss);

// Counts skipped steps. Fed with all_finite()'s agreed answer, it behaves identically on every
// rank, so its error is a CollectiveError: every rank throws it at the same step and the job exits
// cleanly with one message.
class SkipCounter {
 public:
  explicit SkipCounter(int64_t max_consecutive);
  // Records one step; throws CollectiveError on the max_consecutive-th skip in a row.
  void record(bool skipped, int64_t step);
  int64_t total() const { return total_; }
  int64_t consecutive() const { return consecutive_; }
  // Restores the total after a resume (the count lives in the trainer state of a checkpoint).
  void set_total(int64_t total) { total_ = total; }

 private:
  int64_t max_consecutive_;
  int64_t total_ = 0;
  int64_t consecutive_ = 0;
};

}  // namespace fnvlp::train
