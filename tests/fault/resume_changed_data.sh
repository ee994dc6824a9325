#!/usr/bin/env bash
# A resume onto other data is refused (issue 63): GloFND at 2 ranks, 12 steps with a checkpoint,
# then --resume auto with --data on another synthetic set of the same size (same pair count,
# other captions and images). Every rank exits 2 before anything loads, one message naming the
# checkpoint's data directory and digest and the new ones; no step runs. A copy of the same shards
# in another directory is the same data: that resume continues. With --resume-data changed the
# resume onto the second set runs: the model, optimizer and step are kept, GloFND's per-pair state
# starts afresh (its update counts in the next checkpoint are those of the steps since), a new
# epoch begins, and the log and summary.json say so. (Changed settings: resume_changed_config.sh.)
# shellcheck source=tests/fault/lib.sh
source "$(dirname "$0")/lib.sh"
make_data
"${mpirun[@]}" "$bin/data_prep/fnvlp-synth" --out "$work/synth2" --images 240 \
  --captions-per-image 5 --classes 8 --image-size 64 --seed 4 --val-fraction 0.1 >/dev/null
"${mpirun[@]}" "$bin/data_prep/fnvlp-shard" --input "$work/synth2/captions.json" \
  --image-root "$work/synth2" --split-file "$work/synth2/splits.json" --split train \
  --vocab "$vocab" --out "$work/shards2" --image-size 64 --shard-size 300 >/dev/null
n1=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["num_pairs"])' "$work/shards/manifest.json")
n2=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["num_pairs"])' "$work/shards2/manifest.json")
[ "$n1" = "$n2" ] || fail "the two sets differ in size ($n1, $n2): the test needs the same pair_id space"
glofnd=(--set negatives.method=glofnd --set checkpoint.every_steps=6)

echo "== GloFND, 12 steps on the first set"
pretrain --out "$work/run" "${glofnd[@]}" --set train.max_steps=12 >"$work/first.txt" 2>&1 ||
  { tail -20 "$work/first.txt"; fail "the first run failed"; }
lines=$(grep -c '"itc"' "$work/run/metrics.jsonl")

echo "== resumed on the second set (same size): refused"
data=$work/shards2 expect_failure pretrain --out "$work/run" "${glofnd[@]}" \
  --set train.max_steps=18 --resume auto
[ "$rc" -eq 2 ] || { tail -20 "$work/out.txt"; fail "exit $rc, expected 2"; }
expect_output "the checkpoint .*step-0000012 was written on the data in $work/shards \(manifest digest [0-9a-f]{64}, $n1 pairs"
expect_output "\-\-data holds other data: $work/shards2 \(manifest digest [0-9a-f]{64}"
expect_output "\-\-resume-data changed"
[ "$(grep -c 'holds other data' "$work/out.txt")" -eq 1 ] || fail "the error was reported more than once"
! grep -q "resumed from" "$work/out.txt" || fail "a rank resumed"
[ "$(grep -c '"itc"' "$work/run/metrics.jsonl")" -eq "$lines" ] || fail "a step ran on the other data"

echo "== resumed on a copy of the first set elsewhere: continues"
cp -r "$work/shards" "$work/shards_copy"
data=$work/shards_copy pretrain --out "$work/run" "${glofnd[@]}" --set train.max_steps=18 \
  --resume auto >"$work/copy.txt" 2>&1 || { tail -20 "$work/copy.txt"; fail "the resume on a copy failed"; }
expect_output "resumed from .*step-0000012" "$work/copy.txt"

echo "== resumed on the second set with --resume-data changed: per-pair state afresh, new epoch"
data=$work/shards2 pretrain --out "$work/run" "${glofnd[@]}" --set train.max_steps=24 \
  --resume auto --resume-data changed >"$work/changed.txt" 2>&1 ||
  { tail -20 "$work/changed.txt"; fail "the resume with --resume-data changed failed"; }
