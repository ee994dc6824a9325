#!/usr/bin/env bash
# Configures and builds fnvlp into ${FNVLP_BUILD_DIR:-build} (Ninja, ccache when present).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FNVLP_BUILD_DIR:-$root/build}
jobs=${FNVLP_JOBS:-$(nproc)}
# ccache hashes the paths under the source root relative to it, so a clone at another path on the
# same machine (CI's fresh clone) reuses the compilations of this one instead of starting cold.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
# FNVLP_CMAKE_ARGS holds several options: word splitting is intended.
# shellcheck disable=SC2086
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="${FNVLP_BUILD_TYPE:-Release}" \
  ${FNVLP_SHARED_DIR:+-DFNVLP_SHARED_DIR="$FNVLP_SHARED_DIR"} ${FNVLP_CMAKE_ARGS:-}
cmake --build "$build" -j "$jobs"
