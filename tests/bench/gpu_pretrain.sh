#!/usr/bin/env bash
# GPU benchmark (issue 30): fnvlp-pretrain on one GPU, samples/s for the tiny/small/base presets
# (jobs/configs) x fp32/bf16, at the configs' batch (32), on synthetic shards of each preset's
# image size, beside the PyTorch twin's eager step of the same cells (tests/bench/gpu_twin.sh) on
# the same GPU. fnvlp's figure is end to end (HDF5 reads, augmentation on the prefetch thread,
# the step); its data_wait share says when the loader, not the GPU, sets the pace.
#
# Usage: tests/bench/gpu_pretrain.sh BUILD_DIR VOCAB [OUT]   (OUT: where results.jsonl goes)
# Environment: PRESETS ("tiny small base"), PRECISIONS ("fp32 bf16"), STEPS (60; base 20),
# DEVICE (cuda; cpu for a dry run of the script), DETERMINISTIC ("true": the train.deterministic
# values to run, e.g. "true false"),
# TWIN (1: also run the twin's eager cells), PYTHON (python3),
# PROFILE ("": cells as PRESET:PRECISION, e.g. "tiny:fp32 base:bf16", each profiled for 3 steps
# after 12 in fnvlp (train.profile_steps, with the last DETERMINISTIC value) and in the twin's eager step (--profile): gzipped
# Chrome traces and tests/bench/trace_summary.py's summaries in OUT).
# Each fnvlp line also has phase_ms, the host wall time of the step's phases (StepClock; without
# a synchronisation a phase's figure is the host's, the GPU's waits land where the host waits).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=$1 vocab=$2 out=${3:-${OUT:-/tmp}}
py=${PYTHON:-python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/fnvlp_gpubench.XXXXXX")
trap 'rm -rf "$work"' EXIT
export HDF5_USE_FILE_LOCKING=FALSE OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$out"
: >"$out/results.jsonl"
for preset in ${PRESETS:-tiny small base}; do
  px=$(awk '/image_size:/ {print $2; exit}' "$root/jobs/configs/$preset.yaml")
  mpirun -np 4 "$bin/data_prep/fnvlp-synth" --out "$work/$preset-synth" --images 640 \
    --captions-per-image 1 --classes 16 --image-size "$px" --seed 1 --val-fraction 0 >/dev/null
  mpirun -np 4 "$bin/data_prep/fnvlp-shard" --input "$work/$preset-synth/captions.json" \
    --image-root "$work/$preset-synth" --vocab "$vocab" --out "$work/$preset-shards" \
    --image-size "$px" --shard-size 320 >/dev/null
  steps=${STEPS:-60}
  [ "$preset" != base ] || steps=${STEPS:-20}
  for prec in ${PRECISIONS:-fp32 bf16}; do
    for det in ${DETERMINISTIC:-true}; do
      run=$work/$preset-$prec-$det
      t0=$(date +%s.%N)
      mpirun -np 1 "$bin/jobs/fnvlp-pretrain" --data "$work/$preset-shards" \
        --config "$root/jobs/configs/$preset.yaml" --out "$run" --set train.device="${DEVICE:-cuda}" \
        --set train.precision="$prec" --set train.max_steps="$steps" --set train.log_every=5 \
        --set train.deterministic="$det" --set train.export_embeddings=false \
        --set checkpoint.every_steps=0 --set train.threads=4 --set train.prefetch=4 \
        >"$run.txt" 2>&1 || { tail -20 "$run.txt"; echo "FAIL: $preset $prec"; continue; }
      "$py" - "$run" "$preset" "$prec" "$det" "$t0" >>"$out/results.jsonl" <<'PY'
import json, statistics, sys, time
run, preset, prec, det, t0 = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])
rows = [r for r in map(json.loads, open(run + "/metrics.jsonl")) if "samples_per_s" in r]
timed = rows[len(rows) // 3:]  # the first third warms up (allocator, cuDNN/cuBLAS heuristics)
phases = {k: round(statistics.median(r["phase_ms"][k] for r in timed), 3)
          for k in timed[0].get("phase_ms", {})}
print(json.dumps({"impl": "fnvlp", "preset": preset, "precision": prec,
                  "deterministic": det == "true",
                  "samples_per_s": statistics.median(r["samples_per_s"] for r in timed),
                  "data_wait": statistics.median(r.get("data_wait", 0) for r in timed),
                  "phase_ms": phases, "windows": len(timed),
                  "wall_s": round(time.time() - t0, 1)}))
PY
      tail -n 1 "$out/results.jsonl"
    done
  done
  profile_det=${DETERMINISTIC:-true}
  profile_det=${profile_det##* }
  for cell in ${PROFILE:-}; do
    [ "${cell%%:*}" = "$preset" ] || continue
    prec=${cell#*:} run=$work/$preset-$prec-profile
    mpirun -np 1 "$bin/jobs/fnvlp-pretrain" --data "$work/$preset-shards" \
      --config "$root/jobs/configs/$preset.yaml" --out "$run" --set train.device="${DEVICE:-cuda}" \
      --set train.precision="$prec" --set train.max_steps=16 --set train.profile_start=12 \
      --set train.profile_steps=3 --set train.deterministic="$profile_det" \
      --set train.export_embeddings=false --set checkpoint.every_steps=0 --set train.threads=4 \
      --set train.prefetch=4 >"$run.txt" 2>&1 || { tail -20 "$run.txt"; echo "FAIL: profile $cell"; continue; }
    "$py" "$root/tests/bench/trace_summary.py" "$run/profile/trace-rank0.json" --steps 3 \
      --json "$out/profile-fnvlp-$preset-$prec.json" >"$out/profile-fnvlp-$preset-$prec.txt" || true
    gzip -c "$run/profile/trace-rank0.json" >"$out/trace-fnvlp-$preset-$prec.json.gz"
    "$py" "$root/tests/bench/pytorch_albef.py" --config "$root/jobs/configs/$preset.yaml" \
      --mode compute --synthetic --device "${DEVICE:-cuda}" --precision "$prec" --steps 5 --warmup 3 \
      --flop-count off --profile "$work/twin-$preset-$prec.json" --profile-steps 3 \
      >"$work/twin-$preset-$prec.txt" 2>&1 || { tail -5 "$work/twin-$preset-$prec.txt"; continue; }
    "$py" "$root/tests/bench/trace_summary.py" "$work/twin-$preset-$prec.json" --steps 3 \
      --json "$out/profile-twin-$preset-$prec.json" >"$out/profile-twin-$preset-$prec.txt" || true
    gzip -c "$work/twin-$preset-$prec.json" >"$out/trace-twin-$preset-$prec.json.gz"
    head -n 1 "$out/profile-fnvlp-$preset-$prec.txt" "$out/profile-twin-$preset-$prec.txt"
  done
done
if [ "${TWIN:-1}" = 1 ]; then
  FNVLP_TWIN_MODES=eager FNVLP_TWIN_BIG_BATCH="" FNVLP_TWIN_PRESETS="${PRESETS:-tiny small base}" \
    FNVLP_TWIN_BUDGET=${TWIN_BUDGET:-150} OUT=$out bash "$root/tests/bench/gpu_twin.sh" || true
fi
