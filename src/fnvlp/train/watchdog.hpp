#pragma once
// Step guards: the watchdog that ends a job whose rank stopped making progress (a hung collective,
// a stalled file system), and the non-finite loss guard that skips a step on every rank at once.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/core/config_fields.hpp"

namespace fnvlp::train {

// Exit code of a job ended by the watchdog (MPI_Abort's error code, hence mpirun's / srun's exit
// status): distinct from 1 (failure), 2 (usage) and kExitRequeue = 3 (stopped and saved).
inline constexpr int kExitWatchdog = 4;

struct WatchdogConfig {
  // clang-format off
  FNVLP_CONFIG_FIELDS(
      (double, timeout_s, 600),  // no beat for this long aborts the job; <= 0 disables the watchdog
      // limits of the phases longer than a step (<= 0: no limit): start-up and resume (hashing
      // the shards, opening them, loading a checkpoint), and each epoch-end embedding export or
      // epoch-end hook (fine-tuning's validation)
      (double, startup_timeout_s, 1800),
      (double, long_phase_timeout_s, 7200))
  // clang-format on
};

// A thread that aborts the job when the main thread has not called beat() for `timeout_s`. The
// abort logs the rank and the last step and phase reported, then calls `abort_fn(kExitWatchdog)`
// (by default Comm::abort, i.e. MPI_Abort, which ends every rank). Should the abort itself hang
// (MPI_Abort from a helper thread of a process stuck inside MPI), the process _Exit()s with the
// same code after a grace period; the launcher then ends the other ranks.
//
// Construct it once setup is done (data opened, checkpoint loaded), beat once per step and phase,
// and wrap known-long phases (checkpoint save, embedding export) in long_phase().
class Watchdog {
 public:
  using AbortFn = std::function<void(int code)>;

  Watchdog(const Comm& comm, double timeout_s);
  // For tests and tools without MPI: `rank` is only used in the message.
  Watchdog(int rank, double timeout_s, AbortFn abort_fn);
  ~Watchdog();  // stops the thread (returns within one poll interval)
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Progress report from the main thread: restarts the timeout.
  void beat(int64_t step, const std::string& phase);

  // Scoped phase with its own limit (0: disarmed): a checkpoint save may legitimately take longer
  // than a step, yet should not hang forever either. Scopes nest; leaving one restores the outer
  // limit and counts as a beat.
  class Scope {
   public:
    Scope(Scope&& o) noexcept : dog_(o.dog_) { o.dog_ = nullptr; }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    Scope& operator=(Scope&&) = delete;
    ~Scope();

   private:
    friend class Watchdog;
    Scope(Watchdog* dog, double saved_limit, std::string saved_phase)
        : dog_(dog), saved_limit_(saved_limit), saved_phase_(std::move(saved_phase)) {}
    Watchdog* dog_;
    double saved_limit_;
    std::string saved_phase_;
  };
  [[nodiscard]] Scope long_phase(const std::string& phase, double timeout_s = 0);

  void stop();
  bool enabled() const { return timeout_s_ > 0; }
  bool fired() const;
  // How long the watchdog waits for a hung abort before _Exit (tests shorten it).
  void set_abort_grace(double seconds);
  // Called on the watchdog's thread when it fires, before the abort, with the message it logged
  // and the last step reported (the run's summary.json). It must not touch what the stuck main
  // thread may be changing; the abort follows whatever it does (the grace timer already runs).
  void set_last_words(std::function<void(const std::string& why, int64_t step)> fn);

 private:
  using Clock = std::chrono::steady_clock;
  void run();
  void fire(double idle_s, double limit_s, int64_t step, const std::string& phase);

  int rank_;
  double timeout_s_;
  double abort_grace_s_ = 30;
  AbortFn abort_fn_;
  std::function<void(const std::string&, int64_t)> last_words_;

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool fired_ = false;
  double limit_s_;  // current limit: timeout_s_, or a long phase's (0 = disarmed)
  Clock::time_point last_beat_;
  int64_t step_ = -1;
  std::string phase_ = "startup";
  std::thread thread_;
};

// --- non-finite loss guard ----------------------------------------------------------------------

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
