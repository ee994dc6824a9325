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
#   (a') (a) against the twin on the PyPI wheel's PyTorch 2.x (what a user picks today), eager
#       (goal C++ >= 1.3x) and torch.compile with inductor (goal >= 1.0x; compilation stays in
#       the untimed warm-up steps). Its Python is FNVLP_TWIN_PY, else env/install-gpu.sh's venv;
#       without one that imports torch 2.x, h5py and yaml these rows say SKIPPED and why.
# One libtorch/BLAS thread per process (ARCHITECTURE.md §13; env/mpi-env.sh exports the variables); in
# (b) and (c) each fnvlp rank is bound to cores/ranks cores (its prefetch thread beside the
# compute thread), as the PyTorch side's processes share the whole machine.
# Every round line also shows the CPU share other processes took from the machine meanwhile
# ("foreign"), from /proc/stat minus the contender's own CPU time: rounds with a large one are
# not comparable. The compute-only figures also come as process CPU seconds per step, which other
# jobs on the cores barely move.
#
# Usage: tests/bench/bench_pretrain.sh [BUILD_DIR] [ROUNDS] [PRESET]
#   PRESET: tiny (default: the 64 px model, what fits ~15 min on 2 cores) or small (128 px, ~6x
#   slower per step: use with small E2E_STEPS).
#   Environment: COMPUTE_STEPS (20), WARMUP (3), E2E_STEPS (40), SKIP (10), NUM_WORKERS (1),
#   SHARD_PX (128: shards keep Flickr8k-128's pixels, so both sides crop the same source images),
#   PARTS ("compute e2e": "compute" runs (a) and (a') only), FNVLP_TWIN_PY (above),
#   BENCH_STEP (a built bench_step; default BUILD_DIR/tests/bench/bench_step, else it is compiled
#   once into ${FNVLP_BENCH_CACHE:-/tmp}/fnvlp_bench_step with g++ against BUILD_DIR/libfnvlp.a).
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac  # the header above
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
rounds=${2:-3}
preset=${3:-tiny}
compute_steps=${COMPUTE_STEPS:-20}
warmup=${WARMUP:-3}
e2e_steps=${E2E_STEPS:-40}
skip=${SKIP:-10}
workers=${NUM_WORKERS:-1}
shard_px=${SHARD_PX:-128}
parts=${PARTS:-compute e2e}
shared=${FNVLP_SHARED_DIR:-$root/../shared}
flickr=$shared/data/flickr8k-128
vocab=$shared/data/vocab/bert-base-uncased-vocab.txt
config=$root/jobs/configs/$preset.yaml
py=/usr/bin/python3
cores=$(getconf _NPROCESSORS_ONLN)
source "$root/env/mpi-env.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/fnvlp_bench_pretrain.XXXXXX")
trap 'rm -rf "$work"' EXIT
(( e2e_steps == 0 || e2e_steps % skip == 0 )) || { echo "E2E_STEPS must be a multiple of SKIP" >&2; exit 2; }
$py -c "import torch, yaml" 2>/dev/null ||
  { echo "needs python3-torch and python3-yaml (apt-get install python3-torch python3-yaml)" >&2; exit 2; }

# --- bench_step: the C++ compute-only program -------------------------------------------------
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
      -lspdlog -lfmt -lcrypto -licuuc -lturbojpeg -lpng -lblas -pthread
    mv "$bench_step.tmp" "$bench_step"
  fi
fi

# --- BLAS kernels: the same for both contenders ------------------------------------------------
# fnvlp's jobs leave OpenBLAS's generic fallback kernels for the best ones the CPU runs
# (src/fnvlp/core/blas.hpp); PyTorch as shipped would stay on the fallback. Both get the core
# fnvlp's jobs end on (or the user's OPENBLAS_CORETYPE): this compares frameworks, not kernels.
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  blas_core=$(OPENBLAS_VERBOSE=2 "$build/analysis/fnvlp-report" --help 2>&1 | sed -n 's/^Core: //p' | tail -1)
  [ -n "$blas_core" ] && export OPENBLAS_CORETYPE=$blas_core
