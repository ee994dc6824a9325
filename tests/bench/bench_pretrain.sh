#!/usr/bin/env bash
# Benchmark (issue 3): fnvlp-pretrain against the same model, losses and batch in PyTorch
# (tests/bench/pytorch_albef.py, Debian's python3-torch 1.13), side by side in one run, the
# contenders alternating over several rounds so machine noise hits them alike:
#   (a) compute only: seconds per training step on one fixed in-memory batch (pairs 0..B-1 of the
#       shards), after warm-up: tests/bench/bench_step (libfnvlp, the trainer's step) against
#       pytorch_albef.py --mode compute;                                  goal C++ >= 1.15x faster
#   (b) end to end on the Flickr8k-128 train split: fnvlp-pretrain at 1 rank reading HDF5 shards
#       (prefetch thread, augmentation in the step) against pytorch_albef.py --mode epoch (a
#       torch DataLoader decoding the JPEGs with PIL, NUM_WORKERS workers); samples/s over
#       E2E_STEPS steps after SKIP untimed ones (E2E_STEPS=0: one whole epoch each);   goal >= 2x
#   (c) fnvlp-pretrain at 2 ranks against 1 rank, samples/s as in (b);            goal >= 1.7x
# One libtorch/BLAS thread per process (DESIGN.md §5; env/mpi-env.sh exports the variables).
#
# Usage: tests/bench/bench_pretrain.sh [BUILD_DIR] [ROUNDS] [PRESET]
#   PRESET: tiny (default: 64 px model, the one that fits ~15 min on 2 cores) or small.
#   Environment: COMPUTE_STEPS (20), WARMUP (3), E2E_STEPS (50), SKIP (10), NUM_WORKERS (1),
#   SHARD_PX (128: shards keep Flickr8k-128's pixels, so both sides crop the same source images),
#   BENCH_STEP (a built bench_step; default BUILD_DIR/tests/bench/bench_step, else it is compiled
#   once into ${FNVLP_BENCH_CACHE:-/tmp}/fnvlp_bench_step with g++ against BUILD_DIR/libfnvlp.a).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
rounds=${2:-3}
preset=${3:-tiny}
compute_steps=${COMPUTE_STEPS:-20}
warmup=${WARMUP:-3}
e2e_steps=${E2E_STEPS:-50}
skip=${SKIP:-10}
workers=${NUM_WORKERS:-1}
shard_px=${SHARD_PX:-128}
shared=${FNVLP_SHARED_DIR:-$root/../shared}
flickr=$shared/data/flickr8k-128
vocab=$shared/data/vocab/bert-base-uncased-vocab.txt
config=$root/jobs/configs/$preset.yaml
py=/usr/bin/python3
source "$root/env/mpi-env.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/fnvlp_bench_pretrain.XXXXXX")
trap 'rm -rf "$work"' EXIT
(( e2e_steps == 0 || e2e_steps % skip == 0 )) || { echo "E2E_STEPS must be a multiple of SKIP" >&2; exit 2; }
$py -c "import torch" 2>/dev/null || { echo "needs python3-torch (apt-get install python3-torch)" >&2; exit 2; }

# --- bench_step: the C++ compute-only program ---------------------------------------------------
bench_step=${BENCH_STEP:-$build/tests/bench/bench_step}
if [ ! -x "$bench_step" ]; then
  bench_step=${FNVLP_BENCH_CACHE:-/tmp}/fnvlp_bench_step
  src=$root/tests/bench/bench_step.cpp
  if [ ! -x "$bench_step" ] || [ "$src" -nt "$bench_step" ] || [ "$build/libfnvlp.a" -nt "$bench_step" ]; then
    echo "compiling $bench_step (about a minute)"
    g++ -std=c++17 -O2 -D_GLIBCXX_USE_CXX11_ABI=1 -DOMPI_SKIP_MPICXX=1 -I"$root/src" \
      -I"$build/generated" -I/usr/include/hdf5/openmpi -I/usr/lib/x86_64-linux-gnu/openmpi/include \
      -I/usr/include/torch/csrc/api/include "$src" "$build/libfnvlp.a" -o "$bench_step.tmp" \
      -ltorch -ltorch_cpu -lc10 -L/usr/lib/x86_64-linux-gnu/hdf5/openmpi -lhdf5 -lmpi -lyaml-cpp \
      -lspdlog -lfmt -lcrypto -licuuc -lturbojpeg -lpng -pthread
    mv "$bench_step.tmp" "$bench_step"
  fi
