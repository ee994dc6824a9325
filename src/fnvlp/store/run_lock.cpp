#include "fnvlp/store/run_lock.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "fnvlp/comm/job_main.hpp"
#include "fnvlp/core/error.hpp"
#include "fnvlp/core/host.hpp"
#include "fnvlp/core/timer.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace fnvlp::store {

namespace {

// A lock file that does not parse this long after it was written is a creator's leftover; a
// takeover marker this old one of a taker that died.
constexpr double kUnreadableGraceS = 30;
constexpr double kTakeoverGraceS = 60;
constexpr int kMaxAttempts = 1200;  // x 100 ms: the longest a take() waits on others' steps
constexpr auto kRetryPause = std::chrono::milliseconds(100);

double mtime_of(const struct stat& st) {
  return static_cast<double>(st.st_mtim.tv_sec) + 1e-9 * static_cast<double>(st.st_mtim.tv_nsec);
}

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string first_line_of(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// Field 22 of /proc/PID/stat (start time in clock ticks after boot) and field 3 (the state), read
// after the command name's closing parenthesis (the name may hold spaces).
struct ProcStat {
  char state = '?';
  int64_t start = 0;
};
std::optional<ProcStat> proc_stat(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  if (!in) return std::nullopt;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos) return std::nullopt;
  std::istringstream fields(text.substr(paren + 1));
  ProcStat st;
  std::string skip;
  fields >> st.state;
  for (int i = 4; i < 22; ++i) fields >> skip;
  fields >> st.start;
  if (fields.fail()) return std::nullopt;
  return st;
}

HostView::Pid probe_pid(int64_t pid, int64_t start) {
  if (pid <= 0) return HostView::Pid::kGone;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return HostView::Pid::kGone;
  const std::optional<ProcStat> st = proc_stat(pid);
  if (!st) return HostView::Pid::kAlive;  // no /proc: kill() said it exists
  if (st->state == 'Z' || st->state == 'X') return HostView::Pid::kGone;  // exited, not reaped
  if (start > 0 && st->start != start) return HostView::Pid::kReused;
  return HostView::Pid::kAlive;
}

// `scontrol show job|step -o ID`: the state field, "" for an id SLURM does not know, nullopt
// when SLURM cannot be asked. ID is checked to be digits and dots before it reaches the shell.
std::optional<std::string> scontrol_state(const std::string& id) {
  if (id.empty() || id.find_first_not_of("0123456789.") != std::string::npos) return std::nullopt;
  const bool step = id.find('.') != std::string::npos;
  const std::string cmd =
      std::string("timeout 20 scontrol show ") + (step ? "step" : "job") + " -o " + id + " 2>&1";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return std::nullopt;
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  const int rc = ::pclose(p);
  const int code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  if (code == 124 || code == 126 || code == 127 || code < 0) return std::nullopt;  // not asked
  // SLURM's words for a job it no longer knows, and for a step that is not running (22.05:
  // "Job step 1.7 not found"); with a job id it does not know the step query says the former.
  if (out.find("Invalid job id") != std::string::npos ||
      (step && out.find("step " + id + " not found") != std::string::npos))
    return std::string();
  if (code != 0) return std::nullopt;
  const std::string key = step ? " State=" : " JobState=";
  const size_t at = (" " + out).find(key);
  if (at == std::string::npos) return std::nullopt;
  const size_t from = at + key.size() - 1;
  return out.substr(from, out.find_first_of(" \n", from) - from);
}

// Job and step states in which the owner's processes may still run.
bool slurm_active(const std::string& state) {
  for (const char* s : {"RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "STOPPED", "SIGNALING",
                        "RESIZING", "STAGE_OUT"})
    if (state == s) return true;
  return false;
}

std::string random_token() {
  std::random_device rd;
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  return buf;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0f s", s);
  return buf;
}

// Rule 2 of judge_owner(): nullopt when SLURM does not decide.
std::optional<OwnerVerdict> judge_by_slurm(const LockOwner& o, const HostView& here) {
  if (o.slurm_job.empty() || o.slurm_cluster != here.slurm_cluster) return std::nullopt;
  const std::string job = "SLURM job " + o.slurm_job;
  if (o.slurm_job == here.slurm_job) {
    if (o.slurm_restart != here.slurm_restart)
      return OwnerVerdict{true, job + " was requeued since: restart " + o.slurm_restart + ", now " +
                                    here.slurm_restart};
    if (o.slurm_step.empty() || o.slurm_step == here.slurm_step) return std::nullopt;
    const std::string id = o.slurm_job + "." + o.slurm_step;
    const std::optional<std::string> st = here.slurm_state ? here.slurm_state(id) : std::nullopt;
    if (!st) return std::nullopt;
    if (st->empty() || !slurm_active(*st))
      return OwnerVerdict{true, "step " + id + " of this job has ended"};
    return OwnerVerdict{false, "step " + id + " of this job is " + *st};
  }
  const std::optional<std::string> st =
      here.slurm_state ? here.slurm_state(o.slurm_job) : std::nullopt;
  if (!st) return std::nullopt;
  if (st->empty()) return OwnerVerdict{true, job + " has ended (SLURM no longer knows it)"};
  if (!slurm_active(*st)) return OwnerVerdict{true, job + " is " + *st};
  return OwnerVerdict{false, job + " is " + *st};
}

std::string held_message(const std::string& path, const FoundLock& found, const OwnerVerdict& v) {
  const fs::path p(path);
  const std::string what =
      p.filename() == "owner.lock" ? p.parent_path().string() : path.substr(0, path.size() - 5);
  std::ostringstream os;
  os << what << " is in use by another job: " << found.owner->describe() << " (" << v.why
     << "). Two jobs writing it at once would mix their outputs: wait for that job, stop it, or "
        "write elsewhere. If you know it is gone, remove its lock: fnvlp-lock clear --force "
     << path << " (or rm " << path << ")";
  return os.str();
}

// open(O_CREAT | O_EXCL) and the owner's record written and synced: the descriptor, or -1 with
// errno EEXIST when the file exists. Other failures throw.
int create_exclusive(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0 && errno == EEXIST) return -1;
  FNVLP_CHECK(fd >= 0, "cannot create the lock file '" << path << "': " << std::strerror(errno));
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int err = errno;
  if (n != static_cast<ssize_t>(text.size()) || ::fsync(fd) != 0) {
    ::close(fd);
    ::unlink(path.c_str());
    FNVLP_FAIL("cannot write the lock file '" << path
                                              << "': " << std::strerror(n < 0 ? err : errno));
  }
  return fd;
}

}  // namespace