fi
echo "OpenBLAS kernels of both contenders: ${OPENBLAS_CORETYPE:-(not OpenBLAS)}"

# --- the twin on PyTorch 2.x: (a') -------------------------------------------------------------
py2=${FNVLP_TWIN_PY:-${FNVLP_GPU_PREFIX:-${XDG_CACHE_HOME:-$HOME/.cache}/fnvlp/gpu}/venv/bin/python}
py2_skip=""
if [ ! -x "$py2" ]; then
  py2_skip="no Python at $py2 (bash env/install-gpu.sh, or FNVLP_TWIN_PY)"
elif ! py2_version=$("$py2" -c 'import h5py, yaml, torch; print(torch.__version__)' 2>&1); then
  py2_skip="$py2 lacks torch, h5py or yaml ($(tail -1 <<<"$py2_version"))"
elif [ "${py2_version%%.*}" -lt 2 ]; then
  py2_skip="$py2 has PyTorch $py2_version, not 2.x"
fi
if [ -n "$py2_skip" ]; then
  echo "SKIPPED (a') PyTorch 2.x twin: $py2_skip"
else
  echo "(a') PyTorch 2.x twin: $py2, torch $py2_version"
fi

# --- shards of the train split ----------------------------------------------------------------
mpirun --oversubscribe -np 2 "$build/data_prep/fnvlp-shard" --input "$flickr/captions.json" \
  --format albef --image-root "$flickr" --split-file "$flickr/splits.json" --split train \
  --vocab "$vocab" --image-size "$shard_px" --max-len 30 --out "$work/train" >"$work/shard.log" 2>&1 ||
  { cat "$work/shard.log" >&2; exit 1; }

# --- measuring --------------------------------------------------------------------------------
busy_ticks() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9; exit}' /proc/stat; }
# measured CMD...: runs CMD (stdout to $work/out), writes the CPU share that other processes took
# meanwhile, in % of the machine, to $work/foreign.
measured() {
  local b0 b1 hz
  hz=$(getconf CLK_TCK)
  b0=$(busy_ticks)
  /usr/bin/time -f "%e %U %S" -o "$work/time" "$@" >"$work/out" 2>"$work/err" ||
    { cat "$work/err" >&2; exit 1; }
  b1=$(busy_ticks)
  read -r wall user sys <"$work/time"
  echo "(($b1 - $b0) / $hz - $user - $sys) / ($wall * $cores) * 100" | bc -l >"$work/foreign"
}
field() { $py -c "import json,sys; d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); print(*[d[k] for k in sys.argv[2:]])" "$work/out" "$@"; }

