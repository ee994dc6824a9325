#!/usr/bin/env bash
# fnvlp-simstat on Kokkos backends side by side, in one run (figures in tests/bench/README.md):
#   bash tests/bench/bench_simstat_backends.sh SERIAL_BUILD OPENMP_BUILD
# SERIAL_BUILD: a build against Debian's Kokkos (Serial); OPENMP_BUILD: FNVLP_KOKKOS=openmp
# env/build.sh (Kokkos 3.4.01, Serial + OpenMP, env/install-kokkos.sh). Both run the whole job on
# one embeddings file of random unit vectors: one rank on one thread, then each way of using every
# core: ranks (Serial), threads (OpenMP: Kokkos's kernels; OpenBLAS's GEMM), and checks that
# every run wrote the same STATS.h5 values. Env: N (32768), D (256), ALPHA (0.01), REPEAT (2: best
# of), WORK (scratch), THREADS (all cores).
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac  # the header above
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
serial=${1:?usage: bench_simstat_backends.sh SERIAL_BUILD OPENMP_BUILD}
openmp=${2:?usage: bench_simstat_backends.sh SERIAL_BUILD OPENMP_BUILD}
N=${N:-32768} D=${D:-256} ALPHA=${ALPHA:-0.01} REPEAT=${REPEAT:-2}
T=${THREADS:-$(nproc --all)}
work=${WORK:-${TMPDIR:-/tmp}/fnvlp_bench_simstat_backends}
mkdir -p "$work"
source "$root/env/mpi-env.sh" 2>/dev/null || true
cd "$root"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 HDF5_USE_FILE_LOCKING=FALSE
export OMP_PROC_BIND=false
for b in "$serial" "$openmp"; do cmake --build "$b" --target fnvlp-simstat bench_simstat >/dev/null; done
emb=$work/rand-$N-$D.h5
[ -f "$emb" ] || "$serial/tests/bench/bench_simstat" --mode make --embeddings "$emb" --pairs "$N" --dim "$D" >/dev/null
echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD) $(nproc --all) cores, load $(cut -d' ' -f1-3 /proc/loadavg); N=$N D=$D alpha=$ALPHA, best of $REPEAT"

declare -A seconds
run() {  # run LABEL BUILD RANKS THREADS
  local label=$1 build=$2 ranks=$3 threads=$4 times=() best
  for _ in $(seq "$REPEAT"); do
    rm -rf "${work:?}/$label"
    OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads mpirun --oversubscribe --bind-to none -np "$ranks" \
      "$build/analysis/fnvlp-simstat" --embeddings "$emb" --out "$work/$label" --alpha "$ALPHA" \
      --threads "$threads" --json "$work/$label.json" >"$work/$label.log" 2>&1 ||
      { tail -n 20 "$work/$label.log" >&2; exit 1; }
    times+=("$(python3 - "$work/$label.json" "$threads" "${label%%-*}" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
space = {"serial": "Serial", "openmp": "OpenMP"}[sys.argv[3]]
want = int(sys.argv[2]) if space == "OpenMP" else 1
if j["kokkos_space"] != space or j["kokkos_concurrency"] != want:
    sys.exit(f"{sys.argv[1]}: ran on {j['kokkos_space']} x {j['kokkos_concurrency']}, not {space} x {want}")
print(j["seconds"])
PY
)")
  done
  best=$(printf '%s\n' "${times[@]}" | sort -g | head -n 1)
  printf '%-28s %2d rank(s) x %d thread(s): %8.2f s\n' "$label" "$ranks" "$threads" "$best"
  seconds[$label]=$best
}

run serial-1x1 "$serial" 1 1
run serial-ranks "$serial" "$T" 1
run openmp-1x1 "$openmp" 1 1
run openmp-threads "$openmp" 1 "$T"
python3 - "${seconds[serial-1x1]}" "${seconds[serial-ranks]}" "${seconds[openmp-1x1]}" \
  "${seconds[openmp-threads]}" "$T" <<'PY'
import sys
s1, sr, o1, ot, t = map(float, sys.argv[1:])
print(f"OpenMP 1 thread / Serial: {s1 / o1:.2f}x (same work, the backend's own cost)")
print(f"{int(t)} threads (OpenMP) over 1 thread: {o1 / ot:.2f}x; {int(t)} ranks (Serial) over 1: {s1 / sr:.2f}x")
print(f"{int(t)} threads (OpenMP) / {int(t)} ranks (Serial): {sr / ot:.2f}x")
PY
# Every run's statistics must have the same bits: the backend and the decomposition change nothing.
for l in serial-ranks openmp-1x1 openmp-threads; do
  if h5diff "$work/serial-1x1" "$work/$l" >/dev/null; then
    echo "$l: STATS.h5 identical to serial-1x1 (h5diff)"
  else
    echo "$l: STATS.h5 differs from serial-1x1: h5diff $work/serial-1x1 $work/$l" >&2
    exit 1
  fi
done
