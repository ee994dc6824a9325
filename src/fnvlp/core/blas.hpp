#pragma once
// OpenBLAS set-up shared by every job: its thread count and the kernels it runs.
//
// Debian's OpenBLAS is built with DYNAMIC_ARCH: at load time it picks kernels for the CPU model it
// recognises and falls back to its generic SSE3 "Prescott" kernels for a model it does not know.
// OpenBLAS 0.3.21 (bookworm) does not know Intel's Emerald Rapids (family 6, model 207), for one:
// there SGEMM ran at 56.6 GFLOP/s on Prescott kernels against 145 GFLOP/s on SkylakeX kernels
// (one thread, 2080 x 384 x 128), and fnvlp-pretrain (tiny preset, 1 rank) ran 56 samples/s
// against 150 with the restart below. Nothing fails, so nobody notices. The kernels are chosen
// once, before main(), from the OPENBLAS_CORETYPE environment variable; hence the restart below.
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "fnvlp/core/error.hpp"

namespace fnvlp {

// The x86 vector extensions that decide which OpenBLAS kernels a CPU can run (and the OS
// enables: the compiler's CPU test checks the saved register state too).
struct CpuFeatures {
  bool avx = false;
  bool avx2_fma = false;  // AVX2 and FMA3, OpenBLAS's Haswell kernels
  bool avx512 = false;    // AVX-512 F, CD, BW, DQ and VL, its SkylakeX kernels
};

CpuFeatures cpu_features();

// The OpenBLAS core to ask for instead of `current` (OpenBLAS's own name of its kernels, as
// openblas_get_corename() returns it), or an empty view to keep `current`. Only OpenBLAS's
// fallback for an unknown x86-64 model ("Prescott") is replaced: any other core is a choice the
// library made for a model it knows.
std::string_view better_openblas_core(std::string_view current, const CpuFeatures& cpu);

// Where OpenBLAS fell back to its Prescott kernels on a CPU that runs better ones and the user
// did not set OPENBLAS_CORETYPE: sets OPENBLAS_CORETYPE and re-executes this program (same pid,
// same arguments and environment otherwise), so this returns only where nothing needed changing
// or the restart failed (then on the fallback kernels, with a warning on stderr). Call it first
// in main(), before MPI is initialised and before any thread starts. A no-op for other BLAS
// libraries.
void use_best_blas_kernels(char** argv);

// One line for the job log, e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY SkylakeX
// MAX_THREADS=64", plus what use_best_blas_kernels changed, if anything.
std::string blas_description();
// True where this process runs on kernels that use_best_blas_kernels chose.
bool blas_core_was_replaced();

// A matrix dimension as CBLAS's int, refused (naming `what`) where it does not fit.
inline int blas_int(int64_t v, const char* what) {
  FNVLP_CHECK(v >= 0 && v <= std::numeric_limits<int>::max(),
              what << ": dimension " << v << " outside CBLAS's int range");
  return static_cast<int>(v);
}

// torch::set_num_threads does not reach OpenBLAS's own thread pool: without this a rank spawns
// one BLAS thread per core and ranks fight over cores (1.4-2.2x slower steps measured here).
void set_blas_threads(int n);

}  // namespace fnvlp
