#!/usr/bin/env bash
# Guarantee 14 for batch scripts: a campaign task directory is owned by one job's shell
# (slurm/common.sh fnvlp_own_dir, through fnvlp-lock), and an owner on another host is judged
# through SLURM (a stub scontrol here) or its heartbeat:
#  a. slurm/campaign_task.sh into a task directory another live shell owns: exit 2 before any
#     stage, naming the owner; a shell that ends releases its lock, a SIGKILLed one's is taken over;
#  b. a lock of another host's SLURM job: held while SLURM says RUNNING, taken over once it is
#     unknown to SLURM (ended) or when this job is its requeue (same id, next restart count);
#  c. another host outside SLURM: held while its heartbeat is fresh, taken over after the lease;
#     an owner that does not beat is held until cleared by hand (`fnvlp-lock clear --force`).
# shellcheck source=tests/fault/lib.sh
source "$(dirname "$0")/lib.sh"
lockbin=$bin/jobs/fnvlp-lock
host=$(hostname)
export FNVLP_ROOT=$src FNVLP_BUILD_DIR=$bin FNVLP_SCALE=smoke
# A shell that owns DIR and then sleeps, in its own process group (killed as a group below).
own_and_sleep() {
  # shellcheck disable=SC2016 # expanded by the inner shell
  setsid bash -c 'source "$FNVLP_ROOT/slurm/common.sh"; fnvlp_own_dir "$1"; sleep "$2"' task-owner "$1" "$2" \
    >"$work/own.txt" 2>&1 &
  for _ in $(seq 1 100); do
    [ -s "$1/owner.lock" ] && return 0
    sleep 0.1
  done
  fail "the owning shell never took $1"
}
# Runs `fnvlp_own_dir DIR` in a fresh shell; sets $rc, output in $work/out.txt.
try_take() {
  set +e
  bash -c 'source "$FNVLP_ROOT/slurm/common.sh"; fnvlp_own_dir "$1"' intruder "$1" >"$work/out.txt" 2>&1
  rc=$?
  set -e
}
# A lock of pid 4242 on host fnvlp-elsewhere (SLURM job 77 of cluster c1 when $2 = slurm),
# beating every $3 s (0: never), last beaten $4 s ago.
plant() {
  mkdir -p "$1"
  /usr/bin/python3 - "$1/owner.lock" "$2" "$3" "$4" <<'PY'
import json, os, sys, time
path, slurm, beat, age = sys.argv[1], sys.argv[2] == "slurm", float(sys.argv[3]), float(sys.argv[4])
json.dump({"program": "fnvlp-pretrain", "host": "fnvlp-elsewhere", "boot_id": "x", "pid": 4242,
           "pid_start": 1, "slurm_cluster": "c1" if slurm else "", "slurm_job_id": "77" if slurm else "",
           "slurm_step_id": "0" if slurm else "", "slurm_restart_count": "0" if slurm else "",
           "started_at": "2026-11-28T00:00:00Z", "heartbeat_s": beat, "token": "planted"},
          open(path, "w"))
os.utime(path, (time.time() - age, time.time() - age))
PY
}

echo "== a. campaign_task.sh into a task directory another shell owns"
camp=$work/camp
mkdir -p "$camp/tasks/glofnd-s1"
printf 'index\tmethod\tseed\tcell\n1\tglofnd\t1\tglofnd-s1\n' >"$camp/index.tsv"
echo '{"overrides": []}' >"$camp/tasks/glofnd-s1/task.json"
own_and_sleep "$camp/tasks/glofnd-s1" 600
owner=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$camp/tasks/glofnd-s1/owner.lock")
[ "$(ps -o pgid= -p "$owner" | tr -d ' ')" = "$owner" ] || fail "the owning shell $owner leads no process group of its own"
expect_failure env SLURM_ARRAY_TASK_ID=1 bash "$src/slurm/campaign_task.sh" "$camp"
[ "$rc" -eq 2 ] || { cat "$work/out.txt"; fail "campaign_task.sh: exit $rc, expected 2"; }
expect_output "$camp/tasks/glofnd-s1 is in use by another job: task-owner \(batch shell\), pid $owner on $host, since .*is running"
! grep -q "launch:" "$work/out.txt" || fail "the refused task launched a stage"
kill -KILL -- "-$owner"
wait 2>/dev/null || true
try_take "$camp/tasks/glofnd-s1"
[ "$rc" -eq 0 ] || { cat "$work/out.txt"; fail "no takeover after the owner was killed (exit $rc)"; }
expect_output "lock: took over $camp/tasks/glofnd-s1/owner.lock from .*pid $owner on $host.*is not running"
[ ! -e "$camp/tasks/glofnd-s1/owner.lock" ] || fail "the shell that took it over did not release it at its exit"
own_and_sleep "$work/short" 1
wait $!
[ ! -e "$work/short/owner.lock" ] || fail "a shell that ended left its lock"
echo "  refused while owned (exit 2), taken over after SIGKILL, released at a shell's exit"

