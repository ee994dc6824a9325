#include "fnvlp/similarity/spaces.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime_api.h>
#endif

#include "fnvlp/core/error.hpp"

namespace fnvlp::similarity {

namespace {

// Visible devices of the default space's kind; 0 for a host Kokkos.
int device_count() {
#if defined(KOKKOS_ENABLE_CUDA)
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no device: not sticky, cleared for later calls
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

}  // namespace

bool device_available() { return !kDeviceBuild || device_count() > 0; }

KokkosRuntime::KokkosRuntime(int threads) {
  if (Kokkos::is_initialized()) return;
  const int devices = device_count();
  // Without a device, Kokkos's device backend fails deep inside initialize: a named error first.
  FNVLP_CHECK(!kDeviceBuild || devices > 0,
              "this build's Kokkos runs on " << DeviceSpace::name()
                                             << " and no device is visible (run it on a GPU node, "
                                                "or build against a host Kokkos)");
#if KOKKOS_VERSION >= 30700
  // Kokkos::InitArguments is deprecated since 3.7 and gone from 4.x without deprecated code.
  auto settings = Kokkos::InitializationSettings().set_disable_warnings(true);
  if (threads > 0) settings.set_num_threads(threads);
#if KOKKOS_VERSION < 40100
  // Given the device count, Kokkos gives each rank device local_rank % count (the rank on its node
  // from the MPI launcher's or SLURM's environment); 4.1 and later do so by default.
  if (devices > 0) settings.set_num_devices(devices);
#endif
  Kokkos::initialize(settings);
#else
  Kokkos::InitArguments args;
  args.num_threads = threads > 0 ? threads : -1;
  args.disable_warnings = true;
  if (devices > 0) args.ndevices = devices;  // device local_rank % devices, as above
  Kokkos::initialize(args);
#endif
  owner_ = true;
}

KokkosRuntime::~KokkosRuntime() {
  if (owner_ && Kokkos::is_initialized()) Kokkos::finalize();
}

}  // namespace fnvlp::similarity