fi

# --- shards of the train split ------------------------------------------------------------------
mpirun --oversubscribe -np 2 "$build/data_prep/fnvlp-shard" --input "$flickr/captions.json" \
  --format albef --image-root "$flickr" --split-file "$flickr/splits.json" --split train \
  --vocab "$vocab" --image-size "$shard_px" --max-len 30 --out "$work/train" >"$work/shard.log" 2>&1 ||
  { cat "$work/shard.log" >&2; exit 1; }

# --- contenders: each prints one line "VALUE DATA_WAIT" (compute: s/step; e2e: samples/s) --------
field() { $py -c "import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); print(*[d[k] for k in sys.argv[1:]])" "$@"; }
run_cpp_compute() {
  "$bench_step" --config "$config" --data "$work/train" --steps "$compute_steps" --warmup "$warmup" \
    2>"$work/err" | field step_s_mean || { cat "$work/err" >&2; exit 1; }
}
run_py_compute() {
  $py "$root/tests/bench/pytorch_albef.py" --config "$config" --mode compute --data "$work/train" \
    --steps "$compute_steps" --warmup "$warmup" 2>"$work/err" | field step_s_mean ||
    { cat "$work/err" >&2; exit 1; }
}
run_cpp_e2e() {  # run_cpp_e2e RANKS: samples/s between the log lines of step SKIP and the last step
  local np=$1 len=(--set train.max_steps=$((e2e_steps + skip)))
  (( e2e_steps == 0 )) && len=(--set train.max_steps=0 --set train.epochs=1)
  rm -rf "$work/run"
  mpirun --oversubscribe -np "$np" "$build/jobs/fnvlp-pretrain" --config "$config" \
    --data "$work/train" --out "$work/run" "${len[@]}" --set train.log_every="$skip" \
    --set train.export_embeddings=false --set checkpoint.every_steps=0 >"$work/err" 2>&1 ||
    { cat "$work/err" >&2; exit 1; }
  # samples/s = steps * batch * ranks / seconds, timed from the log line of step SKIP (start-up,
  # the first batches and the final checkpoint stay outside, as pytorch_albef.py does); data_wait is
  # the loader wait fraction reported over the timed windows.
  $py - "$work/run" "$skip" "$np" <<'PY'
import json, sys, yaml
run, skip, ranks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
batch = yaml.safe_load(open(run + "/config.yaml"))["train"]["batch_size"]
rows = [json.loads(l) for l in open(run + "/metrics.jsonl") if l.strip()]
first = next(r for r in rows if r["step"] == skip)
last = rows[-1]
timed = [r for r in rows if r["step"] > skip]
wait = sum(r["data_wait"] for r in timed) / len(timed)
print((last["step"] - skip) * batch * ranks / (last["elapsed_s"] - first["elapsed_s"]), wait)
PY
}
run_py_e2e() {
  $py "$root/tests/bench/pytorch_albef.py" --config "$config" --mode epoch --flickr "$flickr" \
    --vocab "$vocab" --steps "$e2e_steps" --skip "$skip" --num-workers "$workers" 2>"$work/err" |
    field samples_per_s data_wait || { cat "$work/err" >&2; exit 1; }
}

