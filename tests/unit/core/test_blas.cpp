#include "fnvlp/core/blas.hpp"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace {

using fnvlp::better_openblas_core;
using fnvlp::CpuFeatures;

const char* openblas_core() {
  const auto fn = reinterpret_cast<char* (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  return fn ? fn() : nullptr;
}

// The "Core: NAME" lines OpenBLAS prints at start-up with OPENBLAS_VERBOSE=2, in order, from
// `fnvlp-pretrain --help` run with the given environment prefix (one line per program image): a
// job that calls BLAS itself, so OpenBLAS is loaded whichever libtorch (and BLAS) it links.
std::vector<std::string> job_cores(const std::string& env) {
  const std::string cmd = "env -u OPENBLAS_CORETYPE -u FNVLP_OPENBLAS_REPLACED_CORE " + env +
                          " OPENBLAS_VERBOSE=2 '" FNVLP_BINARY_DIR
                          "/jobs/fnvlp-pretrain' --help 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  EXPECT_NE(pipe, nullptr) << cmd;
  if (pipe == nullptr) return {};
  std::string out;
  char buf[4096];
  for (size_t got; (got = fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, got);
  const int status = pclose(pipe);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << cmd << "\n" << out;
  std::vector<std::string> cores;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("Core: ", 0) == 0) cores.push_back(line.substr(6));
  return cores;
}

TEST(Blas, OnlyOpenBlasFallbackIsReplacedAndByWhatTheCpuRuns) {
  CpuFeatures avx512{true, true, true}, avx2{true, true, false}, avx{true, false, false}, sse{};
  EXPECT_EQ(better_openblas_core("Prescott", avx512), "SkylakeX");
  EXPECT_EQ(better_openblas_core("PRESCOTT", avx512), "SkylakeX");
  EXPECT_EQ(better_openblas_core("Prescott", avx2), "Haswell");
  EXPECT_EQ(better_openblas_core("Prescott", avx), "Sandybridge");
  EXPECT_TRUE(better_openblas_core("Prescott", sse).empty());  // a real SSE3-only machine
  // Cores OpenBLAS chose for a model it knows stay, even where wider kernels exist.
  EXPECT_TRUE(better_openblas_core("Haswell", avx512).empty());
  EXPECT_TRUE(better_openblas_core("Zen", avx512).empty());
  EXPECT_TRUE(better_openblas_core("Cooperlake", avx512).empty());
  EXPECT_TRUE(better_openblas_core("Prescott2", avx512).empty());
  EXPECT_TRUE(better_openblas_core("", avx512).empty());
}

// This binary's main() calls use_best_blas_kernels as every job does: whatever OpenBLAS makes of
// this CPU, the process must not be left on the fallback where the CPU runs better kernels.
TEST(Blas, ThisProcessRunsTheBestKernelsItsCpuAllows) {
  const char* core = openblas_core();
  if (core == nullptr) GTEST_SKIP() << "not linked against OpenBLAS";
  if (std::getenv("OPENBLAS_CORETYPE") && !fnvlp::blas_core_was_replaced())
    GTEST_SKIP() << "OPENBLAS_CORETYPE set by the user: " << std::getenv("OPENBLAS_CORETYPE");
  EXPECT_TRUE(better_openblas_core(core, fnvlp::cpu_features()).empty())
      << "OpenBLAS runs its " << core << " kernels: " << fnvlp::blas_description();
  EXPECT_NE(fnvlp::blas_description().find(core), std::string::npos) << fnvlp::blas_description();
}

TEST(Blas, JobsRestartOnTheBestKernelsUnlessTheUserChose) {
  if (openblas_core() == nullptr) GTEST_SKIP() << "not linked against OpenBLAS";
  const std::vector<std::string> cores = job_cores("");
  ASSERT_FALSE(cores.empty()) << "no Core: line from OpenBLAS";
  EXPECT_TRUE(better_openblas_core(cores.back(), fnvlp::cpu_features()).empty())
      << "the job ended on OpenBLAS's " << cores.back() << " kernels";
  // A restart happens only to leave the fallback: at most one, and only from it.
  ASSERT_LE(cores.size(), 2u);
  if (cores.size() == 2) EXPECT_EQ(cores.front(), "Prescott");

  const std::vector<std::string> forced = job_cores("OPENBLAS_CORETYPE=Prescott");
  EXPECT_EQ(forced, std::vector<std::string>{"Prescott"});
}

TEST(Blas, SetThreadsReachesOpenBlasPool) {
  const auto get = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  if (get == nullptr) GTEST_SKIP() << "not linked against OpenBLAS";
  const int before = get(), other = before == 1 ? 2 : 1;
  fnvlp::set_blas_threads(other);
  EXPECT_EQ(get(), other);
  fnvlp::set_blas_threads(before);
  EXPECT_EQ(get(), before);
}

}  // namespace
