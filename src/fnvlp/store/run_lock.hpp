#pragma once
// One job owns an output: a run directory (fnvlp-pretrain, fnvlp-finetune), an evaluation result
// (fnvlp-eval) or a campaign task directory (slurm/campaign_task.sh through fnvlp-lock). The owner
// holds a lock file, DIR/owner.lock (a file's: FILE.lock), naming it in JSON: program, host, boot
// id, pid and the pid's start time, SLURM cluster, job, step and restart count, start time, and
// how often it beats. A second job finds the file and stops, naming the owner; a lock whose owner
// is gone is taken over with a warning (judge_owner() says when), so a resume after a crash, a
// preemption or a requeue starts without help.
//
// Primitive: the file is created with open(O_CREAT | O_EXCL), atomic on local file systems, on
// NFSv3/v4 (an exclusive create on the server) and on Lustre (on the MDS), with no lock daemon.
// fcntl() locks need NFS's lock manager (ENOLCK without one: tests/fault/README.md row 6) and
// Lustre's `flock` mount option (refused without it, node-local with `localflock`); flock() is
// node-local on Lustre with localflock and emulated through fcntl() on NFS. Their one advantage,
// vanishing with the process, is replaced by the owner checks below, which also work across hosts.
//
// By hand: `fnvlp-lock show DIR` prints the owner and whether it is alive; `fnvlp-lock clear DIR`
// removes a lock whose owner is gone (`--force`: any lock), as does `rm DIR/owner.lock`.
#include <nlohmann/json.hpp>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "fnvlp/comm/comm.hpp"

namespace fnvlp::store {

// Seconds between the heartbeats of a job's lock (its mtime) and the lease after which a lock
// whose owner cannot be checked otherwise is stale: long against NFS's attribute cache (60 s)
// and clock skew, short against a lost hour of a requeued job.
inline constexpr double kLockHeartbeatS = 30;
inline constexpr double kLockLeaseBeats = 10;

// The lock file of a directory: DIR/owner.lock.
std::string directory_lock_path(const std::string& dir);
double wall_clock_s();  // seconds since the epoch

// Who holds a lock.
struct LockOwner {
  std::string program;
  std::string host, boot_id;
  int64_t pid = 0;
  int64_t pid_start = 0;  // /proc/PID/stat start time (clock ticks after boot); 0: unknown
  std::string slurm_cluster, slurm_job, slurm_step, slurm_restart;  // "" outside SLURM
  std::string started_at;                                           // UTC, ISO 8601
  double heartbeat_s = 0;  // > 0: the owner refreshes the file's mtime this often
  std::string token;       // random: tells one owner's file from the next one's

