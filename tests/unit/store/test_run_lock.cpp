// Ownership of an output (store/run_lock.hpp): when an owner is gone, the refusal naming a live
// one, the takeover of a dead one's lock by exactly one of several contenders, the heartbeat and
// a lost lock.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "fnvlp/store/run_lock.hpp"

namespace fs = std::filesystem;
using namespace fnvlp::store;
using Pid = HostView::Pid;

namespace {

std::string fresh_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/fnvlp_lock_" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A host view of "n1" whose pid probe and SLURM answer what the test says.
HostView fake_host(Pid pid_state, std::optional<std::string> slurm = std::nullopt) {
  HostView h;
  h.host = "n1";
  h.boot_id = "boot-a";
  h.slurm_cluster = "c";
  h.probe = [pid_state](int64_t, int64_t) { return pid_state; };
  h.slurm_state = [slurm](const std::string&) { return slurm; };
  return h;
}

LockOwner owner_on(const std::string& host, int64_t pid) {
  LockOwner o;
  o.program = "fnvlp-pretrain";
  o.host = host;
  o.boot_id = "boot-a";
  o.pid = pid;
  o.slurm_cluster = "c";
  o.token = "t" + std::to_string(pid);
  return o;
}

// A pid that was this process's child and has been reaped: no process has it now.
int64_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return child;
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

}  // namespace

TEST(RunLock, OnItsOwnHostThePidDecides) {
  const LockOwner o = owner_on("n1", 42);
  const OwnerVerdict gone = judge_owner(o, 1e6, fake_host(Pid::kGone, "RUNNING"));
  EXPECT_TRUE(gone.gone);
  EXPECT_NE(gone.why.find("process 42 on n1 is not running"), std::string::npos) << gone.why;
  // Alive: held, even with no heartbeat for a long time and SLURM saying the job ended.
  const OwnerVerdict alive = judge_owner(o, 1e6, fake_host(Pid::kAlive, ""));
  EXPECT_FALSE(alive.gone);
  EXPECT_NE(alive.why.find("is running"), std::string::npos) << alive.why;
  EXPECT_TRUE(judge_owner(o, 0, fake_host(Pid::kReused)).gone);
  HostView rebooted = fake_host(Pid::kAlive);
  rebooted.boot_id = "boot-b";
  const OwnerVerdict reboot = judge_owner(o, 0, rebooted);
  EXPECT_TRUE(reboot.gone);
  EXPECT_NE(reboot.why.find("restarted"), std::string::npos) << reboot.why;
}

TEST(RunLock, OnAnotherHostSlurmDecidesThenTheHeartbeat) {
  LockOwner o = owner_on("n2", 42);
  o.slurm_job = "77";
  o.slurm_step = "0";
  o.slurm_restart = "0";
  // Another job: its state.
  EXPECT_FALSE(judge_owner(o, 0, fake_host(Pid::kGone, "RUNNING")).gone);
  EXPECT_FALSE(judge_owner(o, 0, fake_host(Pid::kGone, "SUSPENDED")).gone);
  const OwnerVerdict pending = judge_owner(o, 0, fake_host(Pid::kGone, "PENDING"));
  EXPECT_TRUE(pending.gone);
  EXPECT_NE(pending.why.find("SLURM job 77 is PENDING"), std::string::npos) << pending.why;
  const OwnerVerdict ended = judge_owner(o, 0, fake_host(Pid::kGone, ""));
  EXPECT_TRUE(ended.gone);
  EXPECT_NE(ended.why.find("SLURM no longer knows it"), std::string::npos) << ended.why;
  // The same job: a requeue (another restart count) ends the previous allocation first.
  HostView same_job = fake_host(Pid::kGone, "RUNNING");
  same_job.slurm_job = "77";
  same_job.slurm_step = "0";
  same_job.slurm_restart = "1";
  const OwnerVerdict requeued = judge_owner(o, 0, same_job);
  EXPECT_TRUE(requeued.gone);
  EXPECT_NE(requeued.why.find("requeued"), std::string::npos) << requeued.why;
  // The same allocation, another step: that step's state.
  same_job.slurm_restart = "0";
  same_job.slurm_step = "1";
  EXPECT_FALSE(judge_owner(o, 0, same_job).gone);
  same_job.slurm_state = [](const std::string& id) {
    return id == "77.0" ? std::optional<std::string>("") : std::nullopt;
  };
  EXPECT_TRUE(judge_owner(o, 0, same_job).gone);
  // SLURM cannot be asked (or it is another cluster's job): the heartbeat's lease.
  o.heartbeat_s = 30;
  EXPECT_FALSE(judge_owner(o, 299, fake_host(Pid::kGone)).gone);
  const OwnerVerdict silent = judge_owner(o, 301, fake_host(Pid::kGone));
  EXPECT_TRUE(silent.gone);
  EXPECT_NE(silent.why.find("no heartbeat for 301 s, past the 300 s lease"), std::string::npos)
      << silent.why;
  o.slurm_cluster = "other";
  EXPECT_TRUE(judge_owner(o, 301, fake_host(Pid::kGone, "RUNNING")).gone);
  // An owner that does not beat, on a host that cannot be probed: never judged gone.
  o.heartbeat_s = 0;
  const OwnerVerdict unknown = judge_owner(o, 1e7, fake_host(Pid::kGone));
  EXPECT_FALSE(unknown.gone);
  EXPECT_NE(unknown.why.find("cannot be probed"), std::string::npos) << unknown.why;
}

