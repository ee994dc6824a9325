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
else
  echo "a cluster of $SLURM_CONF is in use: stop/start of the local one not exercised"
fi
sinfo
echo PASS
