#include "fnvlp/similarity/spaces.hpp"

namespace fnvlp::similarity {

KokkosRuntime::KokkosRuntime() {
  if (!Kokkos::is_initialized()) {
    Kokkos::InitArguments args;
    args.num_threads = 1;  // parallelism comes from MPI ranks here (DESIGN.md §5)
    args.disable_warnings = true;
    Kokkos::initialize(args);
    owner_ = true;
  }
}

KokkosRuntime::~KokkosRuntime() {
  if (owner_ && Kokkos::is_initialized()) Kokkos::finalize();
}

}  // namespace fnvlp::similarity
