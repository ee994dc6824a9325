// own_directory() and own_output_file() at any rank count: another live owner is the same usage
// error on every rank, a dead owner's lock is taken over by rank 0 alone, and a directory that
// cannot be made is a collective error (store/run_lock.hpp).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/comm/job_main.hpp"
#include "fnvlp/store/run_lock.hpp"

namespace fs = std::filesystem;
using fnvlp::Comm;
using namespace fnvlp::store;

namespace {

// The same fresh directory on every rank (rank 0 makes it).
std::string fresh_dir(const Comm& comm, const std::string& name) {
  const std::string dir =
      ::testing::TempDir() + "/fnvlp_lock_mpi_" + name + "_np" + std::to_string(comm.size());
  if (comm.is_root()) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  comm.barrier();
  return dir;
}

int64_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return child;
}

// Rank 0 writes a lock naming `pid` on this host.
void plant_lock(const Comm& comm, const std::string& path, int64_t pid) {
  if (comm.is_root())
    std::ofstream(path) << this_process_owner("fnvlp-pretrain", pid, 0).to_json().dump();
  comm.barrier();
}

TEST(OwnDirectory, AnotherLiveOwnerIsTheSameUsageErrorOnEveryRank) {
  Comm comm;
  const std::string run = fresh_dir(comm, "held") + "/run";
  // The live owner: rank 0's own process, under another token (another job's record).
  if (comm.is_root()) fs::create_directories(run);
  int64_t owner_pid = ::getpid();
  comm.bcast(&owner_pid, 1);
  plant_lock(comm, directory_lock_path(run), owner_pid);
  try {
    const auto lock = own_directory(comm, run);
    FAIL() << "rank " << comm.rank() << " owns a directory another live job holds";
  } catch (const fnvlp::UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(run + " is in use by another job: fnvlp-pretrain, pid " +
                        std::to_string(owner_pid)),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("is running"), std::string::npos) << what;
  }
  if (comm.is_root()) EXPECT_TRUE(fs::exists(directory_lock_path(run)));
}

TEST(OwnDirectory, ADeadOwnersLockIsTakenOverByRankZero) {
  Comm comm;
  const std::string run = fresh_dir(comm, "stale") + "/run";
  if (comm.is_root()) fs::create_directories(run);
  int64_t gone = comm.is_root() ? dead_pid() : 0;
  comm.bcast(&gone, 1);
  plant_lock(comm, directory_lock_path(run), gone);
  {
    const auto lock = own_directory(comm, run);
    EXPECT_EQ(lock != nullptr, comm.is_root());
    if (lock) {
      EXPECT_NE(lock->took_over_from().find("pid " + std::to_string(gone)), std::string::npos);
      const auto found = read_lock(directory_lock_path(run), wall_clock_s());
      ASSERT_TRUE(found && found->owner);
      EXPECT_EQ(found->owner->pid, ::getpid());
      EXPECT_GT(found->owner->heartbeat_s, 0);
    }
    comm.barrier();
  }
  comm.barrier();
  if (comm.is_root()) EXPECT_FALSE(fs::exists(directory_lock_path(run)));
}

TEST(OwnDirectory, AnOutputFileAndAnUncreatableDirectory) {
  Comm comm;
  const std::string dir = fresh_dir(comm, "file");
  {
    const auto lock = own_output_file(comm, dir + "/eval.json");
    comm.barrier();
    if (comm.is_root()) EXPECT_TRUE(fs::exists(dir + "/eval.json.lock"));
    EXPECT_THROW(own_output_file(comm, dir + "/eval.json"), fnvlp::UsageError);
  }
  if (comm.is_root()) std::ofstream(dir + "/plain") << "x";
  comm.barrier();
  try {
    own_directory(comm, dir + "/plain/run");
    FAIL() << "a directory under a regular file";
  } catch (const fnvlp::CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot create the directory"), std::string::npos)
        << e.what();
  }
}

}  // namespace