# --- rounds ---------------------------------------------------------------------------------------
names=(cpp_compute py_compute cpp_np1 py_loader cpp_np2)
declare -A all
uptime_start=$(cut -d' ' -f1 /proc/loadavg)
t_start=$(date +%s)
for r in $(seq 1 "$rounds"); do
  for name in "${names[@]}"; do
    case $name in
      cpp_compute) out=$(run_cpp_compute) ;;
      py_compute) out=$(run_py_compute) ;;
      cpp_np1) out=$(run_cpp_e2e 1) ;;
      py_loader) out=$(run_py_e2e) ;;
      cpp_np2) out=$(run_cpp_e2e 2) ;;
    esac
    all[$name]="${all[$name]:-} ${out%% *}"
    case $name in
      *compute) printf 'round %d %-12s %8.3f s/step\n' "$r" "$name" "$out" ;;
      *) printf 'round %d %-12s %8.1f samples/s  data wait %4.1f%%\n' "$r" "$name" "${out%% *}" \
           "$(echo "${out##* } * 100" | bc -l)" ;;
    esac
  done
done

# --- table: best round (compute: lowest s/step; e2e: highest samples/s) and the median ------------
e2e_desc="$e2e_steps steps after $skip untimed"
(( e2e_steps == 0 )) && e2e_desc="one epoch after $skip untimed steps"
$py - "$preset" "$rounds" "$compute_steps" "$e2e_desc" "$workers" "$shard_px" "$(nproc)" \
  "$uptime_start" "$(cut -d' ' -f1 /proc/loadavg)" "$(( $(date +%s) - t_start ))" \
  "${all[cpp_compute]}" "${all[py_compute]}" "${all[cpp_np1]}" "${all[py_loader]}" "${all[cpp_np2]}" <<'PY'
import statistics, sys
(preset, rounds, csteps, e2e, workers, px, cores, load0, load1, secs), v = sys.argv[1:11], \
    [[float(x) for x in a.split()] for a in sys.argv[11:]]
cc, pc, c1, pl, c2 = v
best = lambda xs, low: min(xs) if low else max(xs)
med = statistics.median
print()
print(f"preset {preset}, batch 32 per rank, best of {rounds} rounds (median in brackets); "
      f"{cores} cores, load average {load0} -> {load1}, {secs} s")
print(f"(a) compute only, {csteps} timed steps on one in-memory batch:")
print(f"    fnvlp bench_step      {best(cc,1):7.3f} s/step  [{med(cc):.3f}]  {32/best(cc,1):6.1f} samples/s")
print(f"    PyTorch               {best(pc,1):7.3f} s/step  [{med(pc):.3f}]  {32/best(pc,1):6.1f} samples/s")
print(f"    C++ speed-up          {best(pc,1)/best(cc,1):7.2f}x        [{med(pc)/med(cc):.2f}x]   goal >= 1.15x")
print(f"(b) end to end, Flickr8k-128 train split, {e2e}:")
print(f"    fnvlp-pretrain 1 rank {best(c1,0):7.1f} samples/s  [{med(c1):.1f}]  (HDF5 shards, {px} px)")
print(f"    PyTorch DataLoader    {best(pl,0):7.1f} samples/s  [{med(pl):.1f}]  (JPEG + PIL, {workers} worker(s))")
print(f"    C++ speed-up          {best(c1,0)/best(pl,0):7.2f}x        [{med(c1)/med(pl):.2f}x]   goal >= 2x")
print(f"    fnvlp 2 ranks / PyTorch {best(c2,0)/best(pl,0):5.2f}x        [{med(c2)/med(pl):.2f}x]   (whole machine each)")
print(f"(c) fnvlp-pretrain 2 ranks {best(c2,0):6.1f} samples/s  [{med(c2):.1f}]")
print(f"    2 ranks / 1 rank      {best(c2,0)/best(c1,0):7.2f}x        [{med(c2)/med(c1):.2f}x]   goal >= 1.7x")
PY
