#!/usr/bin/env bash
# fnvlp-simstat's time and memory against N on this machine's CPUs, fitted to N^2 and projected to
# the 4M chain (figures in tests/bench/README.md, "simstat at 4M scale"):
#   bash tests/bench/bench_simstat_scaling.sh [BUILD_DIR]
# Runs the whole job (the chain's settings: alpha FNVLP_FN_ALPHA's 0.01, 100 quantiles, the FNC
# simulation) on files of random unit vectors at each N of NS and each rank count of RANKS, one
# after another; each rank's peak resident memory comes from GNU time. Env: NS ("16384 32768 65536
# 131072"), RANKS ("1 2"), D (256), ALPHA (0.01), CHAIN_RANKS (16: the chain's FNVLP_ANALYSIS_RANKS
# at 4m), WORK (scratch), OUT (a JSON of every cell and the fit; WORK/scaling.json).
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac  # the header above
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build}
NS=${NS:-16384 32768 65536 131072} RANKS=${RANKS:-1 2} D=${D:-256} ALPHA=${ALPHA:-0.01}
CHAIN_RANKS=${CHAIN_RANKS:-16}
work=${WORK:-${TMPDIR:-/tmp}/fnvlp_bench_simstat_scaling}
out=${OUT:-$work/scaling.json}
mkdir -p "$work"
source "$root/env/mpi-env.sh" 2>/dev/null || true
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 HDF5_USE_FILE_LOCKING=FALSE
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
[ -x /usr/bin/time ] || { echo "bench_simstat_scaling.sh: needs GNU time (apt-get install time)" >&2; exit 2; }
cmake --build "$build" --target fnvlp-simstat bench_simstat >/dev/null
simstat=$build/analysis/fnvlp-simstat bench=$build/tests/bench/bench_simstat
echo "# $(date -u +%FT%TZ) $(git -C "$root" rev-parse --short HEAD) $(nproc --all) cores ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)), load $(cut -d' ' -f1-3 /proc/loadavg); D=$D alpha=$ALPHA"
cells=$work/cells.jsonl
: >"$cells"
for n in $NS; do
  emb=$work/rand-$n-$D.h5
  [ -f "$emb" ] || "$bench" --mode make --embeddings "$emb" --pairs "$n" --dim "$D" >/dev/null
  for r in $RANKS; do
    label=n$n-r$r
    rm -f "$work/$label.h5"
    # GNU time around each rank: its peak RSS (kB) on a line of its own in the log.
    mpirun --oversubscribe --bind-to none -np "$r" /usr/bin/time -f "fnvlp-peak-rss-kb %M" \
      "$simstat" --embeddings "$emb" --out "$work/$label.h5" --alpha "$ALPHA" \
      --json "$work/$label.json" >"$work/$label.log" 2>&1 ||
      { tail -n 20 "$work/$label.log" >&2; exit 1; }
    python3 - "$work/$label.json" "$work/$label.log" "$r" >>"$cells" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
rss = [int(l.split()[1]) * 1024 for l in open(sys.argv[2]) if l.startswith("fnvlp-peak-rss-kb ")]
if len(rss) != int(sys.argv[3]):
    sys.exit(f"{sys.argv[2]}: {len(rss)} peak-RSS lines for {sys.argv[3]} ranks")
print(json.dumps({"n": j["n"], "ranks": j["ranks"], "seconds": j["seconds"],
                  "image_s": j["image"]["seconds"], "text_s": j["text"]["seconds"],
                  "peak_rss_max": max(rss), "peak_rss_min": min(rss),
                  "space": j["kokkos_space"], "path": j["path"]}))
PY
    tail -n 1 "$cells"
  done
done
/usr/bin/python3 - "$cells" "$out" "$D" "$CHAIN_RANKS" <<'PY'
import json, sys
cells = [json.loads(l) for l in open(sys.argv[1])]
d, chain = int(sys.argv[3]), int(sys.argv[4])
mb = lambda b: b / 2**20
print("| N | ranks | job s | image s | text s | s x ranks / N^2 (ns) | peak RSS per rank |")
print("|---|---|---|---|---|---|---|")
for c in cells:
    c["ns_per_pair2"] = c["seconds"] * c["ranks"] / c["n"] ** 2 * 1e9
    print(f"| {c['n']:,} | {c['ranks']} | {c['seconds']:.1f} | {c['image_s']:.1f} | {c['text_s']:.1f} "
          f"| {c['ns_per_pair2']:.3f} | {mb(c['peak_rss_max']):.0f} MiB |")
# Time: t = c N^2 / ranks, c by least squares on the relative error of every cell at the largest
# two N (where the N^2 work dominates the start-up); the smaller N show how far below it they sit.
big = sorted({c["n"] for c in cells})[-2:]
fit = [c for c in cells if c["n"] in big]
cpp = sum(c["ns_per_pair2"] for c in fit) / len(fit) * 1e-9
worst = max(abs(c["ns_per_pair2"] * 1e-9 / cpp - 1) for c in fit)
# Memory per rank: rss = a + b N + e N / ranks (resident columns of every pair; the rank's own rows).
import numpy as np
A = np.array([[1.0, c["n"], c["n"] / c["ranks"]] for c in cells])
y = np.array([float(c["peak_rss_max"]) for c in cells])
(a, b, e), *_ = np.linalg.lstsq(A, y, rcond=None)
res = float(np.max(np.abs(A @ np.array([a, b, e]) - y)))
print(f"time fit: {cpp * 1e9:.3f} ns x N^2 / ranks (cells at N = {big}; largest deviation {worst:.1%})")
print(f"memory fit: {mb(a):.0f} MiB + {b:.1f} B x N + {e:.1f} B x N / ranks (largest residual {mb(res):.1f} MiB)")
proj = []
for n in (1_048_576, 4_000_000, 5_100_000):
    t = cpp * n * n / chain
    m = a + b * n + e * n / chain
    proj.append({"n": n, "ranks": chain, "seconds": t, "peak_rss_per_rank": m})
    print(f"projected N = {n:,} on {chain} ranks: {t / 3600:.1f} h ({t * chain / 3600:.0f} CPU-hours), "
          f"{mb(m):.0f} MiB per rank")
json.dump({"dim": d, "cells": cells, "time_fit_s_per_pair2": cpp, "time_fit_worst": worst,
           "memory_fit": {"base": a, "per_pair": b, "per_own_pair": e, "worst_residual": res},
           "projection": proj}, open(sys.argv[2], "w"), indent=1)
PY
echo "written $out"