echo "== b. another host's SLURM job (stub scontrol)"
mkdir -p "$work/stub"
cat >"$work/stub/scontrol" <<'SH'
#!/bin/sh
case "$STUB_STATE" in
  gone) echo "slurm_load_jobs error: Invalid job id specified"; exit 1 ;;
  *) echo "JobId=$4 JobName=x JobState=$STUB_STATE Reason=None"; exit 0 ;;
esac
SH
chmod +x "$work/stub/scontrol"
export PATH=$work/stub:$PATH SLURM_CLUSTER_NAME=c1
plant "$work/b" slurm 0 0
STUB_STATE=RUNNING try_take "$work/b"
[ "$rc" -eq 2 ] || { cat "$work/out.txt"; fail "a RUNNING job's lock was not held (exit $rc)"; }
expect_output "SLURM job 77 step 0 restart 0.*SLURM job 77 is RUNNING"
STUB_STATE=gone try_take "$work/b"
[ "$rc" -eq 0 ] || { cat "$work/out.txt"; fail "an ended job's lock was not taken over (exit $rc)"; }
expect_output "took over .* from fnvlp-pretrain, pid 4242 on fnvlp-elsewhere .*SLURM job 77 has ended"
plant "$work/b" slurm 0 0
SLURM_JOB_ID=77 SLURM_RESTART_COUNT=1 STUB_STATE=RUNNING try_take "$work/b"
[ "$rc" -eq 0 ] || { cat "$work/out.txt"; fail "the requeued job did not take its own lock over (exit $rc)"; }
expect_output "SLURM job 77 was requeued since: restart 0, now 1"
echo "  RUNNING: held; ended: taken over; this job's requeue: taken over"
unset SLURM_CLUSTER_NAME

echo "== c. another host outside SLURM"
plant "$work/c" none 30 100
try_take "$work/c"
[ "$rc" -eq 2 ] || { cat "$work/out.txt"; fail "a fresh heartbeat was not held (exit $rc)"; }
expect_output "its heartbeat is 1[0-9][0-9] s old, within the 300 s lease"
plant "$work/c" none 30 400
try_take "$work/c"
[ "$rc" -eq 0 ] || { cat "$work/out.txt"; fail "a lock without heartbeat past its lease was not taken over"; }
expect_output "no heartbeat for 4[0-9][0-9] s, past the 300 s lease"
plant "$work/c" none 0 100000
try_take "$work/c"
[ "$rc" -eq 2 ] || { cat "$work/out.txt"; fail "an owner that cannot be judged was taken over"; }
expect_output "fnvlp-elsewhere cannot be probed from $host.*fnvlp-lock clear --force $work/c/owner.lock"
"$lockbin" show "$work/c" >"$work/out.txt"
expect_output "alive: fnvlp-elsewhere cannot be probed"
set +e
"$lockbin" clear "$work/c" >"$work/out.txt" 2>&1
rc=$?
set -e
if [ "$rc" -ne 2 ] || [ ! -e "$work/c/owner.lock" ]; then fail "clear without --force removed a live-looking lock"; fi
"$lockbin" clear "$work/c" --force >"$work/out.txt"
[ ! -e "$work/c/owner.lock" ] || fail "clear --force left the lock"
echo "  fresh heartbeat: held; past the lease: taken over; no heartbeat: held until clear --force"
echo "PASS"
