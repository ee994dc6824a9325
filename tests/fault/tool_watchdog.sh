#!/usr/bin/env bash
# Guarantee 4 for the tools: fnvlp-shard (sharding and --verify), fnvlp-simstat and fnvlp-eval
# each run a watchdog (--watchdog-s) beaten by their loops' progress reports; a rank stalled inside
# one (FNVLP_FAULT progress.sleep on rank 1) ends the whole job with exit 4 within the limit, the
# message naming a rank and the phase it last reported. Without the watchdog these jobs hang.
# shellcheck source=tests/fault/lib.sh
source "$(dirname "$0")/lib.sh"
make_data

# stalled TOOL_PHASE_REGEX FAULT CMD...: the job must end by the watchdog, quickly.
stalled() {
  local phase=$1 fault=$2
  shift 2
  expect_failure env FNVLP_FAULT="$fault" "$@" --watchdog-s 5
  expect_output "fault: progress.sleep fires on rank 1"
  [ "$rc" -eq 4 ] || { tail -20 "$work/out.txt"; fail "exit code $rc, expected the watchdog's 4"; }
  expect_output "watchdog: rank [01] made no progress for [0-9.]+ s \(limit 5.0 s\); last reported progress report [0-9]+, phase '($phase)'"
  (( $(echo "$elapsed < 60" | bc) )) || fail "the watchdog took ${elapsed}s"
  grep -m1 -oE "watchdog: rank [01] made no progress[^;]*; last reported progress report [0-9]+, phase '[^']*'" "$work/out.txt"
}

echo "== fnvlp-shard: rank 1 stalls decoding its first images"
stalled "shard: [a-z0-9 ]+" "progress.sleep:1:1:600" \
  "${mpirun[@]}" "$bin/data_prep/fnvlp-shard" --input "$work/synth/captions.json" \
  --image-root "$work/synth" --split-file "$work/synth/splits.json" --split train \
  --vocab "$vocab" --out "$work/shards-stalled" --image-size 64 --shard-size 300

echo "== fnvlp-shard --verify: rank 1 stalls reading its shards' image chunks"
stalled "verify: [a-z ]+" "progress.sleep:2:1:600" \
  "${mpirun[@]}" "$bin/data_prep/fnvlp-shard" --verify "$work/shards"

echo "== fnvlp-simstat: rank 1 stalls in its candidate tiles"
/usr/bin/python3 - "$work/emb.h5" <<'PY'
import sys, h5py, numpy as np
n, d = 600, 8
rng = np.random.default_rng(5)
with h5py.File(sys.argv[1], "w") as f:
    for name in ("image_emb", "text_emb"):
        x = rng.standard_normal((n, d)).astype(np.float32)
        f[name] = x / np.linalg.norm(x, axis=1, keepdims=True)
    f["pair_id"] = np.arange(n, dtype=np.int64)
    f["image_id"] = np.arange(n, dtype=np.int64) // 5
    f["label"] = (np.arange(n) % 7).astype(np.int32)
    f.attrs["fnvlp_schema"] = np.int64(1)
    f.attrs["epoch"] = np.int64(0)
    f.attrs["step"] = np.int64(0)
PY
stalled "simstat: [a-z ]+" "progress.sleep:3:1:600" \
  "${mpirun[@]}" "$bin/analysis/fnvlp-simstat" --embeddings "$work/emb.h5" --out "$work/stats.h5" \
  --tile 64 --fnc-batch 16
# The same job without the stall finishes under an armed watchdog (a limit with room for a loaded
# CI machine's start-up; ToolWatchdog's unit test checks that reports keep it quiet).
"${mpirun[@]}" "$bin/analysis/fnvlp-simstat" --embeddings "$work/emb.h5" --out "$work/stats.h5" \
  --tile 64 --fnc-batch 16 --watchdog-s 20 >"$work/out.txt" 2>&1 || { tail -20 "$work/out.txt"; fail "simstat without a stall failed"; }
echo "  without the stall: finished, exit 0"

echo "== fnvlp-eval: rank 1 stalls encoding or re-ranking"
pretrain --out "$work/pre" --set train.max_steps=2 >"$work/pre.txt" 2>&1 || { tail -20 "$work/pre.txt"; fail "pretraining the checkpoint failed"; }
stalled "eval: [A-Za-z ,-]+|sha256 of the shards" "progress.sleep:3:1:600" \
  "${mpirun[@]}" "$bin/jobs/fnvlp-eval" --checkpoint "$work/pre/checkpoints/latest" \
  --data "$work/shards" --out "$work/eval.json" --k-test 8 --batch-size 16
echo "PASS"
