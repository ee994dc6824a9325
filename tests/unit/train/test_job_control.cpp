// Job control: stop signals, the watchdog (in a forked child, since it ends its process) and the
// non-finite loss guard. The run directory files are tested in tests/unit/store/test_run_dir.cpp.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <limits>
#include <new>
#include <sstream>
#include <thread>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/comm/watchdog.hpp"
#include "fnvlp/core/log.hpp"
#include "fnvlp/core/progress.hpp"
#include "fnvlp/train/failure.hpp"
#include "fnvlp/train/non_finite.hpp"
#include "fnvlp/train/signals.hpp"

namespace fs = std::filesystem;
using namespace fnvlp::train;
using fnvlp::kExitWatchdog;
using fnvlp::Watchdog;

namespace {

std::string fresh_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/fnvlp_jobctl_" + name;
  fs::remove_all(dir);
  return dir;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// --- signals ------------------------------------------------------------------------------------

TEST(StopRequest, SignalsSetTheFlagAndRanksAgree) {
  fnvlp::Comm comm;
  struct sigaction before {};
  sigaction(SIGUSR1, nullptr, &before);
  StopRequest::install();
  StopRequest::install();  // idempotent
  EXPECT_TRUE(StopRequest::installed());
  StopRequest::clear();
  EXPECT_FALSE(StopRequest::pending());
  EXPECT_FALSE(agree_stop(comm));

  StopRequest::raise_for_test(SIGUSR1);
  EXPECT_TRUE(StopRequest::pending());
  EXPECT_EQ(StopRequest::signal_number(), SIGUSR1);
  EXPECT_TRUE(agree_stop(comm));

  StopRequest::clear();
  StopRequest::raise_for_test(SIGTERM);  // scancel: the process survives, the flag is set
  EXPECT_EQ(StopRequest::signal_number(), SIGTERM);
  EXPECT_TRUE(agree_stop(comm));
  StopRequest::clear();

  StopRequest::uninstall();
  EXPECT_FALSE(StopRequest::installed());
  struct sigaction now {};
  sigaction(SIGUSR1, nullptr, &now);
  EXPECT_EQ(now.sa_handler, before.sa_handler);  // the previous handler is back
}

// --- watchdog -----------------------------------------------------------------------------------

struct ChildResult {
  int exit_code = -1;
  double seconds = 0;
  std::string stderr_text;
};

// Runs `body` in a forked child with stderr captured; the child never touches MPI.
ChildResult run_in_child(const std::string& name, const std::function<void()>& body) {
  const std::string err = fresh_dir(name) + ".stderr";
  const auto t0 = std::chrono::steady_clock::now();
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    FILE* f = std::freopen(err.c_str(), "w", stderr);
    if (!f) std::_Exit(99);
    body();
    std::_Exit(0);
  }
  ChildResult r;
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.stderr_text = slurp(err);
  return r;
}

TEST(Watchdog, FiresOnAStalledRankWithItsExitCodeRankAndStep) {
  const std::string logs = fresh_dir("wd_logs");
  const ChildResult r = run_in_child("wd_fire", [&] {
    fnvlp::log::init(3, 4, logs);
    Watchdog dog(3, 0.3, [](int code) {
      std::fflush(nullptr);
      std::_Exit(code);
    });
    for (int64_t step = 1; step <= 42; ++step) dog.beat(step, "forward");
    std::this_thread::sleep_for(std::chrono::seconds(10));  // the stall
  });
  EXPECT_EQ(r.exit_code, kExitWatchdog);
  EXPECT_LT(r.seconds, 5.0);
  const std::string log = slurp(logs + "/rank-3.log");
  for (const std::string& text : {log, r.stderr_text}) {
    EXPECT_NE(text.find("watchdog: rank 3 made no progress"), std::string::npos) << text;
    EXPECT_NE(text.find("last reported step 42, phase 'forward'"), std::string::npos) << text;
  }
}

TEST(Watchdog, ExitsEvenWhenTheAbortHangs) {
  const ChildResult r = run_in_child("wd_hang", [] {
    fnvlp::log::init(0, 1);
    Watchdog dog(0, 0.2, [](int) { std::this_thread::sleep_for(std::chrono::seconds(30)); });
    dog.set_abort_grace(0.2);
    dog.beat(7, "allreduce");
    std::this_thread::sleep_for(std::chrono::seconds(10));
  });
  EXPECT_EQ(r.exit_code, kExitWatchdog);
  EXPECT_LT(r.seconds, 5.0);
  EXPECT_NE(r.stderr_text.find("abort did not end the process"), std::string::npos)
      << r.stderr_text;
}

