#include "fnvlp/core/fault.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include "fnvlp/core/error.hpp"

namespace fnvlp::fault {

namespace {

constexpr const char* kSites[] = {
    "checkpoint.write", "checkpoint.kill", "step.kill",     "step.sleep",   "step.throw",
    "step.nan",         "shard.read",      "startup.sleep", "export.sleep", "progress.sleep",
    "comm.sleep",       "step.oom",        "step.stop",     "step.export"};

struct Entry {
  std::string site;
  int64_t first = 0, last = 0;   // event range, inclusive; first < 0: every event
  int rank = -1;                 // -1: every rank
  double arg = -1;               // < 0: the site's default
  std::string origin = kEnvVar;  // named in the messages: the variable or the configuration
};

struct State {
  std::mutex mutex;
  bool parsed = false;
  std::string error;  // parse error, thrown by every point() until reload()
  std::vector<Entry> entries;
  std::string configured, configured_origin;  // set_configured's entries, kept over reload()
  std::map<std::string, int64_t> calls;
  std::function<void()> out_of_memory;  // step.oom's action; empty: std::bad_alloc
};

State& state() {
  static State s;
  return s;
}

// 0: not parsed yet, 1: parsed and empty (the fast path), 2: parsed with entries.
std::atomic<int> g_mode{0};
std::atomic<int> g_rank{-1};

int env_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(name); v && *v) return std::atoi(v);
  return 0;
}

std::string trim(const std::string& s) {
  std::string out;
  for (char c : s)
    if (c != ' ' && c != '\t' && c != '\n') out += c;
  return out;
}

bool parse_int(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < 0) return false;
  *out = v;
  return true;
}

// Parses one entry; "" on success, else the reason.
std::string parse_entry(const std::string& text, Entry* e) {
  std::vector<std::string> f;
  for (size_t a = 0;;) {
    const size_t b = text.find(':', a);
    f.push_back(text.substr(a, b == std::string::npos ? std::string::npos : b - a));
    if (b == std::string::npos) break;
    a = b + 1;
  }
  if (f.size() < 2 || f.size() > 4) return "expected SITE:WHEN[:RANK[:ARG]]";
  bool known = false;
  for (const char* s : kSites) known = known || f[0] == s;
  if (!known) return "unknown site '" + f[0] + "'";
  e->site = f[0];
  if (f[1] == "*") {
    e->first = e->last = -1;
  } else if (const size_t dash = f[1].find('-'); dash != std::string::npos) {
    if (!parse_int(f[1].substr(0, dash), &e->first) ||
        !parse_int(f[1].substr(dash + 1), &e->last) || e->last < e->first)
      return "bad range '" + f[1] + "'";
  } else {
    if (!parse_int(f[1], &e->first)) return "bad event number '" + f[1] + "'";
    e->last = e->first;
  }
  if (f.size() >= 3 && f[2] != "*") {
    int64_t r = 0;
    if (!parse_int(f[2], &r)) return "bad rank '" + f[2] + "'";
    e->rank = static_cast<int>(r);
  }
  if (f.size() == 4) {
    char* end = nullptr;
    e->arg = std::strtod(f[3].c_str(), &end);
    if (f[3].empty() || *end != '\0' || e->arg < 0) return "bad argument '" + f[3] + "'";
  }
  return "";
}

// Appends the entries of `text` (from `origin`) to s.entries; "" or the reason of the first bad
// one.
std::string append_entries(State& s, const std::string& text, const std::string& origin) {
  for (size_t a = 0; a < text.size();) {
    size_t b = text.find(',', a);
    if (b == std::string::npos) b = text.size();
    const std::string item = text.substr(a, b - a);
    a = b + 1;
    if (item.empty()) continue;
    Entry e;
    e.origin = origin;
    const std::string why = parse_entry(item, &e);
    if (!why.empty()) return origin + "='" + text + "': entry '" + item + "': " + why;
    s.entries.push_back(e);
  }
  return "";
}