TEST(RunLock, TheProbeKnowsLiveDeadAndReusedPids) {
  const HostView here = current_host();
  const LockOwner me = this_process_owner("test", ::getpid(), 0);
  ASSERT_GT(me.pid_start, 0);
  EXPECT_EQ(here.probe(me.pid, me.pid_start), Pid::kAlive);
  EXPECT_EQ(here.probe(me.pid, me.pid_start + 1), Pid::kReused);
  EXPECT_EQ(here.probe(dead_pid(), 0), Pid::kGone);
  EXPECT_EQ(here.host, me.host);
  EXPECT_FALSE(me.boot_id.empty());
}

TEST(RunLock, ASecondOwnerIsRefusedNamingTheFirst) {
  const std::string dir = fresh_dir("refused");
  const std::string path = directory_lock_path(dir);
  const LockOwner me = this_process_owner("fnvlp-pretrain", ::getpid(), 0);
  auto first = OwnerLock::take(path, me);
  ASSERT_TRUE(fs::exists(path));
  try {
    OwnerLock::take(path, this_process_owner("fnvlp-pretrain", ::getpid(), 0));
    FAIL() << "a second owner took a live owner's lock";
  } catch (const LockHeld& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(dir + " is in use by another job"), std::string::npos) << what;
    EXPECT_NE(what.find("pid " + std::to_string(::getpid()) + " on " + me.host), std::string::npos)
        << what;
    EXPECT_NE(what.find("fnvlp-lock clear --force " + path), std::string::npos) << what;
  }
  // The first owner's record is untouched, and released with it.
  const auto found = read_lock(path, wall_clock_s());
  ASSERT_TRUE(found && found->owner);
  EXPECT_EQ(found->owner->token, me.token);
  first.reset();
  EXPECT_FALSE(fs::exists(path));
}

TEST(RunLock, ADeadOwnersLockIsTakenOverByExactlyOneContender) {
  const std::string dir = fresh_dir("takeover");
  const std::string path = directory_lock_path(dir);
  const int64_t dead = 999999001;
  HostView here = fake_host(Pid::kAlive);
  here.probe = [dead](int64_t pid, int64_t) { return pid == dead ? Pid::kGone : Pid::kAlive; };
  for (int round = 0; round < 50; ++round) {
    write_text(path, owner_on("n1", dead).to_json().dump());
    std::vector<std::thread> threads;
    std::atomic<int> ready{0}, won{0}, refused{0};
    std::vector<std::unique_ptr<OwnerLock>> locks(6);
    for (int i = 0; i < 6; ++i)
      threads.emplace_back([&, i] {
        for (++ready; ready < 6;) std::this_thread::yield();  // all start at once
        try {
          locks[i] = OwnerLock::take(path, owner_on("n1", 1000 + i), here);
          ++won;
        } catch (const LockHeld&) {
          ++refused;
        }
      });
    for (auto& t : threads) t.join();
    ASSERT_EQ(won.load(), 1) << "round " << round;
    EXPECT_EQ(refused.load(), 5);
    for (auto& l : locks)
      if (l) {
        EXPECT_NE(l->took_over_from().find("pid 999999001 on n1"), std::string::npos);
        EXPECT_EQ(read_lock(path, wall_clock_s())->owner->token, l->owner().token);
      }
    locks.clear();
    EXPECT_FALSE(fs::exists(path));
    EXPECT_FALSE(fs::exists(path + ".takeover"));
  }
}

TEST(RunLock, ARealDeadPidAndAnOldUnreadableFileAreTakenOver) {
  const std::string dir = fresh_dir("stale");
  const std::string path = directory_lock_path(dir);
  LockOwner gone = this_process_owner("fnvlp-pretrain", dead_pid(), 0);
  write_text(path, gone.to_json().dump());
  auto lock = OwnerLock::take(path, this_process_owner("fnvlp-pretrain", ::getpid(), 0));
  EXPECT_NE(lock->took_over_from().find("pid " + std::to_string(gone.pid)), std::string::npos);
  lock.reset();
  // A creator that died before writing its record: taken over once the file is old.
  write_text(path, "");
  const struct timespec old[2] = {{0, UTIME_OMIT}, {static_cast<time_t>(wall_clock_s()) - 60, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), old, 0), 0);
  lock = OwnerLock::take(path, this_process_owner("fnvlp-pretrain", ::getpid(), 0));
  EXPECT_EQ(lock->took_over_from(), "an unreadable lock");
}

TEST(RunLock, TheHeartbeatRefreshesTheFileAndNoticesALostLock) {
  const std::string dir = fresh_dir("beat");
  const std::string path = directory_lock_path(dir);
  std::atomic<bool> lost{false};
  std::string why;
  auto lock = OwnerLock::take(path, this_process_owner("test", ::getpid(), 0.05), current_host(),
                              [&](const std::string& w) {
                                why = w;
                                lost = true;
                              });
  const struct timespec old[2] = {{0, UTIME_OMIT}, {static_cast<time_t>(wall_clock_s()) - 600, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), old, 0), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_LT(read_lock(path, wall_clock_s())->age_s, 1.0) << "no heartbeat refreshed the mtime";
  EXPECT_FALSE(lost);
  // Replaced behind its back (by hand, or a takeover): the owner hears of it.
  fs::remove(path);
  write_text(path, owner_on("n9", 7).to_json().dump());
  for (int i = 0; i < 100 && !lost; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(lost);
  EXPECT_NE(why.find("is now held by fnvlp-pretrain, pid 7 on n9"), std::string::npos) << why;
  lock.reset();  // not its file any more: left alone
  EXPECT_TRUE(fs::exists(path));
}
