#!/usr/bin/env bash
# Runs one libFuzzer target over a scratch copy of its committed corpus, for RUNS inputs (-1: no
# limit) or SECONDS, whichever ends first.
# Usage: run_fuzz.sh TARGET CORPUS_DIR WORK_DIR [SECONDS=30] [RUNS=-1]
# The mutation seed is FNVLP_FUZZ_SEED (default 1): with a fixed seed and a RUNS limit reached
# before SECONDS the run is reproducible, which is what CI needs; FNVLP_FUZZ_SEED=0 lets libFuzzer
# draw one (exploratory runs, tests/fuzz/README.md).
# Fails (non-zero) on any crash, sanitizer report, leak, timeout (> 10 s per input) or OOM;
# libFuzzer then writes the reproducer into WORK_DIR (crash-*, timeout-*, oom-*).
set -euo pipefail
target=$(realpath "$1") corpus=$(realpath "$2") work=$(realpath -m "$3") seconds=${4:-30} runs=${5:--1}
seed=${FNVLP_FUZZ_SEED:-1}
if [ ! -d "$corpus" ] || [ -z "$(ls -A "$corpus")" ]; then echo "FAIL: empty corpus $corpus"; exit 1; fi
rm -rf "$work"
mkdir -p "$work/corpus"
cp "$corpus"/* "$work/corpus/"
cd "$work"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
set +e
"$target" -seed="$seed" -runs="$runs" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=3072 -max_len=65536 \
  -print_final_stats=1 "$work/corpus" >"$work/fuzz.log" 2>&1
rc=$?
set -e
tail -n 40 "$work/fuzz.log"
echo "fuzz: $(basename "$target") seed $seed, limits ${runs} runs / ${seconds}s, from $(find "$corpus" -mindepth 1 -maxdepth 1 | wc -l) inputs, exit $rc"
exit "$rc"
