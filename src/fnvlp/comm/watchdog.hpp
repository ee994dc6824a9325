#pragma once
// The watchdog that ends a job whose rank stopped making progress (a hung collective, a stalled
// file system): the trainer's, beaten once per step and phase, and the tools' (fnvlp-shard, -eval,
// -simstat), beaten from their loops through progress() (core/progress.hpp).
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/core/config_fields.hpp"

namespace fnvlp {

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

  // Progress report (from any thread): restarts the timeout.
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
        : dog_(dog),
          saved_limit_(saved_limit),
          saved_phase_(std::move(saved_phase)),
          uncaught_(std::uncaught_exceptions()) {}
    Watchdog* dog_;
    double saved_limit_;
    std::string saved_phase_;
    int uncaught_;  // a scope left by an exception records its phase (failure_phase())
  };
  [[nodiscard]] Scope long_phase(const std::string& phase, double timeout_s = 0);

  void stop();
  // The phase a failure happened in: the innermost long phase an exception unwound, else the
  // last phase reported; with the last step reported. For the failed run's summary.json.
  std::string failure_phase() const;
  int64_t last_step() const;
  // The word for beat()'s count in the abort message ("step" by default).
  void set_counter_name(std::string name);
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
  void fire(double idle_s, double limit_s, int64_t step, const std::string& counter,
            const std::string& phase);

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
  std::string counter_ = "step";
  std::string phase_ = "startup";
  std::string unwound_phase_;  // the first long phase an exception left
  std::thread thread_;
};

// The watchdog of a tool (fnvlp-shard, -eval, -simstat): armed from construction (start-up
// included) and beaten by every progress() call of the process, from any thread, with the call's
// `what` as the phase; one per process at a time. timeout_s <= 0: none.
class ToolWatchdog {
 public:
  ToolWatchdog(const Comm& comm, double timeout_s);
  // For tests: `rank` is only used in the message.
  ToolWatchdog(int rank, double timeout_s, Watchdog::AbortFn abort_fn);
  ~ToolWatchdog();
  ToolWatchdog(const ToolWatchdog&) = delete;
  ToolWatchdog& operator=(const ToolWatchdog&) = delete;

 private:
  void install();
  Watchdog dog_;
};

}  // namespace fnvlp