double wall_clock_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string directory_lock_path(const std::string& dir) {
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  return d + "/owner.lock";
}

// --- the owner record ---------------------------------------------------------------------------

json LockOwner::to_json() const {
  return json{{"program", program},
              {"host", host},
              {"boot_id", boot_id},
              {"pid", pid},
              {"pid_start", pid_start},
              {"slurm_cluster", slurm_cluster},
              {"slurm_job_id", slurm_job},
              {"slurm_step_id", slurm_step},
              {"slurm_restart_count", slurm_restart},
              {"started_at", started_at},
              {"heartbeat_s", heartbeat_s},
              {"token", token}};
}

LockOwner LockOwner::from_json(const json& j) {
  LockOwner o;
  o.program = j.at("program").get<std::string>();
  o.host = j.at("host").get<std::string>();
  o.boot_id = j.value("boot_id", "");
  o.pid = j.at("pid").get<int64_t>();
  o.pid_start = j.value("pid_start", int64_t{0});
  o.slurm_cluster = j.value("slurm_cluster", "");
  o.slurm_job = j.value("slurm_job_id", "");
  o.slurm_step = j.value("slurm_step_id", "");
  o.slurm_restart = j.value("slurm_restart_count", "");
  o.started_at = j.value("started_at", "");
  o.heartbeat_s = j.value("heartbeat_s", 0.0);
  o.token = j.value("token", "");
  return o;
}