expect_output "resume-data changed: the checkpoint .*step-0000018 was written on $work/shards_copy" "$work/changed.txt"
expect_output "Kept: the model, the optimizer and step 18; started afresh: the sampler's epoch, GloFND's per-pair thresholds and their optimizer state; epoch 1 begins on the new data" "$work/changed.txt"
[ "$(grep -c 'resume-data changed: the checkpoint' "$work/changed.txt")" -eq 1 ] || fail "the line was logged more than once"
expect_output "resumed from .*step-0000018" "$work/changed.txt"
/usr/bin/python3 - "$work/run" "$work/shards2" <<'PY'
import json, sys, h5py
run, shards2 = sys.argv[1:3]
s = json.load(open(run + "/summary.json"))
c = s["resumed_on_changed_data"]
assert c["step"] == 18 and c["epoch"] == 1, c
assert c["to"]["dir"] == shards2 and c["from"]["manifest_digest"] != c["to"]["manifest_digest"], c
assert c["reset"][0] == "the sampler's epoch" and len(c["reset"]) == 2, c["reset"]
assert s["steps"] == 24 and s["epochs_completed"] == 1, s
t = json.load(open(run + "/checkpoints/step-0000024/trainer.json"))
assert t["data"]["manifest_digest"] == c["to"]["manifest_digest"] and t["epoch"] == 1, t
# GloFND's column 3 counts each pair's updates: 18 steps of 2 x 16 anchors before the resume,
# then only the 6 steps since (a loaded state would hold 24 steps' worth).
def updates(step, side):
    with h5py.File(f"{run}/checkpoints/step-{step:07d}/glofnd_{side}.h5", "r") as f:
        return int(round(float(f["values"][:, 3].sum())))
for side in ("image", "text"):
    before, after = updates(18, side), updates(24, side)
    print(side, "updates at step 18:", before, "at step 24:", after)
    assert before == 18 * 32 and after == 6 * 32, (side, before, after)
PY

echo "== the checkpoint's weights on data tokenised with another vocabulary: refused"
# The same words, two of them swapped: the same size, other token ids.
/usr/bin/python3 - "$vocab" "$work/vocab2.txt" <<'PY'
import sys
words = open(sys.argv[1]).read().split("\n")
i, j = words.index("cat"), words.index("dog")
words[i], words[j] = words[j], words[i]
open(sys.argv[2], "w").write("\n".join(words))
PY
"${mpirun[@]}" "$bin/data_prep/fnvlp-shard" --input "$work/synth/captions.json" \
  --image-root "$work/synth" --split-file "$work/synth/splits.json" --split val \
  --vocab "$work/vocab2.txt" --out "$work/val_vocab2" --image-size 64 --shard-size 300 >/dev/null
expect_failure "${mpirun[@]}" "$bin/jobs/fnvlp-eval" --checkpoint "$work/run/checkpoints/latest" \
  --data "$work/val_vocab2" --out "$work/eval.json" --k-test 4
[ "$rc" -eq 2 ] || { tail -20 "$work/out.txt"; fail "fnvlp-eval: exit $rc, expected 2"; }
expect_output "trained on token ids of vocabulary [0-9a-f]{64}; $work/val_vocab2 is tokenised with vocabulary [0-9a-f]{64}"
expect_failure "${mpirun[@]}" "$bin/jobs/fnvlp-finetune" --config "$src/jobs/configs/retrieval_tiny.yaml" \
  --init "$work/run/checkpoints/latest" --data "$work/val_vocab2" --out "$work/ft"
[ "$rc" -eq 2 ] || { tail -20 "$work/out.txt"; fail "fnvlp-finetune --init: exit $rc, expected 2"; }
expect_output "is tokenised with vocabulary"

echo "== GRIT q=1 in its grouped epoch 1, resumed on the second set with --resume-data changed"
# Epoch 2 is grouped by the second set's embeddings at the checkpoint's weights (the epoch cache
# holds the first set's).
grit=(--config "$src/jobs/configs/methods/grit_q1.yaml" --set sampler.embeddings=cached)
pretrain --out "$work/grit" "${grit[@]}" --set train.max_steps=35 >"$work/grit1.txt" 2>&1 ||
  { tail -20 "$work/grit1.txt"; fail "the GRIT run failed"; }
data=$work/shards2 pretrain --out "$work/grit" "${grit[@]}" --set train.max_steps=37 \
  --resume auto --resume-data changed >"$work/grit2.txt" 2>&1 ||
  { tail -20 "$work/grit2.txt"; fail "the GRIT resume with --resume-data changed failed"; }
expect_output "started afresh: the sampler's epoch, the epoch cache of embeddings; epoch 2 begins" "$work/grit2.txt"
expect_output "epoch 2 samples by the new data's embeddings at step 35" "$work/grit2.txt"
expect_output "step=37 epoch=2 .*q_mean=1.0000" "$work/grit2.txt"
echo "PASS"
