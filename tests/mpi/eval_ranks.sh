#!/usr/bin/env bash
# fnvlp-eval gives identical results at 1, 2 and 4 ranks: every query's ITC and ITM-re-ranked
# rank and every metric. A briefly trained tiny checkpoint (3 steps) of a small synthetic set;
# encoding chunks of 8 so the 4-rank split is uneven (30 images = 4 chunks, 90 captions = 12).
# Also: a checkpoint without model.yaml falls back to RUN/config.yaml, and bad input fails
# cleanly on every rank. Usage: eval_ranks.sh BINARY_DIR VOCAB SOURCE_DIR
set -euo pipefail
bin=$1 vocab=$2 src=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/fnvlp_eval_ranks.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
mpirun=(mpirun --oversubscribe)
"${mpirun[@]}" -np 2 "$bin/data_prep/fnvlp-synth" --out "$work/synth" --images 150 \
  --captions-per-image 3 --classes 6 --image-size 64 --seed 5 --val-fraction 0.2 >/dev/null
for split in train val; do
  "${mpirun[@]}" -np 2 "$bin/data_prep/fnvlp-shard" --input "$work/synth/captions.json" \
    --image-root "$work/synth" --split-file "$work/synth/splits.json" --split "$split" \
    --vocab "$vocab" --out "$work/$split" --image-size 64 >/dev/null
done
"${mpirun[@]}" -np 2 "$bin/jobs/fnvlp-pretrain" --config "$src/jobs/configs/tiny.yaml" \
  --data "$work/train" --out "$work/run" --set train.max_steps=3 --set train.batch_size=16 \
  --set train.export_embeddings=false >/dev/null
ckpt="$work/run/checkpoints/latest"
[ -f "$ckpt/model.yaml" ] || fail "checkpoint has no model.yaml"

for np in 1 2 4; do
  "${mpirun[@]}" -np $np "$bin/jobs/fnvlp-eval" --checkpoint "$ckpt" --data "$work/val" \
    --out "$work/eval-np$np.json" --ranks-out "$work/ranks-np$np.json" --k-test 8 \
    --batch-size 8 --probe
done
/usr/bin/python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
ranks = {np: json.load(open(f"{w}/ranks-np{np}.json")) for np in (1, 2, 4)}
evals = {np: json.load(open(f"{w}/eval-np{np}.json")) for np in (1, 2, 4)}
r1 = ranks[1]
assert len(r1["i2t_itm"]) == evals[1]["images"] == 30, (len(r1["i2t_itm"]), evals[1]["images"])
assert len(r1["t2i_itm"]) == evals[1]["pairs"] == 90
for np in (2, 4):
    assert ranks[np] == r1, f"per-query ranks differ between 1 and {np} ranks"
    a = {k: v for k, v in evals[1].items() if k not in ("ranks", "seconds")}
    b = {k: v for k, v in evals[np].items() if k not in ("ranks", "seconds")}
    assert a == b, f"eval JSON differs between 1 and {np} ranks: {a} vs {b}"
keys = ["txt_r1", "txt_r5", "txt_r10", "img_r1", "img_r5", "img_r10", "txt_r_mean", "img_r_mean",
        "r_mean", "k_test", "pairs", "images", "probe_accuracy"]
missing = [k for k in keys + ["itc_" + k for k in keys[:9]] if k not in evals[1]]
assert not missing, f"eval JSON lacks {missing}"
print("identical at np 1, 2, 4:", {k: evals[1][k] for k in ("r_mean", "itc_r_mean", "probe_accuracy")})
PY

# A checkpoint written before model.yaml existed (its COMMITTED marker does not list the file):
# the model config comes from RUN/config.yaml, and the results are the same.
old="$work/run/checkpoints/step-0000099"
cp -rL "$ckpt" "$old"
rm "$old/model.yaml"
/usr/bin/python3 - "$old/COMMITTED" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
del m["files"]["model.yaml"]
m["step"] = 99
json.dump(m, open(sys.argv[1], "w"))
PY
"${mpirun[@]}" -np 2 "$bin/jobs/fnvlp-eval" --checkpoint "$old" --data "$work/val" \
  --out "$work/eval-old.json" --ranks-out "$work/ranks-old.json" --k-test 8 --batch-size 8 >/dev/null
cmp "$work/ranks-old.json" "$work/ranks-np1.json" || fail "fallback to config.yaml changed the results"

# Bad input fails on every rank with a message naming the problem, no hang.
set +e
out=$(timeout 120 "${mpirun[@]}" -np 2 "$bin/jobs/fnvlp-eval" --checkpoint "$work/nowhere" \
  --data "$work/val" --out "$work/x.json" 2>&1)
rc=$?
set -e
if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then fail "missing checkpoint: rc $rc"; fi
echo "$out" | grep -q "nowhere" || fail "error does not name the checkpoint: $out"
echo "eval_ranks: OK"
