#!/usr/bin/env bash
# README command 2: install the Debian packages, build, and run the whole test suite.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The CPUs for builds and ctest, counted before mpi-env.sh sets OMP_NUM_THREADS=1 (which nproc
# honours: every build and ctest below would run one job at a time).
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
export FNVLP_JOBS=${FNVLP_JOBS:-$cores}
bash "$root/env/install-debian.sh"
bash "$root/env/install-python.sh" >/dev/null
bash "$root/env/build.sh"
source "$root/env/mpi-env.sh"
# Without arguments, the unit tests (label gtest) in one process first, in ctest's environment for
# them (tests/CMakeLists.txt), then every other test through ctest; arguments go to ctest alone
# (e.g. -R NAME, -L unit: one process per test).
unit_tests=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  OMPI_MCA_rmaps_base_oversubscribe=1 HDF5_USE_FILE_LOCKING=FALSE OMP_NUM_THREADS=1
  timeout 900 tests/fnvlp_unit_tests --gtest_brief=1)
if [ "$#" -eq 0 ]; then
  (cd "${FNVLP_BUILD_DIR:-$root/build}" && "${unit_tests[@]}" &&
    ctest --output-on-failure -j "$FNVLP_JOBS" --timeout 900 -LE '^gtest$')
else
  (cd "${FNVLP_BUILD_DIR:-$root/build}" && ctest --output-on-failure -j "$FNVLP_JOBS" --timeout 900 "$@")
fi
# The GPU configuration (CUDA + NCCL against the PyTorch wheel's libtorch, env/install-gpu.sh):
# the library and what this leg runs built and linked here (each of its files compiles under the
# CUDA libtorch's headers, the slowest of the legs; the other executables' mains are the CPU
# leg's). What runs is what that configuration changes, on CPU tensors: the unit tests (one
# process: each of ~380 processes would load the CUDA libtorch again), the MPI tests of Comm,
# gradient sync, checkpoints and the export at 2 ranks (the rank counts are the CPU leg's), and
# the gpu label in full (Skipped where there is no GPU).
gpu_targets="fnvlp_unit_tests fnvlp_mpi_tests fnvlp_nccl_tests fnvlp_golden_tests"
gpu_targets+=" fnvlp-pretrain fnvlp-synth fnvlp-shard"
if [ "${FNVLP_SKIP_GPU_BUILD:-0}" != 1 ]; then
  gpu_build=${FNVLP_GPU_BUILD_DIR:-$root/build-gpu}
  FNVLP_GPU=1 FNVLP_BUILD_DIR="$gpu_build" FNVLP_BUILD_TARGETS="$gpu_targets" \
    bash "$root/env/build.sh"
  (cd "$gpu_build" && "${unit_tests[@]}" &&
    ctest --output-on-failure -j "$FNVLP_JOBS" --timeout 900 -L gpu &&
    ctest --output-on-failure --timeout 900 -R '^comm\.np2$')
fi
# simstat against a Kokkos with another backend (env/install-kokkos.sh; label kokkos): OpenMP, its
# kernels on 2 threads per rank; with the GPU configuration, CUDA: the Kokkos sources compiled by
# nvcc (the device path checked by the compiler), their tests Skipped without a GPU, the named
# failure without one checked, and sm_80 and sm_90 code in the Kokkos library and fnvlp-simstat
# (kokkos.cuda_arch: Kokkos aborts on Hopper without sm_90 code).
kokkos_rc=0
# What label kokkos runs: not the whole build again (the executables, the other test programs).
kokkos_targets="fnvlp_unit_tests fnvlp_simstat_mpi_tests fnvlp-simstat"
[ "${FNVLP_SKIP_KOKKOS:-0}" = 1 ] || bash "$root/env/install-kokkos.sh" openmp >/dev/null || kokkos_rc=$?
if [ "$kokkos_rc" = 3 ]; then
  echo "SKIPPED: the Kokkos legs (label kokkos): Kokkos's source could not be downloaded from PyPI"
elif [ "$kokkos_rc" != 0 ]; then
  exit "$kokkos_rc"
elif [ "${FNVLP_SKIP_KOKKOS:-0}" != 1 ]; then
  omp_build=${FNVLP_KOKKOS_BUILD_DIR:-$root/build-kokkos-openmp}
  FNVLP_KOKKOS=openmp FNVLP_BUILD_DIR="$omp_build" FNVLP_BUILD_TARGETS="$kokkos_targets" \
    bash "$root/env/build.sh"
  (cd "$omp_build" && ctest --output-on-failure --timeout 900 -L kokkos)
  if [ "${FNVLP_SKIP_GPU_BUILD:-0}" != 1 ]; then
    # In the GPU leg's directory, reconfigured with the CUDA Kokkos: only the Kokkos sources
    # compile again and the targets relink (a directory of its own compiled the whole library and
    # the unit tests again under the CUDA libtorch); env/build.sh turns the directory back.
    cuda_build=${FNVLP_KOKKOS_CUDA_BUILD_DIR:-$gpu_build}
    FNVLP_GPU=1 FNVLP_KOKKOS=cuda FNVLP_BUILD_DIR="$cuda_build" \
      FNVLP_BUILD_TARGETS="$kokkos_targets fnvlp_cuda_arch_fixture" bash "$root/env/build.sh"
    (cd "$cuda_build" && ctest --output-on-failure --timeout 900 -L kokkos)
  fi
fi
# The libFuzzer targets: a clang build of their own, each a fixed, reproducible run over its corpus
# (seed 1, a set number of inputs, about 30 s each; label fuzz).
if [ "${FNVLP_SKIP_FUZZ:-0}" != 1 ]; then
  bash "$root/env/build-fuzz.sh"
  cd "${FNVLP_FUZZ_BUILD_DIR:-$root/build-fuzz}"
  ctest --output-on-failure -j "$FNVLP_JOBS" -L fuzz
fi