  nlohmann::json to_json() const;
  static LockOwner from_json(const nlohmann::json& j);  // throws on a malformed record
  // "fnvlp-pretrain, pid 123 on n1 (SLURM job 45 step 0 restart 0), since 2026-...Z"
  std::string describe() const;
};

// The process `pid` on this host (with its start time, slurm environment) as an owner.
LockOwner this_process_owner(const std::string& program, int64_t pid, double heartbeat_s);

// What judge_owner() knows of the place it runs in; current_host() fills it from the process,
// tests fill it by hand.
struct HostView {
  std::string host, boot_id;
  std::string slurm_cluster, slurm_job, slurm_step, slurm_restart;
  enum class Pid { kAlive, kGone, kReused };
  // A pid of this host: running with the recorded start time, not running (or a zombie), or
  // running but started at another time (the number was reused).
  std::function<Pid(int64_t pid, int64_t start)> probe;
  // SLURM's state of a job ("JOB") or a step ("JOB.STEP"): "RUNNING", ...; "" when SLURM no
  // longer knows it; nullopt when it cannot be asked (no scontrol, no answer).
  std::function<std::optional<std::string>(const std::string& id)> slurm_state;
};
HostView current_host();

struct OwnerVerdict {
  bool gone = false;  // the owner is dead: its lock may be taken over
  std::string why;    // what decided it, for the messages
};

// Whether a lock's owner is gone, in this order:
//  1. same host: its boot id differs (rebooted), or the pid probe says not running or reused
//     (alive: held, whatever else the lock says);
//  2. a SLURM job of this cluster: our own job id at another restart count (a requeue: SLURM
//     ends an allocation before the next one starts) or at another step that SLURM says has
//     ended; another job that SLURM says is not running (pending again, ended, or unknown);
//  3. otherwise, when the owner beats: no heartbeat (the file's mtime, `age_s` ago) for
//     kLockLeaseBeats beats. An owner that does not beat (a shell through fnvlp-lock) on another
//     host outside SLURM is never judged gone: the message says how to clear its lock by hand.
OwnerVerdict judge_owner(const LockOwner& owner, double age_s, const HostView& here);

// A lock that another live job holds; what() names it and how to clear it by hand.
class LockHeld : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A held lock file. Local (one process); see own_directory() for jobs.
class OwnerLock {
 public:
  // Creates `path` for `owner`, or takes it over (with a warning naming the previous owner and
  // why it is gone) from an owner judge_owner() finds gone: a new file renamed over the old one
  // under the PATH.takeover marker, so that one contender wins and the path never disappears.
  // Throws LockHeld when another live owner holds it, fnvlp::Error when the file cannot be created.
  // With owner.heartbeat_s > 0 a thread refreshes the file's mtime that often and calls `on_lost`
  // (from that thread) if the file is no longer this lock (taken over or removed by hand).
  static std::unique_ptr<OwnerLock> take(const std::string& path, const LockOwner& owner,
                                         const HostView& here = current_host(),
                                         std::function<void(const std::string&)> on_lost = {});
  ~OwnerLock();  // release()
  OwnerLock(const OwnerLock&) = delete;
  OwnerLock& operator=(const OwnerLock&) = delete;

  // Removes the file if it is still this lock; idempotent.
  void release();
  // Forgets the file without removing it: its owner is another process (the shell that ran
  // fnvlp-lock take), whose end or release the next job judges.
  void hand_over();
  const std::string& path() const { return path_; }
  const LockOwner& owner() const { return owner_; }
  // The owner described in a previous takeover, "" when the file was free.
  const std::string& took_over_from() const { return took_over_from_; }

 private:
  OwnerLock(std::string path, LockOwner owner, int fd);
  bool still_ours() const;
  void beat(std::function<void(const std::string&)> on_lost);

  std::string path_;
  LockOwner owner_;
  int fd_ = -1;
  std::string took_over_from_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

// A lock file as found: the owner (nullopt when it does not parse) and its age.
struct FoundLock {
  std::optional<LockOwner> owner;
  std::string text;
  double age_s = 0;
};
// nullopt when there is no file at `path`. `now`: seconds since the epoch.
std::optional<FoundLock> read_lock(const std::string& path, double now);
// Removes the lock file at `path` if it still holds `judged`'s text (fnvlp-lock clear). Like a
// takeover, the check and the removal happen while this process holds the marker PATH.takeover
// (created with O_EXCL), so that among contenders one acts at a time and none acts on a lock that
// another one has just replaced. False: nothing removed (it changed, or another process holds the
// marker): look again.
bool remove_lock_if_unchanged(const std::string& path, const FoundLock& judged);

// Collective: rank 0 creates `dir` (and its parents) and takes its lock for this process, beating
// every kLockHeartbeatS; every rank learns the outcome. Another live owner: UsageError (exit 2)
// on every rank, naming it; any other failure: CollectiveError. The lock is released when the
// returned object (empty on other ranks) is destroyed; should it be lost while held, the job is
// aborted (Comm::abort(1)), so that it never writes beside another owner.
std::unique_ptr<OwnerLock> own_directory(const Comm& comm, const std::string& dir);
// The same for an output file: FILE.lock, in the file's directory (which must exist).
std::unique_ptr<OwnerLock> own_output_file(const Comm& comm, const std::string& file);

}  // namespace fnvlp::store
