#!/usr/bin/env bash
# Guarantee 14: one job owns a run directory (src/fnvlp/store/run_lock.hpp).
#  a. A second fnvlp-pretrain into a directory a running one owns (at 1, 2 and 4 ranks) exits 2
#     within 10 s on every rank, naming the owner (program, pid, host); the owner runs on, and its
#     metrics and checkpoints equal a run made alone, bit for bit (same_checkpoints.py).
#  b. The owner's rank 0 SIGKILLed (its lock left behind), then --resume auto: the stale lock is
#     taken over with a warning naming the dead owner, and the resumed run equals the lone run.
#  c. fnvlp-finetune into a run directory and fnvlp-eval onto a result file whose lock a live
#     process holds: exit 2 naming it; once that process is gone, fnvlp-eval takes the lock over.
# shellcheck source=tests/fault/lib.sh
source "$(dirname "$0")/lib.sh"
make_data
common+=(--set checkpoint.every_steps=4)

same_checkpoints() { /usr/bin/python3 "$src/tests/fault/same_checkpoints.py" "$1" "$2"; }
owner_field() { /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }

echo "== the run alone"
pretrain --out "$work/alone" >"$work/alone.txt" 2>&1 || { tail "$work/alone.txt"; fail "run alone"; }

echo "== a. a second job into a running job's directory"
# The owner is slowed to 2 s per step from step 2 on, so that it outlasts the intruders.
FNVLP_FAULT="step.sleep:2-13:*:2" pretrain --out "$work/x" >"$work/x.txt" 2>&1 &
owner=$!
for _ in $(seq 1 600); do
  [ -s "$work/x/metrics.jsonl" ] && break
  sleep 0.2
done
[ -s "$work/x/metrics.jsonl" ] || fail "the first run never logged a step"
host=$(hostname)
pid=$(owner_field "$work/x/owner.lock" pid 2>/dev/null) || pid="<no owner.lock>"
echo "  the first run trains; owner.lock names pid $pid"
for np in 1 2 4; do
  expect_failure mpirun --oversubscribe -np "$np" "$bin/jobs/fnvlp-pretrain" --data "$work/shards" \
    "${common[@]}" --out "$work/x"
  [ "$rc" -eq 2 ] || { tail -20 "$work/out.txt"; fail "np $np: exit $rc, expected 2 (usage)"; }
  (($(echo "$elapsed < 10" | bc))) || fail "np $np: refused only after ${elapsed}s"
  expect_output "$work/x is in use by another job: fnvlp-pretrain, pid $pid on $host, since .*\(process $pid on $host is running\)"
  expect_output "fnvlp-lock clear --force $work/x/owner.lock"
  kill -0 "$owner" 2>/dev/null || fail "np $np: the first run ended before the intruder was refused"
done
wait "$owner" || { tail -20 "$work/x.txt"; fail "the first run failed"; }
[ ! -e "$work/x/owner.lock" ] || fail "the finished run left its lock behind"
same_metrics "$work/alone" "$work/x"
same_checkpoints "$work/alone" "$work/x"

echo "== b. the owner's rank 0 SIGKILLed at step 9, then --resume auto"
expect_failure env FNVLP_FAULT="step.kill:9:0" "${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" \
  --data "$work/shards" "${common[@]}" --out "$work/k"
[ -e "$work/k/owner.lock" ] || fail "no lock left behind by the killed run"
dead=$(owner_field "$work/k/owner.lock" pid)
! kill -0 "$dead" 2>/dev/null || fail "pid $dead of the killed run's lock is alive"
pretrain --out "$work/k" --resume auto >"$work/k.txt" 2>&1 || { tail -20 "$work/k.txt"; fail "resume"; }
expect_output "lock: took over $work/k/owner.lock from fnvlp-pretrain, pid $dead on $host.*: process $dead on $host is not running" "$work/k.txt"
expect_output "resumed from .*step-0000008 \(step 8," "$work/k.txt"
same_metrics "$work/alone" "$work/k"
same_checkpoints "$work/alone" "$work/k"
echo "  took over the dead owner's lock (pid $dead) and resumed from step 8"

echo "== c. fine-tuning and evaluation outputs"
sleep 600 &
holder=$!
trap 'kill $holder 2>/dev/null || true; rm -rf "$work"' EXIT
"$bin/jobs/fnvlp-lock" take "$work/ft" --pid "$holder" --program "test holder"
expect_failure "${mpirun[@]}" "$bin/jobs/fnvlp-finetune" --config "$src/jobs/configs/retrieval_tiny.yaml" \
  --init "$work/alone/checkpoints/latest" --data "$work/shards" --out "$work/ft"
[ "$rc" -eq 2 ] || { tail -20 "$work/out.txt"; fail "finetune: exit $rc, expected 2"; }
expect_output "$work/ft is in use by another job: test holder, pid $holder on $host"
cp "$work/ft/owner.lock" "$work/eval.json.lock"
eval_cmd=("${mpirun[@]}" "$bin/jobs/fnvlp-eval" --checkpoint "$work/alone/checkpoints/latest"
  --data "$work/shards" --out "$work/eval.json" --k-test 4)
expect_failure "${eval_cmd[@]}"
[ "$rc" -eq 2 ] || { tail -20 "$work/out.txt"; fail "eval: exit $rc, expected 2"; }
expect_output "$work/eval.json is in use by another job: .*pid $holder on $host"
[ ! -e "$work/eval.json" ] || fail "the refused evaluation wrote its result"
kill "$holder"
wait "$holder" 2>/dev/null || true
"${eval_cmd[@]}" >"$work/eval.txt" 2>&1 || { tail -20 "$work/eval.txt"; fail "eval after the holder ended"; }
expect_output "lock: took over $work/eval.json.lock from .*pid $holder on $host.*is not running" "$work/eval.txt"
if [ ! -s "$work/eval.json" ] || [ -e "$work/eval.json.lock" ]; then fail "eval.json missing or its lock left"; fi
echo "  fine-tuning and evaluation refused while pid $holder held them; eval took over after"
echo "PASS"
