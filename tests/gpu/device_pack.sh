#!/usr/bin/env bash
# Packs into DIR (default <repo>/.device, git-ignored; the device tool carries it) what a lent GPU
# machine without Debian packages needs to run the gpu checks and the GPU benchmark against its
# own PyTorch 2.11 (the version env/install-gpu.sh pins, so the GPU build's programs link there):
# the GPU build's programs (the unit tests for their CUDA cases), the golden step's reference, the
# vocabulary and env/device-prefix.sh's runtime prefix; with a build against Kokkos on CUDA
# (KOKKOS_BUILD, default build-gpu-kokkos-cuda where it exists: FNVLP_GPU=1 FNVLP_KOKKOS=cuda
# env/build.sh; else BUILD_DIR itself when configured with the CUDA Kokkos, as env/run-tests.sh
# leaves build-gpu), simstat's programs of that build.
# Usage: tests/gpu/device_pack.sh [BUILD_DIR (build-gpu)] [DIR]   Then: tests/gpu/device_run.sh DIR
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac  # the header above
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(cd "${1:-$root/build-gpu}" && pwd)
dir=${2:-$root/.device}
rm -rf "$dir/build"
mkdir -p "$dir/build/jobs" "$dir/build/data_prep" "$dir/build/tests/golden" "$dir/build/tests/mpi"
cmake --build "$build" --target bench_loader  # the loader alone (tests/bench/gpu_pretrain.sh)
progs=("$build"/jobs/fnvlp-pretrain "$build"/data_prep/fnvlp-synth "$build"/data_prep/fnvlp-shard
  "$build"/tests/golden/fnvlp_golden_tests "$build"/tests/mpi/fnvlp_nccl_tests
  "$build"/analysis/fnvlp-simstat "$build"/tests/fnvlp_unit_tests "$build"/tests/bench/bench_loader)
mkdir -p "$dir/build/analysis" "$dir/build/tests/bench"
for p in "${progs[@]}"; do
  rel=${p#"$build"/}
  cp "$p" "$dir/build/$rel"
  strip --strip-debug "$dir/build/$rel"
done
kokkos=${KOKKOS_BUILD:-$root/build-gpu-kokkos-cuda}
if [ -z "${KOKKOS_BUILD:-}" ] && [ ! -d "$kokkos" ] &&
  grep -qs '^Kokkos_DIR:[A-Z]*=.*/kokkos/[^/]*-cuda-' "$build/CMakeCache.txt"; then
  kokkos=$build
fi
if [ -d "$kokkos" ]; then
  cmake --build "$kokkos" --target fnvlp_unit_tests fnvlp_simstat_mpi_tests fnvlp-simstat bench_simstat
  # Compressed: their GPU code (sm_80, sm_90 and PTX) would take a third of the 64 MiB a call carries.
  stage=$(mktemp -d)
  for p in tests/fnvlp_unit_tests tests/mpi/fnvlp_simstat_mpi_tests analysis/fnvlp-simstat \
    tests/bench/bench_simstat; do
    cp "$kokkos/$p" "$stage/"
    strip --strip-debug "$stage/$(basename "$p")"
    progs+=("$kokkos/$p")
  done
  tar -cJf "$dir/kokkos.tar.xz" -C "$stage" .
  rm -rf "$stage"
else
  rm -f "$dir/kokkos.tar.xz"
fi
# The golden step's reference (the device has no python3-torch 1.13 to make it).
[ -s "$build/tests/golden/tiny_step.h5" ] ||
  /usr/bin/python3 "$root/tests/golden/make_golden.py" --out "$build/tests/golden/tiny_step.h5"
cp "$build/tests/golden/tiny_step.h5" "$dir/build/tests/golden/"
cp "${FNVLP_SHARED_DIR:-$root/../shared}/data/vocab/bert-base-uncased-vocab.txt" "$dir/vocab.txt"
[ -s "$dir/prefix.tar.xz" ] || bash "$root/env/device-prefix.sh" "$dir" "${progs[@]}"
du -sh "$dir"
