#!/usr/bin/env bash
# Guarantees 4 and 5, injected through FNVLP_FAULT (no config change, no code change):
#  - an exception on one rank at step k: every rank exits non-zero within 30 s;
#  - a rank stalled at step k: the watchdog aborts the job (exit 4) naming a rank and step k;
#  - each failure leaves summary.json: status failed, exit code, error, steps so far;
#  - a NaN loss on one rank: every rank skips that step, counted in metrics and summary; the
#    skipped step changes no weight, optimizer or GloFND state; the count survives a resume;
#    N in a row end the run on every rank.
# (The fault.* config knobs for the same faults: tests/integration/pretrain_run.sh.)
# shellcheck source=tests/fault/lib.sh
source "$(dirname "$0")/lib.sh"
make_data

# A failed run's summary.json: expect_summary RUN EXIT_CODE ERROR_REGEX STEPS [FAILED_RANK|named]
# (without FAILED_RANK: an error every rank agreed on, written by rank 0, no failed_rank key).
expect_summary() {
  /usr/bin/python3 - "$@" <<'PY'
import json, re, sys
run, code, pattern, steps = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
s = json.load(open(run + "/summary.json"))
assert s["status"] == "failed" and s["exit_code"] == code, s
assert re.search(pattern, s["error"]), "error %r lacks /%s/" % (s["error"], pattern)
assert s["steps"] == steps, "steps %s, expected %d" % (s["steps"], steps)
if len(sys.argv) > 5:  # "named": the rank the error names ("rank R made no progress")
    want = sys.argv[5]
    want = int(re.search(r"rank (\d+)", s["error"]).group(1)) if want == "named" else int(want)
    assert s.get("failed_rank") == want, s
else:
    assert "failed_rank" not in s, s
print("  summary.json: failed, exit %d, %d steps%s, error %r" % (code, steps,
      ", rank %s" % s["failed_rank"] if "failed_rank" in s else "", s["error"][:90]))
PY
}

echo "== step.throw on rank 1 at step 3"
expect_failure env FNVLP_FAULT="step.throw:3:1" \
  "${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" --data "$work/shards" "${common[@]}" --out "$work/a"
expect_output "injected failure at step.throw event 3 on rank 1"
expect_summary "$work/a" 1 "injected failure at step.throw event 3 on rank 1" 3 1
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
expect_summary "$work/b" 4 "made no progress .*last reported step 4" 4 named
(( $(echo "$elapsed < 120" | bc) )) || fail "the watchdog took ${elapsed}s"
grep -m1 -oE "watchdog: rank [01] made no progress[^;]*; last reported step 4, phase '[a-z]+'" "$work/out.txt"

echo "== the watchdog also covers start-up and the epoch-end export (their own limits)"
export FNVLP_FAULT="startup.sleep:1:1:600"
expect_failure pretrain --out "$work/s" --set watchdog.startup_timeout_s=10
expect_output "fault: startup.sleep fires on rank 1" "$work/s/logs/rank-1.log"
expect_output "watchdog: rank [01] made no progress for [0-9.]+ s \(limit 10.0 s\); last reported step -1, phase 'startup'"
[ "$rc" -eq 4 ] || fail "exit code $rc, expected the watchdog's 4"
export FNVLP_FAULT="export.sleep:0:0:600"
expect_failure pretrain --out "$work/x" --set train.export_embeddings=true \
  --set watchdog.long_phase_timeout_s=10
unset FNVLP_FAULT
expect_output "watchdog: rank [01] made no progress for [0-9.]+ s \(limit 10.0 s\); last reported step 13, phase 'export embeddings'"
[ "$rc" -eq 4 ] || fail "exit code $rc, expected the watchdog's 4"
expect_summary "$work/x" 4 "phase 'export embeddings'" 13 named

echo "== SIGUSR1 to every rank during start-up: a stop request (checkpoint, exit 3), not death"
# shellcheck disable=SC2030 # this run's fault only
(
  export FNVLP_FAULT="startup.sleep:1:*:8"
  pretrain --out "$work/u"
) >"$work/out.txt" 2>&1 &
job=$!
for _ in $(seq 1 120); do
  [ "$(cat "$work"/u/logs/rank-*.log 2>/dev/null | grep -c 'fault: startup.sleep fires')" -eq 2 ] && break
  sleep 0.5
