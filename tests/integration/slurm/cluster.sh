#!/usr/bin/env bash
# env/local-slurm.sh is idempotent: start twice, stop twice, status tells the truth; the cluster
# takes a 2-task pmix step. Leaves the cluster running for the other slurm.* tests.
set -euo pipefail
src=$1
ls=$src/env/local-slurm.sh
fail() {
  echo "FAIL: $*"
  exit 1
}
bash "$ls" start
bash "$ls" start | tee /tmp/fnvlp-slurm-start2.$$ # a healthy cluster is reused, not restarted
grep -q reusing /tmp/fnvlp-slurm-start2.$$ || fail "second start did not reuse the running cluster"
rm -f /tmp/fnvlp-slurm-start2.$$
bash "$ls" status || fail "status says down right after start"
eval "$(bash "$ls" env)"
srun --mpi=list 2>&1 | grep -qw pmix || fail "srun --mpi=list lacks pmix"
[ "$(srun --mpi=pmix -n 2 hostname | wc -l)" -eq 2 ] || fail "a 2-task srun step did not run"
# job_id: a job that runs `true`, waited for; prints its id.
job_id() { sbatch --parsable --wait --output=/dev/null --wrap=true | cut -d';' -f1; }
if [ "$SLURM_CONF" = "${FNVLP_SLURM_DIR:-/var/tmp/fnvlp-slurm}/etc/slurm.conf" ]; then
  before=$(job_id)
  bash "$ls" stop
  bash "$ls" stop # nothing left: still succeeds
  if bash "$ls" status; then fail "status says up after stop"; fi
  bash "$ls" start
  bash "$ls" status || fail "status says down after restart"
  # State survives a restart: job ids keep increasing rather than starting over (a chain.tsv or a
  # campaign's records naming an old id would otherwise point at a new job).
  eval "$(bash "$ls" env)"
  after=$(job_id)
  [ "$after" -gt "$before" ] || fail "job id $after after the restart, $before before it"
  echo "job ids across the restart: $before, then $after"
  # A crash (every daemon and job process killed, as when a session or machine goes away) leaves a
  # running job and a pending one in the saved state; the next start cancels both, so the node is
  # free at once instead of held until the dead job's time limit.
  dir=${FNVLP_SLURM_DIR:-/var/tmp/fnvlp-slurm}
  held=$(sbatch --parsable -c "$(sinfo -h -o %c | head -1)" --time=30 --output=/dev/null --wrap='sleep 1797')
  queued=$(sbatch --parsable -c 1 --time=30 --output=/dev/null --wrap='sleep 1798')
  for _ in $(seq 1 60); do
    [ "$(squeue -h -j "$held" -o %t)" = R ] && break
    sleep 0.5
  done
  [ "$(squeue -h -j "$held" -o %t)" = R ] || fail "job $held did not start"
  [ "$(squeue -h -j "$queued" -o %t)" = PD ] || fail "job $queued is not pending behind $held"
  # The controller saves its job state a moment after a change: crash after that save, as a crash
  # of a cluster that ran a while does.
  t_state=$(date +%s)
  for _ in $(seq 1 120); do
    [ "$(stat -c %Y "$dir/state/job_state")" -gt "$t_state" ] && break
    sleep 0.5
  done
  kill -KILL "$(cat "$dir/run/slurmctld.pid")" "$(cat "$dir/run/slurmd.pid")" "$(cat "$dir/munge/munged.pid")"
  pkill -KILL -f "slurmstepd: \[$held\." || true
  pkill -KILL -f 'sleep 1797' || true
  sleep 1
  bash "$ls" start | tee /tmp/fnvlp-slurm-start3.$$
  grep -q "cancelled its unfinished jobs.*$held" /tmp/fnvlp-slurm-start3.$$ ||
    fail "start after a crash did not cancel the dead cluster's jobs"
  rm -f /tmp/fnvlp-slurm-start3.$$
  for j in "$held" "$queued"; do
    st=$(scontrol show job "$j" | grep -o 'JobState=[A-Z]*')
    [ "$st" = JobState=CANCELLED ] || fail "job $j after the crash: $st"
  done
  t0=$(date +%s)
  third=$(timeout 60 sbatch --parsable --wait --output=/dev/null --wrap=true | cut -d';' -f1) ||
    fail "a new job did not run within 60 s of the restart after a crash"
  [ "$third" -gt "$queued" ] || fail "job id $third after the crash, $queued before it"
  echo "after a crash: jobs $held (running) and $queued (pending) cancelled; job $third ran in $(($(date +%s) - t0)) s"
else
  echo "a cluster of $SLURM_CONF is in use: stop/start of the local one not exercised"
fi
sinfo
echo PASS