std::string LockOwner::describe() const {
  std::string s = program + ", pid " + std::to_string(pid) + " on " + host;
  if (!slurm_job.empty()) {
    s += " (SLURM job " + slurm_job;
    if (!slurm_step.empty()) s += " step " + slurm_step;
    s += " restart " + (slurm_restart.empty() ? std::string("0") : slurm_restart) + ")";
  }
  if (!started_at.empty()) s += ", since " + started_at;
  return s;
}

LockOwner this_process_owner(const std::string& program, int64_t pid, double heartbeat_s) {
  LockOwner o;
  o.program = program;
  o.host = host_name();
  o.boot_id = first_line_of("/proc/sys/kernel/random/boot_id");
  o.pid = pid;
  if (const auto st = proc_stat(pid)) o.pid_start = st->start;
  o.slurm_cluster = env_or_empty("SLURM_CLUSTER_NAME");
  o.slurm_job = env_or_empty("SLURM_JOB_ID");
  o.slurm_step = env_or_empty("SLURM_STEP_ID");
  o.slurm_restart = env_or_empty("SLURM_RESTART_COUNT");
  if (!o.slurm_job.empty() && o.slurm_restart.empty()) o.slurm_restart = "0";
  o.started_at = utc_now_iso8601();
  o.heartbeat_s = heartbeat_s;
  o.token = random_token();
  return o;
}

HostView current_host() {
  const LockOwner me = this_process_owner("", ::getpid(), 0);
  HostView h;
  h.host = me.host;
  h.boot_id = me.boot_id;
  h.slurm_cluster = me.slurm_cluster;
  h.slurm_job = me.slurm_job;
  h.slurm_step = me.slurm_step;
  h.slurm_restart = me.slurm_restart;
  h.probe = probe_pid;
  h.slurm_state = scontrol_state;
  return h;
}

// --- judging an owner ---------------------------------------------------------------------------

OwnerVerdict judge_owner(const LockOwner& o, double age_s, const HostView& here) {
  const std::string proc = "process " + std::to_string(o.pid) + " on " + o.host;
  if (!o.host.empty() && o.host == here.host) {
    if (!o.boot_id.empty() && !here.boot_id.empty() && o.boot_id != here.boot_id)
      return {true, o.host + " has restarted since (another boot id)"};
    switch (here.probe(o.pid, o.pid_start)) {
      case HostView::Pid::kGone:
        return {true, proc + " is not running"};
      case HostView::Pid::kReused:
        return {true, proc + " is another program now (started at another time)"};
      case HostView::Pid::kAlive:
        return {false, proc + " is running"};
    }
  }
  if (std::optional<OwnerVerdict> v = judge_by_slurm(o, here)) return *v;
  const std::string elsewhere = o.host + " cannot be probed from " + here.host;
  if (o.heartbeat_s > 0) {
    const std::string lease = "the " + seconds_text(o.heartbeat_s * kLockLeaseBeats) + " lease";
    if (age_s > o.heartbeat_s * kLockLeaseBeats)
      return {true,
              "no heartbeat for " + seconds_text(age_s) + ", past " + lease + "; " + elsewhere};
    return {false,
            "its heartbeat is " + seconds_text(age_s) + " old, within " + lease + "; " + elsewhere};
  }
  return {false, elsewhere + (o.slurm_job.empty() ? "" : " and SLURM cannot be asked about it")};
}

std::optional<FoundLock> read_lock(const std::string& path, double now) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0 && errno == ENOENT) return std::nullopt;
  FNVLP_CHECK(fd >= 0, "cannot open the lock file '" << path << "': " << std::strerror(errno));
  FoundLock f;
  struct stat st {};
  if (::fstat(fd, &st) == 0) f.age_s = now - mtime_of(st);
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) f.text.append(buf, n);
  ::close(fd);
  const json j = json::parse(f.text, nullptr, /*allow_exceptions=*/false);
  try {
    if (j.is_object()) f.owner = LockOwner::from_json(j);
  } catch (const std::exception&) {
    f.owner.reset();
  }
  return f;
}

