#!/usr/bin/env bash
# Benchmark: what data.verify=full costs at start-up (issue 28). Shards the Flickr8k train split
# at 128 px, then starts fnvlp-pretrain (tiny preset, one step) with data.verify=full and =size at
# 1 and 2 ranks, alternating over ROUNDS, and prints the hashing time the job logs, the bytes
# hashed and the start-to-exit wall time of each; one table, ratios in tests/bench/README.md.
# Usage: tests/bench/bench_verify.sh [BUILD_DIR] [ROUNDS]
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac  # the header above
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build}
rounds=${2:-3}
shared=${FNVLP_SHARED_DIR:-$root/../shared}
flickr=$shared/data/flickr8k-128
vocab=$shared/data/vocab/bert-base-uncased-vocab.txt
source "$root/env/mpi-env.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/fnvlp_bench_verify.XXXXXX")
trap 'rm -rf "$work"' EXIT

mpirun --oversubscribe -np 2 "$build/data_prep/fnvlp-shard" --input "$flickr/captions.json" \
  --image-root "$flickr" --split-file "$flickr/splits.json" --split train --vocab "$vocab" \
  --image-size 128 --out "$work/shards" >/dev/null
echo "shards: $(du -sh "$work/shards" | cut -f1), $(find "$work/shards" -maxdepth 1 -name '*.h5' | wc -l) files"
printf "%-6s %-5s %-6s %12s %12s %10s\n" ranks mode round hash_s hashed_MB wall_s
for r in $(seq "$rounds"); do
  for np in 1 2; do
    for mode in full size; do
      rm -rf "$work/run"
      t0=$(date +%s.%N)
      mpirun --oversubscribe -np "$np" "$build/jobs/fnvlp-pretrain" \
        --config "$root/jobs/configs/tiny.yaml" --config "$root/tests/bench/bench_verify.yaml" \
        --data "$work/shards" --out "$work/run" --set data.verify=$mode >"$work/log" 2>&1 ||
        { tail -20 "$work/log"; exit 1; }
      t1=$(date +%s.%N)
      line=$(grep -oE "sha256 of [0-9.]+ MB checked in [0-9.]+ s" "$work/log" || true)
      mb=$(echo "$line" | awk '{print $3}')
      s=$(echo "$line" | awk '{print $7}')
      printf "%-6s %-5s %-6s %12s %12s %10.2f\n" "$np" "$mode" "$r" "${s:--}" "${mb:--}" \
        "$(echo "$t1 - $t0" | bc -l)"
    done
  done
done
