#!/usr/bin/env bash
# GPU benchmark (issue 48): fnvlp-pretrain on one GPU against the PyTorch twin of its step
# (tests/bench/pytorch_albef.py: eager, and "best" = SDPA + fused AdamW + torch.compile) on the
# same GPU in the same call, ending in one table (tests/bench/gpu_table.py): per cell samples/s,
# MFU, the ratios to the twin eager and the twin best, kernels and host operators per step and the
# GPU's busy share for the profiled cells.
#
# fnvlp's figure is end to end (HDF5 reads, augmentation on the prefetch thread, the step) on
# synthetic shards of each preset's image size, train.deterministic=false (DETERMINISTIC to
# change), in the modes of MODES: eager (train.cuda_graphs=false) and graphs (the static step
# captured in CUDA graphs). A profiled cell profiles its own last 3 steps (train.profile_steps);
# its timed windows end before them.
#
# With BUILD_DIR/tests/bench/bench_loader (device_pack.sh builds it), the loader alone per preset
# and batch at 1, 4 and 8 threads first ($OUT/loader.jsonl).
#
# Usage: tests/bench/gpu_pretrain.sh BUILD_DIR VOCAB [OUT]   (OUT: results.jsonl, table.md, ...)
# Environment:
#   CELLS    PRESET:PRECISION:BATCH list ("tiny:fp32:32 tiny:bf16:32 small:fp32:32 small:bf16:32
#            base:fp32:32 base:bf16:32 base:bf16:64")
#   MODES    fnvlp modes of every cell ("graphs"); EAGER_CELLS: cells also run eager
#            ("base:bf16:32 base:bf16:64"); DET_CELLS: cells also run "det", graphs with
#            train.deterministic=true ("base:bf16:64"); NORM_CELLS: cells also run "fnorm", graphs
#            with train.norm_kernel=fnvlp (the fused residual add + LayerNorm; "base:bf16:64")
#   PROFILE  CELL:MODE list profiled in-run ("base:bf16:64:graphs base:bf16:64:eager
#            base:bf16:64:fnorm")
#   STEPS    timed steps (30; base 20) after 10 untimed ones; THREADS train.threads (4)
#   TWIN     1: the twin's cells (eager for every cell; best for TWIN_BEST, "base:32 base:64");
#            TWIN_BUDGET seconds for them (240), TWIN_FIRST the cells run first (base bf16 at
#            64 and 32, eager and best)
#   METHODS  methods (jobs/configs/methods/NAME.yaml, layered on the preset) run on METHOD_CELL
#            (base:bf16:64) in the graphs mode beside its uniform cell ("": none; issue 60:
#            "glofnd fnc srcl hardening momentum falcon falcon_glofnd tcl"); SHARED 1: METHOD_CELL's
#            uniform and METHODS at 2 ranks sharing the GPU (comm.backend=mpi), eager and graphs
#   DEVICE   cuda (cpu: a dry run of the script), PYTHON (python3)
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac  # the header above
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=$1 vocab=$2 out=${3:-${OUT:-/tmp}}
py=${PYTHON:-python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/fnvlp_gpubench.XXXXXX")
trap 'rm -rf "$work"' EXIT
export HDF5_USE_FILE_LOCKING=FALSE OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$out"
: >"$out/results.jsonl"
cells=${CELLS:-tiny:fp32:32 tiny:bf16:32 small:fp32:32 small:bf16:32 base:fp32:32 base:bf16:32 base:bf16:64}
eager_cells=" ${EAGER_CELLS-base:bf16:32 base:bf16:64} "
det_cells=" ${DET_CELLS-base:bf16:64} "
norm_cells=" ${NORM_CELLS-base:bf16:64} "
profiled=" ${PROFILE-base:bf16:64:graphs base:bf16:64:eager base:bf16:64:fnorm} "
det=${DETERMINISTIC:-false}

image_size() { awk '/image_size:/ {print $2; exit}' "$root/jobs/configs/$1.yaml"; }

shards() {  # shards PRESET: synthetic shards at the preset's image size, made once
  local preset=$1 px
  [ -d "$work/$preset-shards" ] && return
  px=$(image_size "$preset")
  mpirun --oversubscribe -np 4 "$bin/data_prep/fnvlp-synth" --out "$work/$preset-synth" --images 640 \
    --captions-per-image 1 --classes 16 --image-size "$px" --seed 1 --val-fraction 0 >/dev/null
  mpirun --oversubscribe -np 4 "$bin/data_prep/fnvlp-shard" --input "$work/$preset-synth/captions.json" \
    --image-root "$work/$preset-synth" --vocab "$vocab" --out "$work/$preset-shards" \
    --image-size "$px" --shard-size 320 >/dev/null
}

# fnvlp_cell RUN NP ARGS...: one timed fnvlp-pretrain run on the synthetic shards of $preset.
fnvlp_cell() {
  local run=$1 np=$2
  shift 2
  # Unbound: mpirun binds a rank to one core by default, where train.threads and the loader
  # would share it (the twin has the machine's cores).
  # (--set overrides apply after every --config, whatever their order: ARGS' win.)
  mpirun --bind-to none --oversubscribe -np "$np" "$bin/jobs/fnvlp-pretrain" \
    --data "$work/$preset-shards" --config "$root/jobs/configs/$preset.yaml" --out "$run" \
    --set train.device="${DEVICE:-cuda}" --set train.precision="$prec" \
    --set train.batch_size="$batch" --set train.max_steps="$steps" --set train.log_every=5 \
    --set checkpoint.every_steps=0 --set train.threads="${THREADS:-4}" --set train.prefetch=4 \
    --set train.deterministic="$det" --set train.export_embeddings=false "$@" >"$run.txt" 2>&1
}
# fnvlp_record RUN MODE METHOD RANKS T0 LAST: its results.jsonl line (windows after step 10).
fnvlp_record() {
  "$py" - "$@" "$preset" "$prec" "$batch" "${THREADS:-4}" >>"$out/results.jsonl" <<'PY'
import json, statistics, sys, time
run, mode, method, ranks, t0, last, preset, prec, batch, threads = sys.argv[1:]
cfg = open(run + "/config.yaml").read()
rows = [r for r in map(json.loads, open(run + "/metrics.jsonl"))
        if "samples_per_s" in r and 10 < r["step"] <= int(last)]  # after the warm-up, before a profile
print(json.dumps({"impl": "fnvlp", "preset": preset, "precision": prec, "batch": int(batch),
                  "mode": mode, "method": method, "ranks": int(ranks),
                  "deterministic": "deterministic: true" in cfg,
                  "samples_per_s": statistics.median(r["samples_per_s"] for r in rows),
                  "data_wait": statistics.median(r.get("data_wait", 0) for r in rows),
                  "phase_ms": {k: round(statistics.median(r["phase_ms"][k] for r in rows), 3)
                               for k in rows[0].get("phase_ms", {})},
                  "threads": int(threads),
                  "windows": len(rows), "wall_s": round(time.time() - float(t0), 1)}))
PY
  tail -n 1 "$out/results.jsonl"
}

loaded=""
for cell in $cells; do
  IFS=: read -r preset prec batch <<<"$cell"
  shards "$preset"
  # The loader alone (read + augmentation per batch, tests/bench/bench_loader.cpp) at this cell's
  # batch and the step's intra-op threads and more: what the step waits for when it is faster.
  if [ -x "$bin/tests/bench/bench_loader" ] && [[ " $loaded " != *" $preset:$batch "* ]]; then
    loaded="$loaded $preset:$batch"
    for t in 1 4 8; do
      "$bin/tests/bench/bench_loader" --data "$work/$preset-shards" --batch "$batch" \
        --image-res "$(image_size "$preset")" --threads "$t" | tee -a "$out/loader.jsonl"
    done
  fi
  timed=${STEPS:-30}
  [ "$preset" != base ] || timed=${STEPS:-20}
  steps=$((timed + 10))
  modes=${MODES:-graphs}
  case "$eager_cells" in *" $cell "*) modes="eager $modes" ;; esac
  case "$det_cells" in *" $cell "*) modes="$modes det" ;; esac
  case "$norm_cells" in *" $cell "*) modes="$modes fnorm" ;; esac
  for mode in $modes; do
    run=$work/$preset-$prec-$batch-$mode
    extra=()
    case $mode in
      graphs) extra+=(--set train.cuda_graphs=true) ;;
      det) extra=(--set train.cuda_graphs=true --set train.deterministic=true) ;;
      fnorm) extra=(--set train.cuda_graphs=true --set train.norm_kernel=fnvlp) ;;
    esac
    profile=0
    case "$profiled" in *" $cell:$mode "*)
      profile=1
      steps=$((steps + 3))
      extra+=(--set train.profile_start=$((steps - 3)) --set train.profile_steps=3) ;;
    esac
    t0=$(date +%s.%N)
    fnvlp_cell "$run" 1 "${extra[@]}" || { tail -20 "$run.txt"; echo "FAIL: $cell $mode"; continue; }
    fnvlp_record "$run" "$mode" uniform 1 "$t0" "$((steps - 3 * profile))"
    if [ "$profile" = 1 ]; then
      name=$preset-$prec-$batch-$mode
      "$py" "$root/tests/bench/trace_summary.py" "$run/profile/trace-rank0.json" --steps 3 \
        --json "$out/profile-fnvlp-$name.json" >"$out/profile-fnvlp-$name.txt" || true
      gzip -c "$run/profile/trace-rank0.json" >"$out/trace-fnvlp-$name.json.gz" || true
      head -n 1 "$out/profile-fnvlp-$name.txt" || true
    fi
  done
