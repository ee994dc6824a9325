#!/usr/bin/env bash
# Guarantee 1: SIGKILL of ONE rank at a random step (seeded, printed), or of one rank in the
# middle of a checkpoint write, then --resume auto: the losses of every step and the final
# metrics equal an uninterrupted deterministic run's bit for bit; a killed save is never used.
# Each resume is checked to have resumed (its log names the checkpoint and its step), and the
# comparison covers at least 50 steps after it, across two epoch boundaries (72 steps, 33 per
# epoch).
# (SIGKILL of the whole job and SIGUSR1 preemption: tests/integration/pretrain_run.sh.)
# shellcheck source=tests/fault/lib.sh
source "$(dirname "$0")/lib.sh"
make_data
common+=(--set train.max_steps=72)
# At least 50 logged steps after step $2 in run $1, some of them in a later epoch than step $2's.
after_resume() {
  /usr/bin/python3 - "$@" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
k = int(sys.argv[2])
after = [r for r in rows if "itc" in r and r["step"] > k]
epoch_k = max(r["epoch"] for r in rows if "itc" in r and r["step"] <= k)
later = sorted({r["epoch"] for r in after if r["epoch"] > epoch_k})
assert len(after) >= 50 and later, (len(after), later)
print("  compared after the resume at step %d: %d steps, into epoch(s) %s" % (k, len(after), later))
PY
}
seed=${FNVLP_FAULT_SEED:-$(date +%s)}
RANDOM=$seed
step=$((3 + RANDOM % 10))  # 3..12: after the first checkpoint (step 2), before the last step
rank=$((RANDOM % 2))
echo "== seed $seed: SIGKILL of rank $rank at step $step (FNVLP_FAULT_SEED=$seed reproduces)"

echo "== uninterrupted reference run"
pretrain --out "$work/ref" --set checkpoint.every_steps=0 >"$work/ref.txt" 2>&1 || { tail "$work/ref.txt"; fail "reference run"; }

echo "== rank $rank killed at step $step (checkpoint every 2 steps)"
expect_failure env FNVLP_FAULT="step.kill:$step:$rank" \
  "${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" --data "$work/shards" "${common[@]}" \
  --out "$work/a" --set checkpoint.every_steps=2
expect_output "fault: step.kill fires on rank $rank at event $step" "$work/a/logs/rank-$rank.log"
latest=$(check_latest "$work/a/checkpoints")
echo "  latest after the kill: $latest"
[ "$latest" = "$(printf 'step-%07d' $((step / 2 * 2)))" ] || fail "latest is $latest"
pretrain --out "$work/a" --set checkpoint.every_steps=20 --resume auto >"$work/a.txt" 2>&1 ||
  { tail "$work/a.txt"; fail "resume after the kill"; }
k=$((step / 2 * 2))
expect_output "resumed from .*$latest \(step $k," "$work/a.txt"
same_metrics "$work/ref" "$work/a"
after_resume "$work/a" "$k"

echo "== rank 1 killed while writing the checkpoint of step 8 (checkpoints every 4 steps)"
expect_failure env FNVLP_FAULT="checkpoint.kill:8:1" \
  "${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" --data "$work/shards" "${common[@]}" \
  --out "$work/b" --set checkpoint.every_steps=4
expect_output "fault: checkpoint.kill fires on rank 1 at event 8 in .*step-0000008.tmp" "$work/b/logs/rank-1.log"
[ -d "$work/b/checkpoints/step-0000008.tmp" ] || fail "no unfinished save of step 8 left behind"
[ ! -e "$work/b/checkpoints/step-0000008" ] || fail "the killed save of step 8 was committed"
[ "$(check_latest "$work/b/checkpoints")" = step-0000004 ] || fail "latest is not step-0000004"
pretrain --out "$work/b" --set checkpoint.every_steps=20 --resume auto >"$work/b.txt" 2>&1 ||
  { tail "$work/b.txt"; fail "resume after the killed save"; }
expect_output "resumed from .*step-0000004 \(step 4," "$work/b.txt"
expect_output "removing the unfinished save .*step-0000008.tmp" "$work/b.txt"
same_metrics "$work/ref" "$work/b"
after_resume "$work/b" 4
echo "PASS"
