#!/usr/bin/env bash
# Guarantees 4 and 5, injected through FNVLP_FAULT (no config change, no code change):
#  - an exception on one rank at step k: every rank exits non-zero within 30 s;
#  - a rank stalled at step k: the watchdog aborts the job (exit 4) naming a rank and step k;
#  - a NaN loss on one rank: every rank skips that step, counted in metrics and summary;
#    N in a row end the run on every rank.
# (The fault.* config knobs for the same faults: tests/integration/pretrain_run.sh.)
source "$(dirname "$0")/lib.sh"
make_data

echo "== step.throw on rank 1 at step 3"
expect_failure env FNVLP_FAULT="step.throw:3:1" \
  "${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" --data "$work/shards" "${common[@]}" --out "$work/a"
expect_output "injected failure at step.throw event 3 on rank 1"
# From the moment the fault fired (its log line on rank 1) to the end of the whole job: start-up
# is excluded, it takes long on a loaded machine.
fired=$(grep -m1 "fault: step.throw fires" "$work/a/logs/rank-1.log" | grep -oE "^[0-9T:.-]+" | tr T ' ')
after=$(echo "$(date +%s.%N) - $(date -d "$fired" +%s.%N)" | bc)
echo "  every rank ended ${after}s after the exception"
(( $(echo "$after < 30" | bc) )) || fail "the job took ${after}s to end after a rank failed"

echo "== step.sleep: rank 1 stalls at step 4 (watchdog.timeout_s=20)"
expect_failure env FNVLP_FAULT="step.sleep:4:1:600" \
  "${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" --data "$work/shards" "${common[@]}" --out "$work/b" \
  --set watchdog.timeout_s=20
expect_output "fault: step.sleep fires on rank 1 at event 4" "$work/b/logs/rank-1.log"
expect_output "watchdog: rank [01] made no progress for [0-9.]+ s \(limit 20.0 s\); last reported step 4"
[ "$rc" -eq 4 ] || fail "exit code $rc, expected the watchdog's 4"
(( $(echo "$elapsed < 120" | bc) )) || fail "the watchdog took ${elapsed}s"
grep -m1 -oE "watchdog: rank [01] made no progress[^;]*; last reported step 4, phase '[a-z]+'" "$work/out.txt"

echo "== step.nan on rank 1 at step 4: skipped on every rank and counted"
FNVLP_FAULT="step.nan:4:1" pretrain --out "$work/c" >"$work/out.txt" 2>&1 || { tail "$work/out.txt"; fail "NaN run"; }
/usr/bin/python3 - "$work/c" <<'PY'
import json, sys
d = sys.argv[1]
s = json.load(open(d + "/summary.json"))
assert s["status"] == "completed" and s["skipped_steps"] == 1, s
rows = {r["step"]: r for r in map(json.loads, open(d + "/metrics.jsonl")) if "itc" in r}
assert [rows[k]["skipped_steps"] for k in (4, 5, 14)] == [0, 1, 1], [rows[k]["skipped_steps"] for k in (4, 5, 14)]
print("  skipped_steps: step 4 -> 0, step 5 -> 1, summary 1")
PY
expect_output "step 4: non-finite loss on at least one rank; optimizer step skipped" "$work/c/logs/rank-0.log"
expect_output "step 4: non-finite loss on at least one rank; optimizer step skipped" "$work/c/logs/rank-1.log"

echo "== step.nan on rank 0 at steps 3-20, non_finite.max_consecutive=3: the run ends"
expect_failure env FNVLP_FAULT="step.nan:3-20:0" \
  "${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" --data "$work/shards" "${common[@]}" --out "$work/d" \
  --set non_finite.max_consecutive=3
expect_output "non-finite loss for 3 consecutive steps \(last: step 5"
[ "$rc" -eq 1 ] || fail "exit code $rc, expected 1"
echo "PASS"