done
# The methods on METHOD_CELL with graphs (issue 60), and at 2 ranks sharing the GPU.
if [ -n "${METHODS:-}" ] || [ "${SHARED:-0}" = 1 ]; then
  IFS=: read -r preset prec batch <<<"${METHOD_CELL:-base:bf16:64}"
  shards "$preset"
  timed=${STEPS:-20}
  steps=$((timed + 10))
  # 640 pairs: an epoch is 10 steps at 64, the timed windows are the grouped epochs (GRIT, FALCON
  # group from epoch 1 over search spaces of 320 pairs, exported at each epoch end).
  grouped=(--set sampler.search_space=320 --set train.export_embeddings=true)
  for m in ${METHODS:-}; do
    run=$work/$preset-$prec-$batch-graphs-$m
    t0=$(date +%s.%N)
    fnvlp_cell "$run" 1 --config "$root/jobs/configs/methods/$m.yaml" "${grouped[@]}" \
      --set train.cuda_graphs=true || { tail -20 "$run.txt"; echo "FAIL: $m"; continue; }
    fnvlp_record "$run" graphs "$m" 1 "$t0" "$steps"
  done
  if [ "${SHARED:-0}" = 1 ]; then
    for m in uniform ${METHODS:-}; do
      for mode in eager graphs; do
        run=$work/$preset-$prec-$batch-$mode-$m-shared2
        extra=(--set comm.backend=mpi "${grouped[@]}")
        [ "$mode" = eager ] || extra+=(--set train.cuda_graphs=true)
        [ "$m" = uniform ] || extra+=(--config "$root/jobs/configs/methods/$m.yaml")
        t0=$(date +%s.%N)
        fnvlp_cell "$run" 2 "${extra[@]}" || { tail -20 "$run.txt"; echo "FAIL: $m shared $mode"; continue; }
        fnvlp_record "$run" "$mode" "$m" 2 "$t0" "$steps"
      done
    done
  fi