TEST(Watchdog, QuietWhileBeatingAndDuringLongPhasesAndStopsPromptly) {
  std::atomic<int> fired{0};
  const auto t0 = std::chrono::steady_clock::now();
  {
    Watchdog dog(0, 0.5, [&](int) { fired++; });
    for (int i = 0; i < 20; ++i) {  // 1 s of steps, each well inside the timeout
      dog.beat(i, "step");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    {
      auto save = dog.long_phase("checkpoint save");  // disarmed
      std::this_thread::sleep_for(std::chrono::milliseconds(900));
    }
    {
      auto save = dog.long_phase("checkpoint save", 5.0);  // a longer limit
      std::this_thread::sleep_for(std::chrono::milliseconds(700));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // re-armed with a fresh beat
    EXPECT_FALSE(dog.fired());
  }
  EXPECT_EQ(fired.load(), 0);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 4.0);

  // A long phase with its own limit still catches a hang inside it.
  Watchdog dog(0, 10.0, [&](int code) { fired = code; });
  {
    auto save = dog.long_phase("checkpoint save", 0.2);
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
  }
  EXPECT_TRUE(dog.fired());
  EXPECT_EQ(fired.load(), kExitWatchdog);

  Watchdog off(0, 0, [&](int) { fired = -1; });  // disabled: no thread at all
  EXPECT_FALSE(off.enabled());
}

// What a failed run's summary.json says: the phase (a long phase an exception left, else the last
// beat), and for running out of memory the memory, the batch size and a hint.
TEST(Watchdog, TheFailurePhaseIsTheOneAnExceptionLeft) {
  Watchdog dog(0, 0, [](int) {});
  dog.beat(7, "step");
  EXPECT_EQ(dog.failure_phase(), "step");
  try {
    auto save = dog.long_phase("checkpoint");
    throw std::runtime_error("disk full");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(dog.failure_phase(), "checkpoint");
  EXPECT_EQ(dog.last_step(), 7);

  const FailureReport plain =
      describe_failure(std::runtime_error("x"), 1, dog, 16, Precision::kFp32);
  EXPECT_EQ(plain.error, "x");
  EXPECT_EQ(plain.extra["phase"], "checkpoint");
  EXPECT_FALSE(plain.extra.contains("out_of_memory"));
  const FailureReport oom = describe_failure(std::bad_alloc(), 1, dog, 16, Precision::kFp32);
  const auto& o = oom.extra["out_of_memory"];
  EXPECT_EQ(o["device"], "host");
  EXPECT_EQ(o["batch_size"], 16);
  EXPECT_EQ(o["step"], 7);
  EXPECT_GT(o["memory_in_use_bytes"].get<int64_t>(), 0);
  EXPECT_GE(o["memory_total_bytes"].get<int64_t>(), o["memory_in_use_bytes"].get<int64_t>());
  EXPECT_NE(oom.error.find("out of memory on rank 1 (host) in phase 'checkpoint' at step 7"),
            std::string::npos)
      << oom.error;
  // Through a collective only the text is left: still recognised, CUDA's by its words.
  const FailureReport cuda =
      describe_failure(std::runtime_error("rank 0: CUDA out of memory. Tried to allocate 2.00 GiB"),
                       0, dog, 64, Precision::kFp32);
  EXPECT_TRUE(cuda.extra.contains("out_of_memory"));
}

// The tools' watchdog (fnvlp-shard, -eval, -simstat): progress() from any thread beats it; when the
// reports stop it fires naming the last one; a second one in the process is refused.
TEST(ToolWatchdog, ProgressKeepsItQuietAndItFiresOnTheLastReport) {
  const ChildResult r = run_in_child("tool_wd", [] {
    fnvlp::log::init(2, 4);
    fnvlp::ToolWatchdog dog(2, 0.4, [](int code) {
      std::fflush(nullptr);
      std::_Exit(code);
    });
    for (int i = 0; i < 30; ++i) {  // 1.5 s of reports, each well inside the limit
      std::thread([] { fnvlp::progress("simstat: candidate tiles"); }).join();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::fprintf(stderr, "quiet while reporting\n");
    try {
      fnvlp::ToolWatchdog second(2, 1.0, [](int) {});
      std::fprintf(stderr, "second watchdog accepted\n");
    } catch (const fnvlp::Error&) {
      std::fprintf(stderr, "second watchdog refused\n");
    }
    fnvlp::progress("eval: encoding texts");
    std::this_thread::sleep_for(std::chrono::seconds(10));  // the stall
  });
  EXPECT_EQ(r.exit_code, kExitWatchdog);
  EXPECT_LT(r.seconds, 6.0);
  EXPECT_NE(r.stderr_text.find("quiet while reporting"), std::string::npos) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find("second watchdog refused"), std::string::npos) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find("watchdog: rank 2 made no progress"), std::string::npos)
      << r.stderr_text;
  EXPECT_NE(r.stderr_text.find("last reported progress report 31, phase 'eval: encoding texts'"),
            std::string::npos)
      << r.stderr_text;
}

// --- non-finite guard ---------------------------------------------------------------------------

TEST(NonFiniteGuard, AgreesAndCountsConsecutiveSkips) {
  fnvlp::Comm comm;
  EXPECT_TRUE(all_finite(comm, 1.5));
  EXPECT_FALSE(all_finite(comm, std::numeric_limits<double>::quiet_NaN()));
  EXPECT_FALSE(all_finite(comm, std::numeric_limits<double>::infinity()));
  // One rank's NaN is every rank's skip.
  EXPECT_EQ(all_finite(comm, comm.rank() == comm.size() - 1 ? NAN : 0.0), false);

  SkipCounter skips(3);
  skips.record(true, 1);
  skips.record(true, 2);
  skips.record(false, 3);  // a good step resets the run
  skips.record(true, 4);
  skips.record(true, 5);
  EXPECT_EQ(skips.total(), 4);
  EXPECT_EQ(skips.consecutive(), 2);
  try {
    skips.record(true, 6);
    FAIL() << "no error after 3 consecutive skips";
  } catch (const fnvlp::CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("3 consecutive steps (last: step 6"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(SkipCounter(0), fnvlp::Error);
}

}  // namespace
