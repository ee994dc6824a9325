#pragma once
// Wall-clock phase timers for job summaries ("read 0.4 s, decode 1.2 s, ...") and the UTC
// timestamp that manifests, checkpoint markers and run summaries carry.
#include <time.h>

#include <chrono>
#include <ctime>
#include <string>
#include <utility>
#include <vector>

namespace fnvlp {

// Now in UTC as ISO 8601 to the second ("2026-01-01T00:00:00Z"); gmtime_r, so any thread may call.
inline std::string utc_now_iso8601() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

class PhaseTimer {
 public:
  PhaseTimer() : last_(Clock::now()), start_(last_) {}
  // Closes the current phase under `name` and starts the next one.
  void mark(std::string name) {
    const auto now = Clock::now();
    phases_.emplace_back(std::move(name), std::chrono::duration<double>(now - last_).count());
    last_ = now;
  }
  double total() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  const std::vector<std::pair<std::string, double>>& phases() const { return phases_; }
  std::string summary() const {
    std::string out;
    char buf[64];
    for (const auto& [name, s] : phases_) {
      std::snprintf(buf, sizeof(buf), "%s%s %.2f s", out.empty() ? "" : ", ", name.c_str(), s);
      out += buf;
    }
    return out;
  }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point last_, start_;
  std::vector<std::pair<std::string, double>> phases_;
};

// Where a training step's wall time goes, summed over a logging window: each lap() charges the
// time since the previous lap to one phase. A method's cost (GloFND's update and filter, FALCON's
// reward pass and policy step) is read off one run this way instead of from the difference of two
// noisy whole-run throughputs. Host wall time: with libtorch on CPU every op has finished when it
// returns.
struct StepClock {
  enum Phase {
    kBatch,
    kForward,
    kNegatives,
    kBackward,
    kComm,
    kOptimizer,
    kFalcon,
    kOther,
    kCount
  };
  static constexpr const char* kNames[kCount] = {"batch", "forward",   "negatives", "backward",
                                                 "comm",  "optimizer", "falcon",    "other"};
  std::chrono::steady_clock::time_point last = std::chrono::steady_clock::now();
  std::vector<double> seconds = std::vector<double>(kCount, 0.0);
  void lap(Phase p) {
    const auto now = std::chrono::steady_clock::now();
    seconds[p] += std::chrono::duration<double>(now - last).count();
    last = now;
  }
};

}  // namespace fnvlp
