#!/usr/bin/env bash
# Benchmark: images/s of fnvlp-shard (1 and 2 ranks) against tests/bench/reference_shard.py
# (Python, Debian's python3-pil + python3-h5py) on the same input, side by side in one run
# (fnvlp at 1 rank, 1 rank with 2 helper threads, and 2 ranks; OpenMPI binds a lone rank to one
# core, so the threaded run needs --bind-to none),
# alternating the contenders over several rounds so machine noise hits them alike.
# Usage: tests/bench/bench_shard.sh [BUILD_DIR] [IMAGE_SIZE] [ROUNDS]
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac  # the header above
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build}
size=${2:-128}
rounds=${3:-3}
shared=${FNVLP_SHARED_DIR:-$root/../shared}
flickr=$shared/data/flickr8k-128
vocab=$shared/data/vocab/bert-base-uncased-vocab.txt
source "$root/env/mpi-env.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/fnvlp_bench_shard.XXXXXX")
trap 'rm -rf "$work"' EXIT

common=(--input "$flickr/captions.json" --image-root "$flickr" --split-file "$flickr/splits.json"
        --split train --vocab "$vocab" --image-size "$size" --max-len 30)
images=$(/usr/bin/python3 -c "import json;print(len(json.load(open('$flickr/splits.json'))['train']))")

run() {  # run NAME CMD... -> seconds on stdout
  local t0 t1
  t0=$(date +%s.%N)
  "$@" >"$work/last.log" 2>&1 || { cat "$work/last.log" >&2; exit 1; }
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc -l
}

declare -A best
for name in python fnvlp_np1 fnvlp_np1_t2 fnvlp_np2; do best[$name]=1000000000; done
for r in $(seq 1 "$rounds"); do
  for name in python fnvlp_np1 fnvlp_np1_t2 fnvlp_np2; do
    rm -rf "$work/out"
    case $name in
      python) t=$(run /usr/bin/python3 "$root/tests/bench/reference_shard.py" "${common[@]}" --out "$work/out") ;;
      fnvlp_np1) t=$(run mpirun --oversubscribe -np 1 "$build/data_prep/fnvlp-shard" "${common[@]}" --out "$work/out") ;;
      fnvlp_np1_t2) t=$(run mpirun --oversubscribe --bind-to none -np 1 "$build/data_prep/fnvlp-shard" "${common[@]}" --threads 2 --out "$work/out") ;;
      fnvlp_np2) t=$(run mpirun --oversubscribe -np 2 "$build/data_prep/fnvlp-shard" "${common[@]}" --out "$work/out") ;;
    esac
    printf 'round %d %-10s %7.2f s  %7.0f images/s\n' "$r" "$name" "$t" "$(echo "$images / $t" | bc -l)"
    if (( $(echo "$t < ${best[$name]}" | bc -l) )); then best[$name]=$t; fi
  done
done
echo
echo "Flickr8k-128 train split: $images images, 30455 captions, image size $size, best of $rounds rounds"
for name in python fnvlp_np1 fnvlp_np1_t2 fnvlp_np2; do
  printf '%-10s %7.2f s  %7.0f images/s  %5.2fx python\n' "$name" "${best[$name]}" \
    "$(echo "$images / ${best[$name]}" | bc -l)" "$(echo "${best[python]} / ${best[$name]}" | bc -l)"
done
