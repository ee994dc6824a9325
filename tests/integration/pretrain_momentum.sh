#!/usr/bin/env bash
# ALBEF momentum distillation (loss.soft_targets=momentum) in fnvlp-pretrain at 2 ranks, tiny
# preset, a queue that wraps within the run (40 entries, 32 gathered features per step):
#  1. a run stopped after step 2 (the queue full and wrapped, the momentum model 2 EMA updates
#     from the online one) and resumed with --resume auto logs the uninterrupted run's losses bit
#     for bit: the momentum weights and the queue are in the checkpoint;
#  2. a checkpoint without momentum state refuses to resume into a momentum run, saying why (the
#     settings check at resume: loss.soft_targets changed);
#  3. momentum with a negatives method is refused at start-up, saying why.
set -euo pipefail
bin=$1 vocab=$2 src=$3
# shellcheck source=tests/integration/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" momentum
synth_data "$work/synth" 64 5 8 3
shard_split "$work/synth" train "$work/shards" --shard-size 300
common=(--config "$src/jobs/configs/tiny.yaml" --data "$work/shards" --set train.batch_size=16
        --set train.max_steps=4 --set train.log_every=1 --set optim.warmup_steps=2
        --set checkpoint.every_steps=0 --set train.deterministic=true
        --set train.export_embeddings=false --set loss.soft_warmup_steps=2)
momentum=(--set loss.soft_targets=momentum --set loss.momentum=0.9 --set loss.queue_size=40)

echo "== uninterrupted momentum run"
"${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" "${momentum[@]}" --out "$work/a"
for f in momentum_model.pt momentum_queue.pt; do
  [ -e "$work/a/checkpoints/latest/$f" ] || fail "checkpoint lacks $f"
done

echo "== stopped after step 2, then resumed"
set +e
"${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" "${momentum[@]}" --out "$work/b" \
  --set fault.stop_step=2
rc=$?
set -e
[ "$rc" -eq 3 ] || fail "stopped run exited $rc, expected the requeue code 3"
"${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" "${momentum[@]}" --out "$work/b" --resume auto

echo "== the same run without momentum (the losses must differ)"
"${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" --set train.max_steps=2 --out "$work/c"

echo "== a checkpoint without momentum state resumed with momentum"
set +e
"${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" "${momentum[@]}" --set train.max_steps=3 \
  --out "$work/c" --resume auto >"$work/c.out" 2>&1
rc=$?
set -e
[ "$rc" -eq 2 ] || fail "resuming a non-momentum checkpoint with momentum exited $rc, expected 2"
# The run's settings refuse it first (its config.yaml: another loss.soft_targets); a checkpoint
# copied out of its run would meet the momentum state's own refusal ("no momentum state").
grep -qE "settings that its state depends on \(.*loss.soft_targets [a-z]+ -> momentum" "$work/c.out" ||
  fail "no clear error: $(tail -5 "$work/c.out")"

echo "== momentum with negatives.method=fnc"
set +e
"${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" "${momentum[@]}" --set negatives.method=fnc \
  --out "$work/d" >"$work/d.out" 2>&1
rc=$?
set -e
[ "$rc" -ne 0 ] || fail "momentum with fnc was accepted"
grep -q "cannot be combined with negatives.method=fnc" "$work/d.out" "$work/d/logs/rank-0.log" 2>/dev/null \
  || fail "no clear error: $(tail -5 "$work/d.out")"

/usr/bin/python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
def metrics(run):
    rows = [json.loads(l) for l in open(w + "/" + run + "/metrics.jsonl")]
    return {r["step"]: (r["itc"], r["itm"], r["mlm"]) for r in rows if "itc" in r}
a, b, c = metrics("a"), metrics("b"), metrics("c")
assert sorted(a) == list(range(1, 5)), sorted(a)
assert a == b, "resumed momentum run differs: " + str([(s, a[s], b.get(s)) for s in a if a[s] != b.get(s)][:3])
# Step 1 is the same by construction: the momentum model starts as a copy of the online one, the
# queue is empty and alpha is ramped from 0. From step 2 the keys and soft labels come from the
# EMA model and the queue.
assert a[1] == c[1], "step 1 differs from the run without momentum: %s vs %s" % (a[1], c[1])
assert a[2] != c[2], "momentum and pseudo runs log the same step-2 losses: momentum not in effect"
print("momentum run: ITC %.4f -> %.4f over 4 steps; resumed run bitwise equal" % (a[1][0], a[4][0]))
PY
echo "PASS"
