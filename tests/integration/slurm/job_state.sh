#!/usr/bin/env bash
# fnvlp_wait_jobs reads a job's state from scontrol while the controller remembers it and from
# sacct once it has forgotten it (MinJobAge): a finished job is then COMPLETED, FAILED or
# CANCELLED as accounting recorded it, not "unknown". scontrol and sacct are replaced by stubs
# on PATH that answer from files, so no cluster is needed.
set -euo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL (job_state): $*"
  exit 1
}
mkdir -p "$tmp/bin" "$tmp/ctl" "$tmp/acct"
# scontrol show job -o ID: the file ctl/ID, else "Invalid job id" (exit 1) as for a purged job.
cat >"$tmp/bin/scontrol" <<'SH'
#!/usr/bin/env bash
id=${4:-}
[ "$1 $2 $3" = "show job -o" ] && [ -f "$T_DIR/ctl/$id" ] && exec cat "$T_DIR/ctl/$id"
echo "slurm_load_jobs error: Invalid job id specified" >&2
exit 1
SH
# sacct -n -X -P -j ID -o ...: the file acct/ID (an array task A_T: its line of acct/A), else
# accounting disabled (exit 1).
cat >"$tmp/bin/sacct" <<'SH'
#!/usr/bin/env bash
id=$5
[ -f "$T_DIR/acct/$id" ] && exec cat "$T_DIR/acct/$id"
[ -f "$T_DIR/acct/${id%_*}" ] && grep "^$id|" "$T_DIR/acct/${id%_*}" && exit 0
echo "sacct: error: Slurm accounting storage is disabled" >&2
exit 1
SH
printf '#!/bin/sh\nexit 0\n' >"$tmp/bin/scancel"
chmod +x "$tmp/bin/"*
export PATH=$tmp/bin:$PATH T_DIR=$tmp FNVLP_WAIT_TIMEOUT=5 FNVLP_WAIT_POLL=0.1
export FNVLP_ROOT=$src FNVLP_WORK=$tmp/work FNVLP_SCALE=smoke
# shellcheck source=slurm/common.sh
source "$src/slurm/common.sh"

expect() { # expect 0|1 IDS...: fnvlp_wait_jobs' status, its stderr in $tmp/err
  local want=$1 rc=0
  shift
  fnvlp_wait_jobs "$@" 2>"$tmp/err" || rc=$?
  [ "$rc" -eq "$want" ] || fail "wait $* returned $rc, expected $want: $(cat "$tmp/err")"
}

echo "JobId=11 JobName=fnvlp-shard JobState=COMPLETED Reason=None ExitCode=0:0" >"$tmp/ctl/11"
expect 0 11
echo "  a job scontrol knows: COMPLETED from scontrol"

echo "12|COMPLETED|None|fnvlp-pretrain|0:0" >"$tmp/acct/12"
expect 0 11 12
echo "  a purged job accounting recorded COMPLETED: COMPLETED from sacct"

echo "13|FAILED|NonZeroExitCode|fnvlp-eval|1:0" >"$tmp/acct/13"
expect 1 12 13
grep -q 'job 13 (fnvlp-eval): FAILED, reason NonZeroExitCode, exit 1:0' "$tmp/err" ||
  fail "a failed purged job is not reported with its state, reason and exit code: $(cat "$tmp/err")"
echo "  a purged job accounting recorded FAILED: the wait fails naming it"

printf '%s\n' "14_0|COMPLETED|None|campaign|0:0" "14_1|CANCELLED by 0|None|campaign|0:15" >"$tmp/acct/14"
expect 1 14
grep -q 'job 14_1 (campaign): CANCELLED' "$tmp/err" || fail "the cancelled array task is not named: $(cat "$tmp/err")"
echo "  a purged array with a cancelled task: the wait fails naming the task"

expect 1 15
grep -q 'job 15 (): UNKNOWN, reason not_found_by_scontrol_or_sacct' "$tmp/err" ||
  fail "a job neither knows is not reported as unknown: $(cat "$tmp/err")"
echo "  a job neither scontrol nor sacct knows: UNKNOWN, the wait fails"
echo PASS