# Contenders: each prints "VALUE EXTRA" (compute: s/step and CPU s/step; e2e: samples/s and the
# data-wait fraction).
run_cpp_compute() {
  measured "$bench_step" --config "$config" --data "$work/train" --steps "$compute_steps" \
    --warmup "$warmup"
  field step_s_mean step_cpu_s_mean
}
run_py_compute() {
  measured $py "$root/tests/bench/pytorch_albef.py" --config "$config" --mode compute \
    --data "$work/train" --steps "$compute_steps" --warmup "$warmup"
  field step_s_mean step_cpu_s_mean
}
run_py2_compute() {  # run_py2_compute [--compile]: 2 more warm-up steps compiled (the first
  # compiles, the second recompiles the MLM head for a new count of masked tokens)
  local w=$warmup
  [ $# -gt 0 ] && w=$((warmup + 2))
  measured "$py2" "$root/tests/bench/pytorch_albef.py" --config "$config" --mode compute \
    --data "$work/train" --steps "$compute_steps" --warmup "$w" "$@"
  field step_s_mean step_cpu_s_mean
}
run_cpp_e2e() {  # run_cpp_e2e RANKS
  local np=$1
  local len=(--set train.max_steps=$((e2e_steps + skip)))
  (( e2e_steps == 0 )) && len=(--set train.max_steps=0 --set train.epochs=1)
  rm -rf "$work/run"
  # The machine's cores split evenly between the ranks, as PyTorch's main process and its loader
  # workers share all of them: a rank's compute thread and its prefetch thread then run on
  # different cores where there are enough. Open MPI's default binds each rank (np <= 2) to one
  # core, where the reader's ~5 ms per batch comes out of the step (1 rank: data wait 1.0-1.6%
  # against 0.2-0.3% with two cores, tiny preset).
  local pe=$(( cores / np ))
  (( pe < 1 )) && pe=1
  measured mpirun --oversubscribe -np "$np" --map-by "slot:PE=$pe" "$build/jobs/fnvlp-pretrain" \
    --config "$config" --data "$work/train" --out "$work/run" "${len[@]}" \
    --set train.log_every="$skip" --set train.export_embeddings=false --set checkpoint.every_steps=0
  # samples/s = steps * batch * ranks / seconds, timed from the log line of step SKIP: start-up,
  # the first batches and the final checkpoint stay outside, as pytorch_albef.py times it.
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
  measured $py "$root/tests/bench/pytorch_albef.py" --config "$config" --mode epoch \
    --flickr "$flickr" --vocab "$vocab" --steps "$e2e_steps" --skip "$skip" --num-workers "$workers"
  field samples_per_s data_wait
}

# --- rounds -----------------------------------------------------------------------------------
names=()
case " $parts " in *" compute "*) names+=(cpp_compute py_compute) ;; esac
case " $parts " in *" compute "*) [ -z "$py2_skip" ] && names+=(py2_eager py2_compiled) ;; esac
case " $parts " in *" e2e "*) names+=(cpp_np1 py_loader cpp_np2) ;; esac
(( ${#names[@]} )) || { echo "PARTS must name compute and/or e2e" >&2; exit 2; }
declare -A value extra foreign
load0=$(cut -d' ' -f1 /proc/loadavg)
t_start=$(date +%s)
for r in $(seq 1 "$rounds"); do
  for name in "${names[@]}"; do
    case $name in
      cpp_compute) out=$(run_cpp_compute) ;;
      py_compute) out=$(run_py_compute) ;;
      py2_eager) out=$(run_py2_compute) ;;
      py2_compiled) out=$(run_py2_compute --compile) ;;
      cpp_np1) out=$(run_cpp_e2e 1) ;;
      py_loader) out=$(run_py_e2e) ;;
      cpp_np2) out=$(run_cpp_e2e 2) ;;
    esac
    read -r v x <<<"$out"
    f=$(cat "$work/foreign")
    value[$name]="${value[$name]:-} $v"
    extra[$name]="${extra[$name]:-} $x"
    foreign[$name]="${foreign[$name]:-} $f"
    case $name in
      *compute | py2_*) printf 'round %d %-12s %7.3f s/step  %7.3f CPU s/step          foreign %3.0f%%\n' \
                  "$r" "$name" "$v" "$x" "$f" ;;
      *) printf 'round %d %-12s %7.1f samples/s  data wait %4.1f%%          foreign %3.0f%%\n' \
           "$r" "$name" "$v" "$(echo "$x * 100" | bc -l)" "$f" ;;
    esac
  done
done

# --- table: best round (compute: lowest s/step; e2e: highest samples/s) and the median ----------
e2e_desc="$e2e_steps steps after $skip untimed"
(( e2e_steps == 0 )) && e2e_desc="one epoch after $skip untimed steps"
args=()
for name in "${names[@]}"; do args+=("$name" "${value[$name]}" "${extra[$name]}" "${foreign[$name]}"); done
$py - "$preset" "$rounds" "$compute_steps" "$e2e_desc" "$workers" "$shard_px" "$cores" \
  "$load0" "$(cut -d' ' -f1 /proc/loadavg)" "$(($(date +%s) - t_start))" "$py2_skip" \
  "${py2_version:-}" "${args[@]}" <<'PY'
