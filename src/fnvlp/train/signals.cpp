#include "fnvlp/train/signals.hpp"

#include <spdlog/spdlog.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

namespace fnvlp::train {

namespace {

// Only lock-free atomics may be touched from a signal handler.
std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "signal flag must be lock-free");

std::mutex g_install_mutex;  // install/uninstall only, never from the handler
bool g_installed = false;
struct sigaction g_old_usr1 {};
struct sigaction g_old_term {};

std::atomic<int> g_export{0};
struct sigaction g_old_usr2 {};

extern "C" void on_stop_signal(int sig) { g_signal.store(sig, std::memory_order_relaxed); }
extern "C" void on_export_signal(int) { g_export.store(1, std::memory_order_relaxed); }

void set_handler(int sig, struct sigaction* old, void (*handler)(int) = on_stop_signal) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking reads and MPI's system calls resume instead of failing
  FNVLP_CHECK(sigaction(sig, &sa, old) == 0,
              "cannot install handler for signal " << sig << ": " << std::strerror(errno));
}

}  // namespace

void StopRequest::install() {
  std::lock_guard<std::mutex> lock(g_install_mutex);
  if (g_installed) return;
  set_handler(SIGUSR1, &g_old_usr1);
  set_handler(SIGTERM, &g_old_term);
  set_handler(SIGUSR2, &g_old_usr2, on_export_signal);
  g_installed = true;
}

void StopRequest::uninstall() {
  std::lock_guard<std::mutex> lock(g_install_mutex);
  if (!g_installed) return;
  sigaction(SIGUSR1, &g_old_usr1, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
  sigaction(SIGUSR2, &g_old_usr2, nullptr);
  g_installed = false;
}

bool StopRequest::installed() {
  std::lock_guard<std::mutex> lock(g_install_mutex);
  return g_installed;
}

bool StopRequest::pending() { return g_signal.load(std::memory_order_relaxed) != 0; }

int StopRequest::signal_number() { return g_signal.load(std::memory_order_relaxed); }

void StopRequest::clear() { g_signal.store(0, std::memory_order_relaxed); }

void StopRequest::raise_for_test(int sig) {
  FNVLP_CHECK(std::raise(sig) == 0, "raise(" << sig << ") failed");
}

bool agree_stop(const Comm& comm) {
  const int local = StopRequest::signal_number();
  const int any = comm.allreduce_max<int32_t>(local);
  static std::atomic<bool> announced{false};
  if (any == 0) announced = false;  // a cleared request may be followed by a new one
  if (any != 0 && !announced.exchange(true)) {
    if (local != 0)
      spdlog::warn(
          "stop requested by signal {} ({}): all ranks stop after this step, save and exit {}",
          local, strsignal(local), kExitRequeue);
    else if (comm.is_root())
      spdlog::warn("stop requested on another rank (signal {}): stopping after this step", any);
  }
  return any != 0;
}

bool agree_export(const Comm& comm) {
  // exchange, not load + clear: a SIGUSR2 arriving after this point counts for the next step.
  const int local = g_export.exchange(0, std::memory_order_relaxed);
  return comm.allreduce_max<int32_t>(local) != 0;
}

}  // namespace fnvlp::train
