#include "fnvlp/comm/watchdog.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "fnvlp/core/progress.hpp"

namespace fnvlp {

Watchdog::Watchdog(const Comm& comm, double timeout_s)
    : Watchdog(comm.rank(), timeout_s, [&comm](int code) { comm.abort(code); }) {}

Watchdog::Watchdog(int rank, double timeout_s, AbortFn abort_fn)
    : rank_(rank), timeout_s_(timeout_s), abort_fn_(std::move(abort_fn)), limit_s_(timeout_s) {
  FNVLP_CHECK(abort_fn_, "watchdog needs an abort function");
  last_beat_ = Clock::now();
  if (enabled()) thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() { stop(); }

void Watchdog::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::set_counter_name(std::string name) {
  std::lock_guard<std::mutex> lock(mutex_);
  counter_ = std::move(name);
}

void Watchdog::set_abort_grace(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  abort_grace_s_ = seconds;
}

bool Watchdog::fired() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return fired_;
}

void Watchdog::beat(int64_t step, const std::string& phase) {
  std::lock_guard<std::mutex> lock(mutex_);
  last_beat_ = Clock::now();
  step_ = step;
  phase_ = phase;
}

std::string Watchdog::failure_phase() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return unwound_phase_.empty() ? phase_ : unwound_phase_;
}

int64_t Watchdog::last_step() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return step_;
}

Watchdog::Scope Watchdog::long_phase(const std::string& phase, double timeout_s) {
  std::lock_guard<std::mutex> lock(mutex_);
  Scope scope(this, limit_s_, phase_);
  limit_s_ = std::max(0.0, timeout_s);
  last_beat_ = Clock::now();
  phase_ = phase;
  return scope;
}

Watchdog::Scope::~Scope() {
  if (!dog_) return;
  std::lock_guard<std::mutex> lock(dog_->mutex_);
  if (std::uncaught_exceptions() > uncaught_ && dog_->unwound_phase_.empty())
    dog_->unwound_phase_ = dog_->phase_;
  dog_->limit_s_ = saved_limit_;
  dog_->phase_ = std::move(saved_phase_);
  dog_->last_beat_ = Clock::now();
}

void Watchdog::run() {
  // Polls a few times per current limit (at most every second): the check is cheap, and stop()
  // wakes the thread at once through the condition variable.
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    const double limit = limit_s_ > 0 ? std::min(limit_s_, timeout_s_) : timeout_s_;
    cv_.wait_for(lock, std::chrono::duration<double>(std::clamp(limit / 8, 0.01, 1.0)));
    if (stopping_) break;
    const double idle = std::chrono::duration<double>(Clock::now() - last_beat_).count();
    if (limit_s_ > 0 && idle > limit_s_) {
      fired_ = true;
      const double limit = limit_s_;
      const int64_t step = step_;
      const std::string phase = phase_, counter = counter_;
      lock.unlock();
      fire(idle, limit, step, counter, phase);
      return;
    }
  }
}

void Watchdog::set_last_words(std::function<void(const std::string&, int64_t)> fn) {
  std::lock_guard<std::mutex> lock(mutex_);
  last_words_ = std::move(fn);
}

void Watchdog::fire(double idle_s, double limit_s, int64_t step, const std::string& counter,
                    const std::string& phase) {
  const std::string why = fmt::format(
      "watchdog: rank {} made no progress for {:.1f} s (limit {:.1f} s); last reported {} {}, "
      "phase '{}'",
      rank_, idle_s, limit_s, counter, step, phase);
  spdlog::critical("{}; aborting the job with exit code {}", why, kExitWatchdog);
  spdlog::default_logger()->flush();
  double grace = 0;
  std::function<void(const std::string&, int64_t)> last_words;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    grace = abort_grace_s_;
    last_words = last_words_;
  }
  // Last resort should the abort hang: this rank exits, and the launcher ends its peers.
  std::thread([grace] {
    std::this_thread::sleep_for(std::chrono::duration<double>(grace));
    std::fprintf(stderr, "watchdog: abort did not end the process; exiting with code %d\n",
                 kExitWatchdog);
    std::fflush(stderr);
    std::_Exit(kExitWatchdog);
  }).detach();
  if (last_words) {
    try {
      last_words(why, step);
    } catch (const std::exception& e) {
      spdlog::error("watchdog: {}", e.what());
    }
  }
  abort_fn_(kExitWatchdog);
}

// --- the tools' watchdog ------------------------------------------------------------------------

namespace {
std::atomic<Watchdog*> g_tool_dog{nullptr};
std::atomic<int64_t> g_reports{0};

void beat_tool_dog(const char* what) {
  if (Watchdog* dog = g_tool_dog.load(std::memory_order_acquire))
    dog->beat(g_reports.fetch_add(1, std::memory_order_relaxed) + 1, what);
}
}  // namespace

ToolWatchdog::ToolWatchdog(const Comm& comm, double timeout_s) : dog_(comm, timeout_s) {
  install();
}

ToolWatchdog::ToolWatchdog(int rank, double timeout_s, Watchdog::AbortFn abort_fn)
    : dog_(rank, timeout_s, std::move(abort_fn)) {
  install();
}

void ToolWatchdog::install() {
  dog_.set_counter_name("progress report");
  dog_.beat(0, "startup");
  Watchdog* none = nullptr;
  FNVLP_CHECK(g_tool_dog.compare_exchange_strong(none, &dog_),
              "a tool watchdog is already installed in this process");
  set_progress_hook(&beat_tool_dog);
}

ToolWatchdog::~ToolWatchdog() {
  set_progress_hook(nullptr);
  g_tool_dog.store(nullptr, std::memory_order_release);
  dog_.stop();
}

}  // namespace fnvlp
