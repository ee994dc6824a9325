#!/usr/bin/env bash
# Builds fnvlp on a cluster against the libraries its environment provides (issue 29): modules
# (`module load openmpi hdf5 kokkos ...`, site names) or the Spack environment of env/spack.yaml
# (`spack env activate fnvlp`), found through CMAKE_PREFIX_PATH, which both set. No apt, no sudo.
# libtorch: Torch_DIR when set (the cluster's libtorch), else the one of the `python3` on PATH
# (torch.utils.cmake_prefix_path, e.g. Spack's py-torch). Then `module use env/modules; module
# load fnvlp` puts the executables on PATH for the SLURM scripts.
# Usage: [FNVLP_BUILD_DIR=DIR] [Torch_DIR=DIR] [FNVLP_CMAKE_ARGS=...] bash env/cluster-build.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
die() {
  echo "cluster-build: $*" >&2
  exit 1
}
for tool in cmake ninja mpicc; do
  command -v "$tool" >/dev/null ||
    die "$tool not on PATH: load the modules that provide it (or 'spack env activate fnvlp', env/spack.yaml)"
done
if [ -z "${Torch_DIR:-}" ]; then
  prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null) ||
    die "no libtorch: set Torch_DIR to the directory of TorchConfig.cmake, or put a python3 with torch on PATH"
  Torch_DIR=$prefix/Torch
fi
[ -f "$Torch_DIR/TorchConfig.cmake" ] || die "Torch_DIR=$Torch_DIR holds no TorchConfig.cmake"
echo "cluster-build: libtorch from $Torch_DIR, MPI $(command -v mpicc), CMAKE_PREFIX_PATH=${CMAKE_PREFIX_PATH:-}"
export FNVLP_CMAKE_ARGS="-DTorch_DIR=$Torch_DIR -DFNVLP_BUILD_TESTS=${FNVLP_BUILD_TESTS:-OFF} ${FNVLP_CMAKE_ARGS:-}"
exec bash "$root/env/build.sh"
