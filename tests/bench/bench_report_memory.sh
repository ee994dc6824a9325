#!/usr/bin/env bash
# fnvlp-report on the 4M chain's simstat output (figures in tests/bench/README.md, "simstat at 4M
# scale"): a synthetic STATS.h5 and export of N pairs (tests/integration/make_stats.py, 100
# quantiles as the chain writes them), then the report's time, its own peak memory (its log) and
# the peak of its process tree (GNU time: the plot script included).
#   bash tests/bench/bench_report_memory.sh [BUILD_DIR]      env: NS ("4000000"), WORK
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac  # the header above
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build}
work=${WORK:-${TMPDIR:-/tmp}/fnvlp_bench_report_memory}
mkdir -p "$work"
export HDF5_USE_FILE_LOCKING=FALSE OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cmake --build "$build" --target fnvlp-report >/dev/null
echo "# $(date -u +%FT%TZ) $(git -C "$root" rev-parse --short HEAD) $(nproc --all) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for n in ${NS:-4000000}; do
  rm -rf "${work:?}/run" "$work/rep" "$work/stats.h5"
  /usr/bin/python3 "$root/tests/integration/make_stats.py" "$n" "$work/run" "$work/stats.h5" >/dev/null
  /usr/bin/time -f "tree-peak-kb %M wall-s %e" "$build/analysis/fnvlp-report" --run "$work/run" \
    --stats "$work/stats.h5" --out "$work/rep" --horizon none >"$work/log" 2>&1 || { cat "$work/log"; exit 1; }
  own=$(sed -n 's/.*peak memory \([0-9.]*\) MiB.*/\1/p' "$work/log")
  read -r tree wall < <(sed -n 's/^tree-peak-kb \([0-9]*\) wall-s \([0-9.]*\)$/\1 \2/p' "$work/log")
  printf 'N = %s: STATS.h5 %s MiB, export %s MiB; report %.1f s, its peak %s MiB, with the plot script %.1f MiB\n' \
    "$n" "$(($(stat -c %s "$work/stats.h5") >> 20))" "$(($(stat -c %s "$work/run/embeddings/epoch-000.h5") >> 20))" \
    "$wall" "$own" "$(echo "$tree / 1024" | bc -l)"
done
