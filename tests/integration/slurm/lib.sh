# shellcheck shell=bash
# Shared by the SLURM integration tests: `source lib.sh BUILD_DIR SOURCE_DIR TEST_NAME`.
# Each test gets its own work directory; the smoke shards are shared between tests (the shard
# stage keeps a set that passes --verify).
set -euo pipefail
export FNVLP_BUILD_DIR=$1 FNVLP_ROOT=$2
t_name=$3
export FNVLP_SCALE=smoke
export FNVLP_WORK=$FNVLP_BUILD_DIR/slurm-work/$t_name
# T_OWN_SHARDS=1: shards of this test only (under its work directory).
if [ "${T_OWN_SHARDS:-0}" = 1 ]; then
  export FNVLP_SHARDS=$FNVLP_WORK/shards
else
  export FNVLP_SHARDS=$FNVLP_BUILD_DIR/slurm-work/shards
fi
export FNVLP_WAIT_TIMEOUT=${FNVLP_WAIT_TIMEOUT:-1500} FNVLP_WAIT_POLL=2
rm -rf "$FNVLP_WORK"
mkdir -p "$FNVLP_WORK"
# shellcheck source=slurm/common.sh
source "$FNVLP_ROOT/slurm/common.sh"
# shellcheck source=slurm/pipeline.sh
source "$FNVLP_ROOT/slurm/pipeline.sh"

fail() {
  echo "FAIL ($t_name): $*"
  exit 1
}
bash "$FNVLP_ROOT/env/local-slurm.sh" status >/dev/null ||
  fail "no healthy SLURM (the slurm.cluster test starts it: env/local-slurm.sh start)"

job_field() { fnvlp_job_field "$(scontrol show job -o "$1" | head -1)" "$2"; }

# Every job of a chain.tsv is COMPLETED.
assert_chain_completed() {
  local stage id st
  while IFS=$'\t' read -r stage id; do
    [ "$id" != none ] || continue
    st=$(job_field "$id" JobState)
    [ "$st" = COMPLETED ] || fail "$stage job $id is $st"
    echo "  $stage job $id: $st"
  done <"$1"
}

# The smoke sbatch options of pretrain_4m.sh (README command 1 passes the same).
# shellcheck disable=SC2034  # used by the tests that source this file
smoke_opts=(--nodes=1 --ntasks-per-node=2 --cpus-per-task=1 --gpus-per-node=0 --mem=6G --time=30:00)