// --- the lock -----------------------------------------------------------------------------------

namespace {

// Runs `act` if the lock file at `path` still holds `judged`'s text, while this process holds the
// marker PATH.takeover (created with O_EXCL): among contenders, one checks and acts at a time.
// False when another process holds the marker or the file changed.
bool while_unchanged(const std::string& path, const FoundLock& judged,
                     const std::function<void()>& act) {
  const std::string marker = path + ".takeover";
  const int fd = ::open(marker.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    FNVLP_CHECK(errno == EEXIST, "cannot create '" << marker << "': " << std::strerror(errno));
    struct stat st {};
    if (::stat(marker.c_str(), &st) == 0 && wall_clock_s() - mtime_of(st) > kTakeoverGraceS)
      ::unlink(marker.c_str());  // left by a taker that died holding it
    return false;
  }
  ::close(fd);
  struct Release {
    const std::string& marker;
    ~Release() { ::unlink(marker.c_str()); }
  } release{marker};
  const std::optional<FoundLock> now = read_lock(path, wall_clock_s());
  if (!now || now->text != judged.text) return false;
  act();
  return true;
}

// Replaces the lock file judged gone by one holding `text`, if it did not change meanwhile: the
// new file is written beside it and renamed over it, so that the path never stops existing (no
// creator can slip in between). The new file's descriptor, or -1.
int replace_if_unchanged(const std::string& path, const FoundLock& judged, const std::string& text,
                         const std::string& token) {
  int fd = -1;
  while_unchanged(path, judged, [&] {
    const std::string fresh = path + ".new-" + token;
    ::unlink(fresh.c_str());
    fd = create_exclusive(fresh, text);
    if (fd >= 0 && ::rename(fresh.c_str(), path.c_str()) != 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(fresh.c_str());
      FNVLP_FAIL("cannot rename '" << fresh << "' to '" << path << "': " << std::strerror(err));
    }
  });
  return fd;
}

}  // namespace

bool remove_lock_if_unchanged(const std::string& path, const FoundLock& judged) {
  return while_unchanged(path, judged, [&] { ::unlink(path.c_str()); });
}

OwnerLock::OwnerLock(std::string path, LockOwner owner, int fd)
    : path_(std::move(path)), owner_(std::move(owner)), fd_(fd) {}

std::unique_ptr<OwnerLock> OwnerLock::take(const std::string& path, const LockOwner& owner,
                                           const HostView& here,
                                           std::function<void(const std::string&)> on_lost) {
  const std::string text = owner.to_json().dump(1) + "\n";
  auto held = [&](int fd, const std::string& took_over) {
    std::unique_ptr<OwnerLock> lock(new OwnerLock(path, owner, fd));
    lock->took_over_from_ = took_over;
    if (owner.heartbeat_s > 0)
      lock->thread_ = std::thread([l = lock.get(), f = std::move(on_lost)] { l->beat(f); });
    return lock;
  };
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    if (const int fd = create_exclusive(path, text); fd >= 0) return held(fd, "");
    const std::optional<FoundLock> found = read_lock(path, wall_clock_s());
    if (!found) continue;  // removed meanwhile
    OwnerVerdict v;
    if (found->owner) {
      v = judge_owner(*found->owner, found->age_s, here);
    } else if (found->age_s < kUnreadableGraceS) {
      std::this_thread::sleep_for(kRetryPause);  // being written
      continue;
    } else {
      v = {true, "the lock file holds no owner record (" + std::to_string(found->text.size()) +
                     " bytes, written " + seconds_text(found->age_s) + " ago)"};
    }
    if (!v.gone) throw LockHeld(held_message(path, *found, v));
    if (const int fd = replace_if_unchanged(path, *found, text, owner.token); fd >= 0) {
      const std::string from = found->owner ? found->owner->describe() : "an unreadable lock";
      spdlog::warn("lock: took over {} from {}: {}", path, from, v.why);
      return held(fd, from);
    }
    std::this_thread::sleep_for(kRetryPause);  // another process is taking it over
  }
  FNVLP_FAIL("could not take the lock file '" << path << "': it kept changing for "
                                              << kMaxAttempts / 10 << " s");
}

