#!/usr/bin/env bash
# README command 2: install the Debian packages, build, and run the whole test suite.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/env/install-debian.sh"
bash "$root/env/build.sh"
source "$root/env/mpi-env.sh"
(cd "${FNVLP_BUILD_DIR:-$root/build}" && ctest --output-on-failure -j "$(nproc)" --timeout 900 "$@")
# The libFuzzer targets: a clang build of their own, each a fixed, reproducible run over its corpus
# (seed 1, a set number of inputs, about 30 s each; label fuzz).
if [ "${FNVLP_SKIP_FUZZ:-0}" != 1 ]; then
  bash "$root/env/build-fuzz.sh"
  cd "${FNVLP_FUZZ_BUILD_DIR:-$root/build-fuzz}"
  ctest --output-on-failure -j "$(nproc)" -L fuzz
fi