done
pkill -USR1 -f "fnvlp-pretrain .*--out $work/u" || fail "no rank of the start-up run to signal"
echo "  SIGUSR1 sent to both ranks while they start"
set +e
wait "$job"
rc=$?
set -e
[ "$rc" -eq 3 ] || { tail -20 "$work/out.txt"; fail "exit $rc after SIGUSR1 during start-up, expected 3 (stop and requeue)"; }
/usr/bin/python3 - "$work/u" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
assert s["status"] == "preempted" and s["steps"] == 1, s
print("  exit 3 after 1 step, summary preempted, checkpoint saved")
PY
[ -e "$work/u/checkpoints/latest" ] || fail "no checkpoint after the stop request"

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

echo "== step.nan at step 4 with GloFND, a checkpoint every step: the skipped step changes no state"
# Then rank 0 is killed at step 8 and the run resumes: skipped_steps survives the resume.
ckpt=(--set negatives.method=glofnd --set checkpoint.every_steps=1 --set checkpoint.keep_last=20)
# shellcheck disable=SC2031 # set here for what follows, not read from the subshell above
export FNVLP_FAULT="step.nan:4:1,step.kill:8:0"
expect_failure pretrain --out "$work/e" "${ckpt[@]}"
unset FNVLP_FAULT
expect_output "fault: step.kill fires on rank 0 at event 8" "$work/e/logs/rank-0.log"
/usr/bin/python3 - "$work/e/checkpoints" <<'PY'
import os, pickletools, sys, zipfile
d = sys.argv[1]
def lr_masked(pkl):
    # The pickle's opcodes with each param group's lr value (the float right after the key "lr",
    # pushed as a string or fetched from the memo) masked: the schedule sets it at each step.
    memo, top, ops = {}, None, []
    for op, arg, _ in pickletools.genops(pkl):
        name = op.name
        if name in ("BINPUT", "LONG_BINPUT", "MEMOIZE"):
            memo[len(memo) if arg is None else arg] = top
        elif name in ("BINGET", "LONG_BINGET"):
            top = memo.get(arg)
        elif name == "BINFLOAT" and top == "lr":
            arg, top = "lr", None
        else:
            top = arg if name in ("BINUNICODE", "SHORT_BINUNICODE") else None
        ops.append((name, arg))
    return ops
def content(step, name):
    path = os.path.join(d, "step-%07d" % step, name)
    if not name.endswith(".pt"):
        return open(path, "rb").read()
    z = zipfile.ZipFile(path)  # a torch archive: tensors in data/, the structure in data.pkl
    return {n: lr_masked(z.read(n)) if n.endswith("data.pkl") else z.read(n) for n in z.namelist()}
files = ["model.pt", "optimizer.pt", "glofnd_image.h5", "glofnd_text.h5"]
moved = [f for f in files if content(3, f) != content(4, f)]
assert moved == files, "a taken step must change every state file; unchanged: %s" % (set(files) - set(moved))
changed = [f for f in files if content(4, f) != content(5, f)]
assert not changed, "the skipped step (step 4 -> checkpoint step-0000005) changed " + ", ".join(changed)
print("  step-0000004 -> step-0000005 (NaN skipped): model, optimizer moments and counts, GloFND "
      "lambda/moments/counts bitwise unchanged; each changed over the taken step before")
PY
pretrain --out "$work/e" "${ckpt[@]}" --resume auto >"$work/out.txt" 2>&1 || { tail "$work/out.txt"; fail "resume after the kill"; }
expect_output "resumed from .*step-0000008 \(step 8" "$work/e/logs/rank-0.log"
/usr/bin/python3 - "$work/e" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
assert s["status"] == "completed" and s["steps"] == 14 and s["skipped_steps"] == 1, s
last = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl") if '"itc"' in l][-1]
assert last["skipped_steps"] == 1, last
print("  resumed at step 8: skipped_steps 1 in the last metrics record and in summary.json")
PY

echo "== step.nan on rank 0 at steps 3-20, non_finite.max_consecutive=3: the run ends"
expect_failure env FNVLP_FAULT="step.nan:3-20:0" \
  "${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" --data "$work/shards" "${common[@]}" --out "$work/d" \
  --set non_finite.max_consecutive=3
expect_output "non-finite loss for 3 consecutive steps \(last: step 5"
[ "$rc" -eq 1 ] || fail "exit code $rc, expected 1"
# Steps 0-2 taken, 3 and 4 skipped, the run ends in step 5.
expect_summary "$work/d" 1 "non-finite loss for 3 consecutive steps" 5
echo "PASS"
