#!/usr/bin/env bash
# GPU benchmark (issue 30): fnvlp-pretrain on one GPU, samples/s for the tiny/small/base presets
# (jobs/configs) x fp32/bf16, at the configs' batch (32), on synthetic shards of each preset's
# image size, beside the PyTorch twin's eager step of the same cells (tests/bench/gpu_twin.sh) on
# the same GPU. fnvlp's figure is end to end (HDF5 reads, augmentation on the prefetch thread,
# the step); its data_wait share says when the loader, not the GPU, sets the pace.
#
# Usage: tests/bench/gpu_pretrain.sh BUILD_DIR VOCAB [OUT]   (OUT: where results.jsonl goes)
# Environment: PRESETS ("tiny small base"), PRECISIONS ("fp32 bf16"), STEPS (60; base 20),
# TWIN (1: also run the twin's eager cells), PYTHON (python3).
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
    run=$work/$preset-$prec
    t0=$(date +%s.%N)
    mpirun -np 1 "$bin/jobs/fnvlp-pretrain" --data "$work/$preset-shards" \
      --config "$root/jobs/configs/$preset.yaml" --out "$run" --set train.device=cuda \
      --set train.precision="$prec" --set train.max_steps="$steps" --set train.log_every=5 \
      --set train.export_embeddings=false --set checkpoint.every_steps=0 --set train.threads=4 \
      --set train.prefetch=4 >"$run.txt" 2>&1 || { tail -20 "$run.txt"; echo "FAIL: $preset $prec"; continue; }
    "$py" - "$run" "$preset" "$prec" "$t0" >>"$out/results.jsonl" <<'PY'
import json, statistics, sys, time
run, preset, prec, t0 = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
rows = [r for r in map(json.loads, open(run + "/metrics.jsonl")) if "samples_per_s" in r]
timed = rows[len(rows) // 3:]  # the first third warms up (allocator, cuDNN/cuBLAS heuristics)
print(json.dumps({"impl": "fnvlp", "preset": preset, "precision": prec,
                  "samples_per_s": statistics.median(r["samples_per_s"] for r in timed),
                  "data_wait": statistics.median(r.get("data_wait", 0) for r in timed),
                  "windows": len(timed), "wall_s": round(time.time() - t0, 1)}))
PY
    tail -n 1 "$out/results.jsonl"
  done
done
if [ "${TWIN:-1}" = 1 ]; then
  FNVLP_TWIN_MODES=eager FNVLP_TWIN_BIG_BATCH="" FNVLP_TWIN_PRESETS="${PRESETS:-tiny small base}" \
    FNVLP_TWIN_BUDGET=${TWIN_BUDGET:-150} OUT=$out bash "$root/tests/bench/gpu_twin.sh" || true
fi
