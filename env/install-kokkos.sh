#!/usr/bin/env bash
# Installs a Kokkos with a parallel backend for simstat (FNVLP_KOKKOS=openmp|cuda env/build.sh):
#   openmp  Serial + OpenMP: simstat's kernels on the host's threads
#   cuda    Serial + CUDA (built by the toolkit's nvcc 13 with sm_80 and sm_90 code and compute_90
#           PTX: Kokkos's start-up check passes on A100s and H100/H200s): simstat on the GPU
# Debian's Kokkos (Trilinos 13.2) is Serial only and bookworm has no other; no Kokkos 4 or 5
# source is reachable from these machines (Debian's kokkos 5.2 sources are not served, its binaries
# need glibc 2.38). The one Kokkos source the registries serve is the copy of Kokkos 3.4.01 inside
# PyPI's pykokkos-base 0.0.7 sdist: this script downloads it (sha256 pinned), builds the chosen
# backends and installs them under ${FNVLP_KOKKOS_PREFIX:-~/.cache/fnvlp/kokkos}/3.4.01-BACKEND
# (cuda: 3.4.01-cuda-sm80-sm90, so that an install of another architecture set is not reused).
# CUDA 13 needs env/kokkos/3.4.01-cuda13.patch, Hopper env/kokkos/3.4.01-sm90.patch (see there).
# A cluster user points Kokkos_DIR at the cluster's Kokkos instead. Prints the install's Kokkos
# CMake directory on its last line. Idempotent.
# Exit 3: the download failed (no network); any other failure is an error of the build.
set -euo pipefail
backend=${1:?usage: install-kokkos.sh openmp|cuda}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
version=3.4.01
url=https://files.pythonhosted.org/packages/1d/2e/e3e6035ba1b7358033ad15e07ed0d49ba1b1298fdfa9ea8814a8ccc39df8/pykokkos-base-0.0.7.tar.gz
sha256=6339daced1e81a2748f381847d8717cd77d824407da3c263b9491b5630c642b0
base=${FNVLP_KOKKOS_PREFIX:-${XDG_CACHE_HOME:-$HOME/.cache}/fnvlp/kokkos}
build_id=$backend
patches=()
case $backend in
  openmp) args=(-DKokkos_ENABLE_OPENMP=ON -DBUILD_SHARED_LIBS=ON) ;;
  cuda)
    nvcc=${CUDACXX:-/usr/local/cuda/bin/nvcc}
    [ -x "$nvcc" ] || { echo "install-kokkos: no nvcc at $nvcc (set CUDACXX)" >&2; exit 1; }
    # Kokkos 3.4 compiles CUDA through its nvcc_wrapper (patched to sm_80: nvcc 13 has no sm_35)
    # for one architecture, Ampere at most: sm_90 code and compute_90 PTX come as -gencode
    # options beside it (nvcc_wrapper patched to pass several).
    sm90="-gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_90,code=compute_90"
    args=(-DKokkos_ENABLE_CUDA=ON -DKokkos_ENABLE_CUDA_LAMBDA=ON -DKokkos_ARCH_AMPERE80=ON
      -DCMAKE_CXX_COMPILER=@SRC@/bin/nvcc_wrapper "-DCMAKE_CXX_FLAGS=$sm90")
    build_id=cuda-sm80-sm90
    patches=(cuda13 sm90)
    PATH="$(dirname "$nvcc"):$PATH"
    export PATH
    ;;
  *) echo "install-kokkos: unknown backend '$backend' (openmp or cuda)" >&2; exit 2 ;;
esac
prefix=$base/$version-$build_id
config=$prefix/lib/cmake/Kokkos
if [ ! -f "$config/KokkosConfig.cmake" ] || [ ! -f "$prefix/.fnvlp-complete" ]; then
  work=$(mktemp -d "${TMPDIR:-/tmp}/fnvlp-kokkos.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  sdist=$base/pykokkos-base-0.0.7.tar.gz
  mkdir -p "$base"
  if ! echo "$sha256  $sdist" | sha256sum -c --status 2>/dev/null; then
    echo "install-kokkos: downloading Kokkos $version (pykokkos-base 0.0.7 sdist, 3.5 MB) from PyPI" >&2
    curl -fsSL --retry 3 -o "$sdist.part" "$url" ||
      { echo "install-kokkos: cannot download $url" >&2; exit 3; }
    echo "$sha256  $sdist.part" | sha256sum -c --status ||
      { echo "install-kokkos: $url: sha256 differs from $sha256" >&2; exit 1; }
    mv "$sdist.part" "$sdist"
  fi
  tar -xzf "$sdist" -C "$work" pykokkos-base-0.0.7/external/kokkos
  src=$work/pykokkos-base-0.0.7/external/kokkos
  # The sdist carries a stale configuration of another Kokkos in external/kokkos/build.
  rm -rf "$src/build"
  for p in "${patches[@]}"; do patch -s -p1 -d "$src" < "$root/env/kokkos/$version-$p.patch"; done
  args=("${args[@]/@SRC@/$src}")
  echo "install-kokkos: building Kokkos $version ($backend) into $prefix" >&2
  rm -rf "$prefix"
  cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_CXX_STANDARD=17 -DKokkos_ENABLE_SERIAL=ON \
    "${args[@]}" > "$work/configure.log" 2>&1 ||
    { tail -n 30 "$work/configure.log" >&2; exit 1; }
  # nproc would honour OMP_NUM_THREADS (env/mpi-env.sh sets it to 1): every CPU.
  jobs=${FNVLP_JOBS:-$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)}
  cmake --build "$work/build" -j "$jobs" > "$work/build.log" 2>&1 ||
    { grep -m 20 -E "error|Error" "$work/build.log" >&2; exit 1; }
  cmake --install "$work/build" > /dev/null
  touch "$prefix/.fnvlp-complete"
fi
echo "$config"