fi
if [ "${TWIN:-1}" = 1 ]; then
  presets=$(for c in $cells; do echo "${c%%:*}"; done | awk '!seen[$0]++' | tr '\n' ' ')
  precisions=$(for c in $cells; do c=${c#*:}; echo "${c%%:*}"; done | awk '!seen[$0]++' | tr '\n' ' ')
  big=$(for c in $cells; do b=${c##*:}; [ "$b" = 32 ] || echo "${c%%:*}:$b"; done | tr '\n' ' ')
  # The twin's base bf16 cells first (ALBEF's batch, then 32): the comparisons issue 48 is judged
  # by, before the budget runs out on the small presets.
  first="base:64:bf16:eager base:64:bf16:best base:32:bf16:eager base:32:bf16:best"
  FNVLP_TWIN_FIRST="${TWIN_FIRST-$first}" \
  FNVLP_TWIN_MODES="eager best" FNVLP_TWIN_BEST="${TWIN_BEST-base:32 base:64}" \
    FNVLP_TWIN_BIG_BATCH="$big" FNVLP_TWIN_PRESETS="$presets" FNVLP_TWIN_PRECISIONS="$precisions" \
    FNVLP_TWIN_BUDGET=${TWIN_BUDGET:-240} FNVLP_TWIN_DEVICE="${DEVICE:-cuda}" OUT=$out \
    bash "$root/tests/bench/gpu_twin.sh" || true
fi
"$py" "$root/tests/bench/gpu_table.py" "$out"