import statistics, sys
preset, rounds, csteps, e2e, workers, px, cores, load0, load1, secs, py2_skip, py2_v = sys.argv[1:13]
a = sys.argv[13:]
run = {a[i]: [[float(x) for x in s.split()] for s in a[i + 1:i + 4]] for i in range(0, len(a), 4)}
med = statistics.median
lo, hi = min, max
fr = lambda f: f"{min(f):.0f}-{max(f):.0f}%"
print()
print(f"preset {preset}, batch 32 per rank, best of {rounds} rounds [median]; {cores} cores, "
      f"load average {load0} -> {load1}, {secs} s")
print("| measure | fnvlp (C++) | PyTorch | ratio | goal | foreign CPU (C++ / Py) |")
print("|---|---|---|---|---|---|")
if "cpp_compute" in run:
    cc, ccpu, cf = run["cpp_compute"]
    rows = [("py_compute", "(a) compute only, PyTorch 1.13 (Debian)", "1.15x"),
            ("py2_eager", f"(a') compute only, PyTorch {py2_v} eager", "1.3x"),
            ("py2_compiled", f"(a') compute only, PyTorch {py2_v} torch.compile", "1.0x")]
    for name, what, goal in rows:
        if name not in run:
            print(f"| {what} | SKIPPED: {py2_skip} | | | >= {goal} | |")
            continue
        pc, pcpu, pf = run[name]
        print(f"| {what}, wall s/step ({csteps} steps) | {lo(cc):.3f} [{med(cc):.3f}] | "
              f"{lo(pc):.3f} [{med(pc):.3f}] | {lo(pc)/lo(cc):.2f}x [{med(pc)/med(cc):.2f}x] | "
              f">= {goal} | {fr(cf)} / {fr(pf)} |")
        print(f"| {what}, CPU s/step | {lo(ccpu):.3f} [{med(ccpu):.3f}] | "
              f"{lo(pcpu):.3f} [{med(pcpu):.3f}] | {lo(pcpu)/lo(ccpu):.2f}x "
              f"[{med(pcpu)/med(ccpu):.2f}x] | >= {goal} | |")
if "cpp_np1" in run:
    (c1, _, c1f), (pl, _, plf), (c2, _, c2f) = run["cpp_np1"], run["py_loader"], run["cpp_np2"]
    print(f"| (b) end to end, samples/s ({e2e}; C++ 1 rank, HDF5 {px} px / PyTorch JPEG, "
          f"{workers} worker) | {hi(c1):.1f} [{med(c1):.1f}] | {hi(pl):.1f} [{med(pl):.1f}] | "
          f"{hi(c1)/hi(pl):.2f}x [{med(c1)/med(pl):.2f}x] | >= 2x | {fr(c1f)} / {fr(plf)} |")
    print(f"| (b') C++ 2 ranks vs PyTorch (each on the whole machine) | {hi(c2):.1f} [{med(c2):.1f}] | "
          f"{hi(pl):.1f} [{med(pl):.1f}] | {hi(c2)/hi(pl):.2f}x [{med(c2)/med(pl):.2f}x] | | "
          f"{fr(c2f)} / {fr(plf)} |")
    print(f"| (c) C++ 2 ranks vs 1 rank, samples/s | {hi(c2):.1f} / {hi(c1):.1f} "
          f"[{med(c2):.1f} / {med(c1):.1f}] | | {hi(c2)/hi(c1):.2f}x [{med(c2)/med(c1):.2f}x] | "
          f">= 1.7x | {fr(c2f)} / {fr(c1f)} |")
PY