bool OwnerLock::still_ours() const {
  struct stat mine {
  }, there{};
  if (::fstat(fd_, &mine) != 0) return true;  // cannot tell: not a reason to stop a job
  if (::stat(path_.c_str(), &there) != 0) return errno != ENOENT;
  return mine.st_dev == there.st_dev && mine.st_ino == there.st_ino;
}

void OwnerLock::beat(std::function<void(const std::string&)> on_lost) {
  std::unique_lock<std::mutex> guard(mutex_);
  const auto period = std::chrono::duration<double>(owner_.heartbeat_s);
  while (!cv_.wait_for(guard, period, [this] { return stopping_; })) {
    if (!still_ours()) {
      guard.unlock();  // on_lost may never return (an abort): release() must not wait on it
      std::string now = "nobody (removed)";
      try {
        if (const auto f = read_lock(path_, wall_clock_s()); f && f->owner)
          now = f->owner->describe();
      } catch (const std::exception&) {
      }
      const std::string msg = "lock: " + path_ + " is no longer this job's: it is now held by " +
                              now + "; this job stops, so that two jobs never write one output";
      spdlog::critical("{}", msg);
      spdlog::default_logger()->flush();
      if (on_lost) on_lost(msg);
      return;
    }
    ::futimens(fd_, nullptr);  // the heartbeat: mtime = now (the server's clock on NFS)
  }
}

void OwnerLock::release() {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (fd_ < 0) return;
  if (still_ours()) ::unlink(path_.c_str());
  ::close(fd_);
  fd_ = -1;
}

void OwnerLock::hand_over() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

OwnerLock::~OwnerLock() { release(); }

// --- jobs ---------------------------------------------------------------------------------------

namespace {

std::unique_ptr<OwnerLock> own_collectively(const Comm& comm, const std::string& lock_path,
                                            const std::string& make_dir) {
  std::unique_ptr<OwnerLock> lock;
  std::string held, error;
  if (comm.is_root()) {
    try {
      if (!make_dir.empty()) {
        std::error_code ec;
        fs::create_directories(make_dir, ec);
        FNVLP_CHECK(fs::is_directory(make_dir),
                    "cannot create the directory '" << make_dir << "': " << ec.message());
      }
      const LockOwner me =
          this_process_owner(program_invocation_short_name, ::getpid(), kLockHeartbeatS);
      lock = OwnerLock::take(lock_path, me, current_host(), [&comm](const std::string&) {
        // As the watchdog does: should MPI_Abort from this thread hang, the process still ends.
        std::thread([] {
          std::this_thread::sleep_for(std::chrono::seconds(30));
          std::_Exit(1);
        }).detach();
        comm.abort(1);
      });
    } catch (const LockHeld& e) {
      held = e.what();
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  comm.bcast(held);
  comm.bcast(error);
  if (!held.empty()) throw UsageError(held);
  if (!error.empty()) throw CollectiveError(error);
  return lock;
}

}  // namespace

std::unique_ptr<OwnerLock> own_directory(const Comm& comm, const std::string& dir) {
  FNVLP_CHECK(!dir.empty(), "own_directory: empty path");
  return own_collectively(comm, directory_lock_path(dir), dir);
}

std::unique_ptr<OwnerLock> own_output_file(const Comm& comm, const std::string& file) {
  FNVLP_CHECK(!file.empty(), "own_output_file: empty path");
  return own_collectively(comm, file + ".lock", "");
}

}  // namespace fnvlp::store
