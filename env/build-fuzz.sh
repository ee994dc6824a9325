#!/usr/bin/env bash
# Configures and builds the libFuzzer targets (tests/fuzz) into ${FNVLP_FUZZ_BUILD_DIR:-build-fuzz}
# with Debian's clang 14 (ASan + UBSan + libFuzzer): a build of its own, without libtorch.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FNVLP_FUZZ_BUILD_DIR:-$root/build-fuzz}
# nproc would honour OMP_NUM_THREADS (env/mpi-env.sh sets it to 1): every CPU.
jobs=${FNVLP_JOBS:-$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)}
CC=clang-14 CXX=clang++-14 cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DFNVLP_FUZZ=ON -DFNVLP_FUZZ_SECONDS="${FNVLP_FUZZ_SECONDS:-150}" \
  ${FNVLP_SHARED_DIR:+-DFNVLP_SHARED_DIR="$FNVLP_SHARED_DIR"}
cmake --build "$build" -j "$jobs"