// Caller holds the state's mutex.
void parse_locked(State& s) {
  s.entries.clear();
  s.calls.clear();
  s.error.clear();
  s.parsed = true;
  const char* raw = std::getenv(kEnvVar);
  s.error = append_entries(s, raw ? trim(raw) : "", kEnvVar);
  if (s.error.empty()) s.error = append_entries(s, s.configured, s.configured_origin);
  g_mode.store(s.entries.empty() && s.error.empty() ? 1 : 2, std::memory_order_release);
}

int rank() {
  const int r = g_rank.load(std::memory_order_relaxed);
  return r >= 0 ? r : env_rank();
}

void announce(const Entry& e, int64_t event, const std::string& context, const char* what) {
  spdlog::warn("fault: {} fires on rank {} at event {}{}{}: {} (injected by {})", e.site, rank(),
               event, context.empty() ? "" : " in ", context, what, e.origin);
  spdlog::default_logger()->flush();
}

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

}  // namespace

void set_rank(int r) { g_rank.store(r, std::memory_order_relaxed); }

void set_configured(const std::string& entries, const std::string& origin) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.configured = trim(entries);
  s.configured_origin = origin;
  parse_locked(s);
  FNVLP_CHECK(s.error.empty(), s.error);
}

void reload() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  parse_locked(s);
}

bool enabled() {
  if (g_mode.load(std::memory_order_acquire) == 0) {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.parsed) parse_locked(s);
  }
  return g_mode.load(std::memory_order_acquire) == 2;
}

bool point(const char* site, int64_t event, const std::string& context) {
  if (!enabled()) return false;
  Entry hit;
  bool fired = false;
  {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    FNVLP_CHECK(s.error.empty(), s.error);
    const int64_t count = ++s.calls[site];
    if (event < 0) event = count;
    const int me = rank();
    for (const Entry& e : s.entries) {
      if (e.site != site || (e.rank >= 0 && e.rank != me)) continue;
      if (e.first >= 0 && (event < e.first || event > e.last)) continue;
      hit = e;
      fired = true;
      break;
    }
  }
  if (!fired) return false;
  const std::string name = site;
  if (ends_with(name, ".kill")) {
    announce(hit, event, context, "SIGKILL of this process");
    ::kill(::getpid(), SIGKILL);
    std::this_thread::sleep_for(std::chrono::seconds(60));  // the signal is asynchronous
    std::_Exit(137);
  }
  if (ends_with(name, ".sleep")) {
    const double seconds = hit.arg >= 0 ? hit.arg : 3600;
    announce(hit, event, context, ("stalling for " + std::to_string(seconds) + " s").c_str());
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    return true;
  }
  if (ends_with(name, ".write")) {
    announce(hit, event, context, "write failure");
    FNVLP_FAIL("cannot write '" << context << "': " << std::strerror(ENOSPC) << " (injected by "
                                << hit.origin << " at " << site << ", event " << event << ")");
  }
  if (ends_with(name, ".oom")) {
    announce(hit, event, context, "out of memory");
    std::function<void()> action;
    {
      State& s = state();
      std::lock_guard<std::mutex> lock(s.mutex);
      action = s.out_of_memory;
    }
    if (action) action();
    throw std::bad_alloc();
  }
  if (ends_with(name, ".throw") || ends_with(name, ".read")) {
    announce(hit, event, context, "failure");
    FNVLP_FAIL((name == "shard.read" ? "read error in " : "injected failure at ")
               << (context.empty() ? "" : context + ", ") << site << " event " << event
               << " on rank " << rank() << " (injected by " << hit.origin << ")");
  }
  announce(hit, event, context, "the caller acts");
  return true;
}

void at_step(int64_t step) {
  if (!enabled()) return;
  point("step.kill", step);
  point("step.sleep", step);
  point("step.throw", step);
  point("step.oom", step);
}

void set_out_of_memory(std::function<void()> fn) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.out_of_memory = std::move(fn);
}

}  // namespace fnvlp::fault
