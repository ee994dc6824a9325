#pragma once
// The one place the similarity kernels learn where they run (ARCHITECTURE.md §8, §11). Debian's
// Kokkos (3.4) has only the Serial backend; env/install-kokkos.sh builds Kokkos 3.4.01 with OpenMP
// or CUDA, and on clusters the same code builds against the site's Kokkos. The simstat driver runs
// on the default execution space (Params::host: the host space). Where that space can run host code
// (Serial, OpenMP) it takes the fast path: similarities from a host BLAS GEMM, AVX2 chunk tests.
// Elsewhere (CUDA, HIP, SYCL) it takes the generic path: similarities from a Kokkos kernel in the
// space's memory, the portable chunk test. The choice is made at compile time (kOnHost), so a
// device build never compiles a host call into a kernel.
#include <Kokkos_Core.hpp>
#include <cstdint>
#include <cstring>

namespace fnvlp::similarity {

using DeviceSpace = Kokkos::DefaultExecutionSpace;
using HostSpace = Kokkos::DefaultHostExecutionSpace;
// What the simstat driver and row_order_statistics use.
using ExecSpace = DeviceSpace;

template <typename Space>
using Mem = typename Space::memory_space;

// Whether kernels launched on Space run on the host and may call host code (AVX2, BLAS).
template <typename Space>
inline constexpr bool kOnHost = Kokkos::SpaceAccessibility<Space, Kokkos::HostSpace>::accessible;

// Views the kernels read and write, always in the memory space of their execution space.
template <typename T, typename Space>
using View1 = Kokkos::View<T*, Mem<Space>>;
template <typename T, typename Space>
using View2 = Kokkos::View<T**, Kokkos::LayoutRight, Mem<Space>>;
template <typename T, typename Space>
using View3 = Kokkos::View<T***, Kokkos::LayoutRight, Mem<Space>>;
// Host buffers owned elsewhere (a torch tensor, a std::vector) seen as views without a copy; they
// reach a kernel only through create_mirror_view_and_copy / deep_copy into Mem<Space> (a no-op
// where Space is a host space).
template <typename T>
using HostUnmanaged1 = Kokkos::View<T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
template <typename T>
using HostUnmanaged2 = Kokkos::View<T**, Kokkos::LayoutRight, Kokkos::HostSpace,
                                    Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
template <typename T>
using HostUnmanaged3 = Kokkos::View<T***, Kokkos::LayoutRight, Kokkos::HostSpace,
                                    Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// Kokkos 3.7 moved the math functions from Kokkos::Experimental into Kokkos, and 4.x (without
// deprecated code) has only the new names; Debian's 3.4 has only the old ones.
#if KOKKOS_VERSION >= 30700
namespace kmath = ::Kokkos;
#else
namespace kmath = ::Kokkos::Experimental;
#endif

// The quiet NaN of std::numeric_limits<float>::quiet_NaN() (bits 0x7fc00000), callable in a kernel:
// std::numeric_limits is host code, and Kokkos 3.4 has no quiet_NaN trait.
KOKKOS_INLINE_FUNCTION float quiet_nan() {
  const uint32_t bits = 0x7fc00000u;
  float v;
  memcpy(&v, &bits, sizeof v);
  return v;
}

// Whether the default execution space is a device (a Kokkos built with CUDA, HIP or SYCL).
inline constexpr bool kDeviceBuild = !kOnHost<DeviceSpace>;

// Whether the default execution space can run here: always for a host Kokkos; for a device Kokkos,
// whether a device is visible (checked without initialising Kokkos, which aborts without one).
bool device_available();

// Initialises Kokkos for the scope of a job when nobody else did (after MPI is up); finalises it
// in the destructor, which must run after every view is gone and before MPI_Finalize. `threads`:
// the threads of a threaded host backend (OpenMP); <= 0 leaves them to Kokkos (OMP_NUM_THREADS).
// Serial and device backends ignore it. Throws Error, naming the backend, where the default space
// is a device and none is visible.
class KokkosRuntime {
 public:
  explicit KokkosRuntime(int threads = 1);
  ~KokkosRuntime();
  KokkosRuntime(const KokkosRuntime&) = delete;
  KokkosRuntime& operator=(const KokkosRuntime&) = delete;

 private:
  bool owner_ = false;
};

}  // namespace fnvlp::similarity
