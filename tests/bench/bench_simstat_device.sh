#!/usr/bin/env bash
# fnvlp-simstat on a GPU against the host, one embeddings file, one run (a lent GPU machine:
# tests/gpu/device_run.sh DIR kokkos; figures in tests/bench/README.md):
#   bash tests/bench/bench_simstat_device.sh HOST_SIMSTAT DEVICE_SIMSTAT BENCH_SIMSTAT
# HOST_SIMSTAT: fnvlp-simstat of a build against a host Kokkos (Serial), run at 1 rank and at one
# rank per core; DEVICE_SIMSTAT: of a build against Kokkos on CUDA (FNVLP_KOKKOS=cuda), at 1 rank;
# BENCH_SIMSTAT (either build) writes the file of random unit vectors. The device takes the generic
# path (similarities summed in double, kernels.hpp), the host the BLAS GEMM: thresholds agree to
# float rounding, not in every bit (Simstat.GenericPathIsExactOnItsOwnSimilarities); the summary
# means are printed side by side. Env: N (65536), D (256), ALPHA (0.01), WORK, RANKS (cores).
set -euo pipefail
host=${1:?usage: bench_simstat_device.sh HOST_SIMSTAT DEVICE_SIMSTAT BENCH_SIMSTAT}
device=${2:?usage: bench_simstat_device.sh HOST_SIMSTAT DEVICE_SIMSTAT BENCH_SIMSTAT}
bench=${3:?usage: bench_simstat_device.sh HOST_SIMSTAT DEVICE_SIMSTAT BENCH_SIMSTAT}
N=${N:-65536} D=${D:-256} ALPHA=${ALPHA:-0.01} R=${RANKS:-$(nproc --all)}
work=${WORK:-${TMPDIR:-/tmp}/fnvlp_bench_simstat_device}
mkdir -p "$work"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 HDF5_USE_FILE_LOCKING=FALSE
emb=$work/rand-$N-$D.h5
[ -f "$emb" ] || "$bench" --mode make --embeddings "$emb" --pairs "$N" --dim "$D" >/dev/null
echo "# $(date -u +%FT%TZ) $(nproc --all) cores; N=$N D=$D alpha=$ALPHA"
run() {  # LABEL PROGRAM RANKS
  rm -rf "${work:?}/$1.h5"
  mpirun --oversubscribe --bind-to none -np "$3" "$2" --embeddings "$emb" --out "$work/$1.h5" \
    --alpha "$ALPHA" --json "$work/$1.json" >"$work/$1.log" 2>&1 ||
    { tail -n 20 "$work/$1.log" >&2; exit 1; }
}
run host-1 "$host" 1
run host-ranks "$host" "$R"
run device "$device" 1
python3 - "$work" "$R" <<'PY'
import json, sys
w, r = sys.argv[1], int(sys.argv[2])
j = {k: json.load(open(f"{w}/{k}.json")) for k in ("host-1", "host-ranks", "device")}
for k, v in j.items():
    print(f"{k:11s} {v['ranks']:3d} rank(s) on {v['kokkos_space']} x {v['kokkos_concurrency']}: "
          f"{v['seconds']:8.2f} s; mean threshold image {v['image']['mean_threshold']:.6f} "
          f"text {v['text']['mean_threshold']:.6f}; exact P/R image "
          f"{v['image']['exact']['precision']:.4f}/{v['image']['exact']['recall']:.4f}")
s = {k: v["seconds"] for k, v in j.items()}
print(f"device / host 1 rank: {s['host-1'] / s['device']:.2f}x; "
      f"device / host {r} ranks: {s['host-ranks'] / s['device']:.2f}x")
PY
