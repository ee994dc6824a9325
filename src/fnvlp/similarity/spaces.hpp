#pragma once
// The one place the similarity kernels learn where they run (DESIGN.md §4). Here Debian's Kokkos
// has only the Serial backend; on clusters the same code builds against OpenMP or CUDA. The GEMM
// that feeds the kernels runs through libtorch on the host, so the simstat driver launches the
// kernels on the host execution space; a CUDA build would move the tiles to DeviceSpace.
#include <Kokkos_Core.hpp>

namespace fnvlp::similarity {

using DeviceSpace = Kokkos::DefaultExecutionSpace;
using HostSpace = Kokkos::DefaultHostExecutionSpace;
// What the simstat driver uses: its tiles come from a host GEMM.
using ExecSpace = HostSpace;

template <typename Space>
using Mem = typename Space::memory_space;

// Views the kernels read and write, always in the memory space of their execution space.
template <typename T, typename Space>
using View1 = Kokkos::View<T*, Mem<Space>>;
template <typename T, typename Space>
using View2 = Kokkos::View<T**, Kokkos::LayoutRight, Mem<Space>>;
// Host buffers owned elsewhere (a torch tensor, a std::vector) seen as views without a copy.
template <typename T>
using HostUnmanaged1 = Kokkos::View<T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
template <typename T>
using HostUnmanaged2 = Kokkos::View<T**, Kokkos::LayoutRight, Kokkos::HostSpace,
                                    Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
template <typename T>
using HostUnmanaged3 = Kokkos::View<T***, Kokkos::LayoutRight, Kokkos::HostSpace,
                                    Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// Initialises Kokkos for the scope of a job when nobody else did (after MPI is up); finalises it
// in the destructor, which must run after every view is gone and before MPI_Finalize.
class KokkosRuntime {
 public:
  KokkosRuntime();
  ~KokkosRuntime();
  KokkosRuntime(const KokkosRuntime&) = delete;
  KokkosRuntime& operator=(const KokkosRuntime&) = delete;

 private:
  bool owner_ = false;
};

}  // namespace fnvlp::similarity
