// fnvlp-lock: a directory's lock (src/fnvlp/store/run_lock.hpp) from a shell, without MPI. A batch
// script owns its campaign task directory for its lifetime (slurm/common.sh fnvlp_own_dir), and
// a person looks at a lock or clears one by hand.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "fnvlp/core/log.hpp"
#include "fnvlp/store/run_lock.hpp"

namespace {

namespace fs = std::filesystem;
using fnvlp::store::FoundLock;

constexpr const char* kUsage =
    "usage: fnvlp-lock take DIR [--pid PID] [--program NAME]\n"
    "                                           own DIR for process PID (default: the caller)\n"
    "       fnvlp-lock release DIR [--pid PID]  remove DIR's lock if PID on this host holds it\n"
    "       fnvlp-lock show PATH                its owner, and whether that owner is alive\n"
    "       fnvlp-lock clear PATH [--force]     remove a lock whose owner is gone (--force: any)\n"
    "PATH: a directory (its owner.lock) or a lock file (fnvlp-eval's OUT.lock).\n"
    "Exit codes: 0 done, 1 failed, 2 held by another live owner (take, clear).\n";

std::string lock_path(const std::string& path) {
  return fs::is_directory(path) ? fnvlp::store::directory_lock_path(path) : path;
}

int take(const std::string& dir, int64_t pid, const std::string& program) {
  fs::create_directories(dir);
  const auto owner = fnvlp::store::this_process_owner(program, pid, 0);
  fnvlp::store::OwnerLock::take(fnvlp::store::directory_lock_path(dir), owner)->hand_over();
  return 0;
}

int release(const std::string& dir, int64_t pid) {
  const std::string path = fnvlp::store::directory_lock_path(dir);
  const auto found = fnvlp::store::read_lock(path, fnvlp::store::wall_clock_s());
  if (!found) return 0;
  const auto me = fnvlp::store::this_process_owner("", pid, 0);
  const bool mine = found->owner && found->owner->pid == pid && found->owner->host == me.host &&
                    found->owner->pid_start == me.pid_start;
  if (!mine) {
    std::cerr << "fnvlp-lock: " << path << " is not held by pid " << pid << " on " << me.host
              << ": " << (found->owner ? found->owner->describe() : "no owner record")
              << "; left alone\n";
    return 1;
  }
  return fnvlp::store::remove_lock_if_unchanged(path, *found) ? 0 : 1;
}

int show_or_clear(const std::string& arg, bool clear, bool force) {
  const std::string path = lock_path(arg);
  const auto found = fnvlp::store::read_lock(path, fnvlp::store::wall_clock_s());
  if (!found) {
    std::cout << path << ": no lock\n";
    return 0;
  }
  fnvlp::store::OwnerVerdict v{true, "the file holds no owner record"};
  if (found->owner)
    v = fnvlp::store::judge_owner(*found->owner, found->age_s, fnvlp::store::current_host());
  std::cout << path << ": " << (found->owner ? found->owner->describe() : found->text) << "\n  "
            << (v.gone ? "gone: " : "alive: ") << v.why << "\n";
  if (!clear) return 0;
  if (!v.gone && !force) {
    std::cerr << "fnvlp-lock: not cleared: its owner looks alive (--force clears it anyway)\n";
    return 2;
  }
  if (!fnvlp::store::remove_lock_if_unchanged(path, *found)) {
    std::cerr << "fnvlp-lock: not cleared: " << path << " changed meanwhile; look again\n";
    return 1;
  }
  std::cout << "  cleared\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  fnvlp::log::init(0, 1);
  std::vector<std::string> args;
  int64_t pid = ::getppid();
  std::string program = "a shell (fnvlp-lock take)";
  bool force = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--pid" && i + 1 < argc) {
      pid = std::strtoll(argv[++i], nullptr, 10);
    } else if (a == "--program" && i + 1 < argc) {
      program = argv[++i];
    } else if (a == "--force") {
      force = true;
    } else {
      args.push_back(a);
    }
  }
  if (args.size() != 2 || pid <= 0) {
    std::cerr << kUsage;
    return 2;
  }
  const std::string& cmd = args[0];
  const std::string& path = args[1];
  try {
    if (cmd == "take") return take(path, pid, program);
    if (cmd == "release") return release(path, pid);
    if (cmd == "show" || cmd == "clear") return show_or_clear(path, cmd == "clear", force);
  } catch (const fnvlp::store::LockHeld& e) {
    std::cerr << "fnvlp-lock: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "fnvlp-lock " << cmd << " " << path << " failed: " << e.what() << "\n";
    return 1;
  }
  std::cerr << "fnvlp-lock: unknown command '" << cmd << "'\n" << kUsage;
  return 2;
}
