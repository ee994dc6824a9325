#include "fnvlp/similarity/spaces.hpp"

namespace fnvlp::similarity {

KokkosRuntime::KokkosRuntime() {
  if (Kokkos::is_initialized()) return;
    // One host thread: parallelism comes from MPI ranks here (DESIGN.md §5).
#if KOKKOS_VERSION >= 30700
  // Kokkos::InitArguments is deprecated since 3.7 and gone from 4.x without deprecated code.
  Kokkos::initialize(
      Kokkos::InitializationSettings().set_num_threads(1).set_disable_warnings(true));
#else
  Kokkos::InitArguments args;
  args.num_threads = 1;
  args.disable_warnings = true;
  Kokkos::initialize(args);
#endif
  owner_ = true;
}

KokkosRuntime::~KokkosRuntime() {
  if (owner_ && Kokkos::is_initialized()) Kokkos::finalize();
}

}  // namespace fnvlp::similarity
