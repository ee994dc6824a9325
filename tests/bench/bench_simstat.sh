#!/usr/bin/env bash
# fnvlp-simstat benchmark, (a)-(e) of issue 5 side by side in one run (figures in README.md):
#   bash tests/bench/bench_simstat.sh [BUILD_DIR]
# Env: N (65536), D (256), ALPHA (0.01), BIG_N (200000; 0 skips the peak-memory run (e)),
# REAL (exported embeddings files to measure as well, space-separated), WORK (scratch directory),
# REPEAT (runs of each side in (b) and (d), best taken; 3).
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac  # the header above
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build}
N=${N:-65536} D=${D:-256} ALPHA=${ALPHA:-0.01} BIG_N=${BIG_N:-200000} REPEAT=${REPEAT:-3}
work=${WORK:-${TMPDIR:-/tmp}/fnvlp_bench_simstat}
mkdir -p "$work"
source "$root/env/mpi-env.sh" 2>/dev/null || true
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 HDF5_USE_FILE_LOCKING=FALSE
# One thread per rank everywhere (FAISS's OpenMP and OpenBLAS included): ranks are the parallelism.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
cmake --build "$build" --target bench_simstat >/dev/null
bench=$build/tests/bench/bench_simstat
mpirun=(mpirun --oversubscribe --bind-to none)
echo "# $(date -u +%FT%TZ) $(git -C "$root" rev-parse --short HEAD) $(nproc --all) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

measure() {  # measure LABEL FILE
  local label=$1 file=$2
  echo "## $label: $file"
  "$bench" --mode kernel --embeddings "$file" --alpha "$ALPHA"          # (a)
  "$bench" --mode faiss --embeddings "$file" --alpha "$ALPHA" --rows 4096 || true  # (c)
  "${mpirun[@]}" -np 1 "$bench" --mode job --embeddings "$file" --alpha "$ALPHA" --repeat "$REPEAT"  # (b), (d) 1 rank
  "${mpirun[@]}" -np 2 "$bench" --mode job --embeddings "$file" --alpha "$ALPHA" --repeat "$REPEAT"  # (d) 2 ranks
}

[ -f "$work/rand-$N-$D.h5" ] || "$bench" --mode make --embeddings "$work/rand-$N-$D.h5" --pairs "$N" --dim "$D"
measure "random unit vectors N=$N D=$D" "$work/rand-$N-$D.h5"
for f in ${REAL:-}; do measure "exported embeddings" "$f"; done
if [ "$BIG_N" -gt 0 ]; then
  echo "## (e) peak memory at N=$BIG_N D=$D, 2 ranks"
  [ -f "$work/rand-$BIG_N-$D.h5" ] || "$bench" --mode make --embeddings "$work/rand-$BIG_N-$D.h5" --pairs "$BIG_N" --dim "$D"
  "${mpirun[@]}" -np 2 "$bench" --mode job --embeddings "$work/rand-$BIG_N-$D.h5" --alpha "$ALPHA" --repeat 1
fi
