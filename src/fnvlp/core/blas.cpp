#include "fnvlp/core/blas.hpp"

#include <dlfcn.h>
#include <strings.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fnvlp {

namespace {

// Set beside OPENBLAS_CORETYPE by the restart: the core OpenBLAS had picked by itself.
constexpr const char* kReplacedVar = "FNVLP_OPENBLAS_REPLACED_CORE";

template <typename Fn>
Fn openblas_symbol(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

}  // namespace

CpuFeatures cpu_features() {
  CpuFeatures f;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  f.avx = __builtin_cpu_supports("avx");
  f.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vl");
#endif
  return f;
}

std::string_view better_openblas_core(std::string_view current, const CpuFeatures& cpu) {
  if (current.size() != 8 || strncasecmp(current.data(), "prescott", 8) != 0) return {};
  // Names OPENBLAS_CORETYPE accepts in x86-64 DYNAMIC_ARCH builds (Debian's 0.3.21 among them);
  // one it did not know would leave the fallback in place, not fail.
  if (cpu.avx512) return "SkylakeX";
  if (cpu.avx2_fma) return "Haswell";
  if (cpu.avx) return "Sandybridge";
  return {};
}

void use_best_blas_kernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;  // the user's choice, or ours already
  const auto corename = openblas_symbol<char* (*)()>("openblas_get_corename");
  if (corename == nullptr) return;  // not OpenBLAS
  const std::string current = corename();
  const std::string_view target = better_openblas_core(current, cpu_features());
  if (target.empty()) return;
  const std::string target_name(target);
  setenv("OPENBLAS_CORETYPE", target_name.c_str(), 1);
  setenv(kReplacedVar, current.c_str(), 1);
  execv("/proc/self/exe", argv);
  const int err = errno;
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv(kReplacedVar);
  std::fprintf(stderr,
               "warning: OpenBLAS runs its generic %s kernels on this CPU; restarting with "
               "OPENBLAS_CORETYPE=%s failed (%s). Set OPENBLAS_CORETYPE=%s yourself.\n",
               current.c_str(), target_name.c_str(), std::strerror(err), target_name.c_str());
}

bool blas_core_was_replaced() { return std::getenv(kReplacedVar) != nullptr; }

std::string blas_description() {
  const auto config = openblas_symbol<char* (*)()>("openblas_get_config");
  if (config == nullptr) return "not OpenBLAS (no openblas_get_config in the process)";
  std::string out = config();
  if (const char* replaced = std::getenv(kReplacedVar)) {
    const char* now = std::getenv("OPENBLAS_CORETYPE");
    out += std::string("; OpenBLAS did not recognise this CPU and fell back to its ") + replaced +
           " kernels, so fnvlp restarted it with OPENBLAS_CORETYPE=" + (now ? now : "?") +
           " (set OPENBLAS_CORETYPE to choose yourself)";
  }
  return out;
}

void set_blas_threads(int n) {
  if (const auto fn = openblas_symbol<void (*)(int)>("openblas_set_num_threads")) fn(n);
}

}  // namespace fnvlp
