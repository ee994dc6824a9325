#!/usr/bin/env bash
# Preemption of slurm/pretrain_4m.sh at smoke scale (deterministic mode):
#  reference: an uninterrupted job;
#  usr1:      USR1 to the batch shell mid-training (what --signal=B:USR1@120 delivers) -> the
#             trap forwards it, the ranks checkpoint and exit 3, the job requeues itself and
#             resumes (--resume auto);
#  requeue:   `scontrol requeue` mid-training (SIGTERM to the job) -> the same.
# Each ends COMPLETED after a restart with metrics identical to the reference at every step.
#  bounded:   USR1 with FNVLP_MAX_REQUEUES=0 -> the ranks checkpoint and exit 3, the requeue is
#             counted in RUN/requeues.tsv and refused: the job ends FAILED, naming the limit.
set -euo pipefail
# shellcheck source=tests/integration/slurm/lib.sh
source "$(dirname "$0")/lib.sh" "$1" "$2" preempt
export FNVLP_STAGES=pretrain FNVLP_STAGE=pretrain FNVLP_STEPS=16 FNVLP_LOG_EVERY=1
mkdir -p "$FNVLP_LOGS"
cd "$FNVLP_ROOT"
bash slurm/step.sh shard >"$FNVLP_LOGS/shard.out" 2>&1 || fail "shard stage failed: $(tail -5 "$FNVLP_LOGS/shard.out")"

submit() {
  FNVLP_RUN=$FNVLP_WORK/$1 sbatch --parsable "${smoke_opts[@]}" --job-name="fnvlp-$1" \
    --output="$FNVLP_LOGS/%x-%j.out" slurm/pretrain_4m.sh
}
wait_lines() { # run dir, number of metrics lines
  for _ in $(seq 1 600); do
    [ -f "$1/metrics.jsonl" ] && [ "$(wc -l <"$1/metrics.jsonl")" -ge "$2" ] && return 0
    sleep 0.5
  done
  fail "$1 never reached $2 metrics lines"
}

ref=$(submit reference)
fnvlp_wait_jobs "$ref" || fail "reference job failed"

for mode in usr1 requeue; do
  echo "== $mode"
  id=$(submit "$mode")
  wait_lines "$FNVLP_WORK/$mode" 4
  if [ "$mode" = usr1 ]; then scancel --batch --signal=USR1 "$id"; else scontrol requeue "$id"; fi
  fnvlp_wait_jobs "$id" || fail "$mode job failed"
  restarts=$(job_field "$id" Restarts)
  [ "$restarts" -ge 1 ] || fail "$mode job $id was not restarted (Restarts=$restarts)"
  log=$FNVLP_LOGS/fnvlp-$mode-$id.out
  grep -q 'resumed from' "$FNVLP_WORK/$mode/logs/rank-0.log" || fail "$mode: the restarted run did not resume from a checkpoint"
  if [ "$mode" = usr1 ]; then
    grep -q 'forwarding USR1' "$log" || fail "usr1: the trap did not forward the signal"
    grep -q 'scontrol requeue' "$log" || fail "usr1: the job did not requeue itself"
  fi
  echo "$mode job $id: COMPLETED after $restarts restart(s)"
done

echo "== bounded"
id=$(FNVLP_MAX_REQUEUES=0 submit bounded)
wait_lines "$FNVLP_WORK/bounded" 4
scancel --batch --signal=USR1 "$id"
if fnvlp_wait_jobs "$id" 2>/dev/null; then fail "bounded: job $id completed despite FNVLP_MAX_REQUEUES=0"; fi
[ "$(job_field "$id" JobState)" = FAILED ] || fail "bounded: job $id is $(job_field "$id" JobState)"
[ "$(job_field "$id" Restarts)" -eq 0 ] || fail "bounded: job $id was restarted"
grep -q 'above FNVLP_MAX_REQUEUES=0' "$FNVLP_LOGS/fnvlp-bounded-$id.out" ||
  fail "bounded: the log does not name the requeue limit"
[ "$(wc -l <"$FNVLP_WORK/bounded/requeues.tsv")" -eq 1 ] || fail "bounded: requeues.tsv does not hold one line"
echo "bounded job $id: FAILED at its first requeue, requeues.tsv counted it"

/usr/bin/python3 - "$FNVLP_WORK" <<'PY'
import json, sys
w = sys.argv[1]
def metrics(run):
    rows = [json.loads(l) for l in open(f"{w}/{run}/metrics.jsonl")]
    train = [r for r in rows if "itc" in r]
    steps = [r["step"] for r in train]
    assert steps == sorted(set(steps)), f"{run}: duplicate or unordered steps {steps}"
    val = [(r["step"], r["val_r_mean"]) for r in rows if "val_r_mean" in r]
    return {r["step"]: (r["itc"], r["itm"], r["mlm"], r["loss"]) for r in train}, val
ref, ref_val = metrics("reference")
assert sorted(ref) == list(range(1, 17)), sorted(ref)
for run in ("usr1", "requeue"):
    m, val = metrics(run)
    bad = [(s, ref[s], m.get(s)) for s in ref if m.get(s) != ref[s]]
    assert not bad, f"{run} differs from the uninterrupted run: {bad[:3]}"
    assert val[-1] == ref_val[-1], (run, val[-1], ref_val[-1])
    s = json.load(open(f"{w}/{run}/summary.json"))
    assert s["status"] == "completed" and s["steps"] == 16, s
print("preempt: usr1 and requeue runs equal the uninterrupted run at all 16 steps; "
      "final loss %.4f, val r_mean %.2f" % (ref[16][3], ref_val[-1][1]))
PY
echo PASS
