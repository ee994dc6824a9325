#!/usr/bin/env bash
# Configures and builds fnvlp into ${FNVLP_BUILD_DIR:-build} (Ninja, ccache when present).
# FNVLP_GPU=1: the GPU build (CUDA + NCCL) into ${FNVLP_BUILD_DIR:-build-gpu}, against the CUDA
# libtorch that env/install-gpu.sh installs, or the one Torch_DIR names (a cluster's own).
# FNVLP_KOKKOS=openmp|cuda: simstat's kernels on a Kokkos with that backend (env/install-kokkos.sh;
# cuda needs FNVLP_GPU=1) rather than Debian's Serial one, into ${FNVLP_BUILD_DIR:-...-kokkos-KIND};
# a cluster's own Kokkos: Kokkos_DIR in FNVLP_CMAKE_ARGS instead. FNVLP_BUILD_TARGETS="a b": only
# those targets.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
gpu_args=()
kokkos_args=()
suffix=""
[ -z "${FNVLP_KOKKOS:-}" ] || suffix=-kokkos-$FNVLP_KOKKOS
if [ "${FNVLP_GPU:-0}" = 1 ]; then
  build=${FNVLP_BUILD_DIR:-$root/build-gpu$suffix}
  torch_dir=${Torch_DIR:-$(bash "$root/env/install-gpu.sh" | tail -n 1)}
  # The libtorch's own prefix first: Torch's and Caffe2's configs look for their libraries and
  # configs under the prefix path before their own directory, and would take Debian's from /usr.
  torch_root=$(cd "$torch_dir/../../.." && pwd)
  gpu_args=(-DFNVLP_WITH_CUDA=ON -DFNVLP_WITH_NCCL=ON -DTorch_DIR="$torch_dir"
    -DCMAKE_PREFIX_PATH="$torch_root;$torch_root/share/cmake")
  # ccache with the precompiled torch/torch.h (FNVLP_PCH) of this build.
  export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
else
  build=${FNVLP_BUILD_DIR:-$root/build$suffix}
fi
kokkos_prefix=${FNVLP_KOKKOS_PREFIX:-${XDG_CACHE_HOME:-$HOME/.cache}/fnvlp/kokkos}
if [ -n "${FNVLP_KOKKOS:-}" ]; then
  kokkos_args=(-DKokkos_DIR="$(bash "$root/env/install-kokkos.sh" "$FNVLP_KOKKOS" | tail -n 1)")
elif [ -f "$build/CMakeCache.txt" ] && grep -q "^Kokkos_DIR:[A-Z]*=$kokkos_prefix/" "$build/CMakeCache.txt"; then
  # This directory was last configured with a Kokkos of install-kokkos.sh (env/run-tests.sh builds
  # its CUDA Kokkos leg in the GPU leg's directory): back to the default Kokkos.
  kokkos_args=(-UKokkos_DIR)
fi
# nproc would honour OMP_NUM_THREADS (env/mpi-env.sh sets it to 1): every CPU.
jobs=${FNVLP_JOBS:-$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)}
# ccache hashes the paths under the source root relative to it, so a clone at another path on the
# same machine (CI's fresh clone) reuses the compilations of this one instead of starting cold.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
# FNVLP_CMAKE_ARGS holds several options: word splitting is intended.
# shellcheck disable=SC2086
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="${FNVLP_BUILD_TYPE:-Release}" \
  ${FNVLP_SHARED_DIR:+-DFNVLP_SHARED_DIR="$FNVLP_SHARED_DIR"} "${gpu_args[@]}" "${kokkos_args[@]}" \
  ${FNVLP_CMAKE_ARGS:-}
# FNVLP_BUILD_TARGETS: only these targets (a leg that runs a few tests), else everything.
# shellcheck disable=SC2086
cmake --build "$build" -j "$jobs" ${FNVLP_BUILD_TARGETS:+--target $FNVLP_BUILD_TARGETS}
