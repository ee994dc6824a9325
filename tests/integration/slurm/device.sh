#!/usr/bin/env bash
# The training device follows the allocation (issue 30): fnvlp_device_overrides gives
# train.device=cuda comm.backend=nccl when the job has GPUs (SLURM_GPUS_ON_NODE, SLURM_JOB_GPUS,
# SLURM_GPUS_PER_NODE, or CUDA_VISIBLE_DEVICES alone), else train.device=cpu comm.backend=mpi with
# one "no GPU in this allocation" line on stderr; FNVLP_DEVICE forces it, FNVLP_PRECISION adds
# train.precision (bf16 on GPUs only). fnvlp-pretrain gets them before FNVLP_PRETRAIN_SET, and the
# job's CPUs per rank reach its srun step (its mpirun fallback runs unbound). Only pretrain and
# finetune ask for GPUs (FNVLP_GPUS_PER_NODE; a hand-submitted pretrain_4m.sh passes on its own
# allocation's). SLURM variables are stubbed and sbatch is a dry run: no cluster, no GPU needed.
set -euo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL (device): $*"
  exit 1
}
export FNVLP_ROOT=$src FNVLP_WORK=$tmp/work FNVLP_SLURM_DIR=$tmp/none FNVLP_BUILD_DIR=$tmp/none

# run [VAR=VALUE...] -- BASH_CODE: runs the code after sourcing slurm/common.sh and
# slurm/pipeline.sh in a shell where only the given GPU/SLURM variables are set (none inherited
# from wherever the test runs); stdout to $tmp/out, stderr to $tmp/err, status to $rc. With
# T_RAW=1 the code runs without sourcing them first.
run() {
  local -a vars=()
  while [ "$1" != -- ]; do
    vars+=("$1")
    shift
  done
  shift
  rc=0
  local v
  local -a clean=()
  for v in $(compgen -e | grep -E '^(FNVLP_|SLURM_|SRUN_|CUDA_VISIBLE_DEVICES$)' |
    grep -vxE 'FNVLP_(ROOT|WORK|SLURM_DIR|BUILD_DIR)' || true); do clean+=(-u "$v"); done
  # shellcheck disable=SC2016 # expanded by the inner shell
  env "${clean[@]}" FNVLP_SCALE=smoke "${vars[@]}" bash -c '
      set -euo pipefail
      if [ "${T_RAW:-0}" != 1 ]; then
        source "$FNVLP_ROOT/slurm/common.sh"
        source "$FNVLP_ROOT/slurm/pipeline.sh"
      fi
      '"$1" >"$tmp/out" 2>"$tmp/err" || rc=$?
}
cpu="train.device=cpu comm.backend=mpi"
cuda="train.device=cuda comm.backend=nccl"
# expect NAME OVERRIDES STDERR_REGEX|'' [VAR=VALUE...]: fnvlp_device_overrides prints exactly
# OVERRIDES, and stderr is empty ('') or one line matching the regex.
expect() {
  local name=$1 want=$2 err=$3
  shift 3
  run "$@" -- fnvlp_device_overrides
  [ "$rc" -eq 0 ] || fail "$name: exit $rc: $(cat "$tmp/err")"
  [ "$(cat "$tmp/out")" = "$want" ] || fail "$name: overrides '$(cat "$tmp/out")', expected '$want'"
  if [ -z "$err" ]; then
    [ ! -s "$tmp/err" ] || fail "$name: unexpected stderr: $(cat "$tmp/err")"
  else
    if [ "$(wc -l <"$tmp/err")" -ne 1 ] || ! grep -qE "$err" "$tmp/err"; then
      fail "$name: stderr '$(cat "$tmp/err")' is not one line matching '$err'"
    fi
  fi
  echo "$name: $want${err:+ + stderr: $(cat "$tmp/err")}"
}
fallback='^fnvlp: no GPU in this allocation \(.+\): training on CPU with MPI$'

# 1. The device.
expect "8 GPUs on the node" "$cuda" '' SLURM_JOB_ID=7 SLURM_GPUS_ON_NODE=8 \
  SLURM_JOB_GPUS=0,1,2,3,4,5,6,7 SLURM_GPUS_PER_NODE=8 CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7
expect "SLURM_JOB_GPUS only" "$cuda" '' SLURM_JOB_ID=7 SLURM_JOB_GPUS=2,3
expect "typed request a100:4" "$cuda" '' SLURM_JOB_ID=7 SLURM_GPUS_PER_NODE=a100:4
expect "CUDA_VISIBLE_DEVICES only" "$cuda" '' CUDA_VISIBLE_DEVICES=0,1
expect "no GPU variable" "$cpu" "$fallback"
expect "no GPU in a job" "$cpu" "$fallback" SLURM_JOB_ID=7
grep -q 'none of SLURM_GPUS_ON_NODE, SLURM_JOB_GPUS, SLURM_GPUS_PER_NODE, CUDA_VISIBLE_DEVICES' "$tmp/err" ||
  fail "the fallback line does not say what was looked at: $(cat "$tmp/err")"
expect "--gpus-per-node=0" "$cpu" "$fallback" SLURM_JOB_ID=7 SLURM_GPUS_PER_NODE=0
grep -q '(SLURM_GPUS_PER_NODE=0)' "$tmp/err" || fail "the fallback line does not name SLURM_GPUS_PER_NODE=0"
# A CUDA_VISIBLE_DEVICES left over from the submitting shell does not outvote SLURM.
expect "SLURM says 0, stale CUDA_VISIBLE_DEVICES" "$cpu" "$fallback" SLURM_JOB_ID=7 \
  SLURM_GPUS_ON_NODE=0 SLURM_GPUS_PER_NODE=0 CUDA_VISIBLE_DEVICES=0,1
expect "CUDA_VISIBLE_DEVICES=NoDevFiles" "$cpu" "$fallback" CUDA_VISIBLE_DEVICES=NoDevFiles
expect "CUDA_VISIBLE_DEVICES empty" "$cpu" "$fallback" CUDA_VISIBLE_DEVICES=
expect "FNVLP_DEVICE=cpu with 8 GPUs" "$cpu" '^fnvlp: FNVLP_DEVICE=cpu: training on CPU with MPI' \
  FNVLP_DEVICE=cpu SLURM_JOB_ID=7 SLURM_GPUS_ON_NODE=8 SLURM_GPUS_PER_NODE=8
grep -q 'no GPU' "$tmp/err" && fail "FNVLP_DEVICE=cpu logged the no-GPU fallback"
expect "FNVLP_DEVICE=cuda without GPUs" "$cuda" '^fnvlp: FNVLP_DEVICE=cuda though the allocation shows no GPU' \
  FNVLP_DEVICE=cuda
expect "FNVLP_DEVICE=auto" "$cuda" '' FNVLP_DEVICE=auto SLURM_GPUS_ON_NODE=4
expect "FNVLP_PRECISION=bf16 on GPUs" "$cuda train.precision=bf16" '' FNVLP_PRECISION=bf16 \
  SLURM_GPUS_ON_NODE=8
# bf16 is a CUDA path: on the CPU fp32, said so (the binary would refuse it).
run FNVLP_PRECISION=bf16 -- fnvlp_device_overrides
if [ "$rc" -ne 0 ] || [ "$(cat "$tmp/out")" != "$cpu" ] || ! grep -qE "$fallback" "$tmp/err" ||
  ! grep -qx 'fnvlp: FNVLP_PRECISION=bf16 is for GPUs: fp32 on the CPU' "$tmp/err"; then
  fail "FNVLP_PRECISION=bf16 without GPUs (exit $rc): $(cat "$tmp/out" "$tmp/err")"
fi
echo "FNVLP_PRECISION=bf16 on CPU: $cpu + stderr: $(tr '\n' ' ' <"$tmp/err")"
expect "FNVLP_PRECISION=fp32 on CPU" "$cpu train.precision=fp32" "$fallback" FNVLP_PRECISION=fp32
run FNVLP_DEVICE=gpu -- true
if [ "$rc" -eq 0 ] || ! grep -q 'FNVLP_DEVICE=gpu: expected auto, cpu or cuda' "$tmp/err"; then
  fail "FNVLP_DEVICE=gpu accepted (exit $rc): $(cat "$tmp/err")"
fi
echo "FNVLP_DEVICE=gpu: refused"

# 2. fnvlp-pretrain's arguments (the launch is stubbed): the device overrides come before
#    FNVLP_PRETRAIN_SET (whose keys win), and so does train.threads = the job's --cpus-per-task
#    (none without it); the choice is logged, and SRUN_CPUS_PER_TASK is the job's --cpus-per-task
#    during the launch only.
mkdir -p "$tmp/bin/jobs"
printf '#!/bin/sh\n' >"$tmp/bin/jobs/fnvlp-pretrain"
chmod +x "$tmp/bin/jobs/fnvlp-pretrain"
# shellcheck disable=SC2016 # expanded by the inner shell
launch='fnvlp_run_ranks() { echo "ranks $1 srun_cpus=${SRUN_CPUS_PER_TASK:-unset}"; shift 2; echo "$*"; }
  fnvlp_pretrain; echo "after: srun_cpus=${SRUN_CPUS_PER_TASK:-unset}"'
run FNVLP_BUILD_DIR="$tmp/bin" FNVLP_RUN="$tmp/run" SLURM_JOB_ID=7 SLURM_GPUS_ON_NODE=8 \
  SLURM_CPUS_PER_TASK=12 FNVLP_PRETRAIN_SET="comm.backend=mpi" -- "$launch"
[ "$rc" -eq 0 ] || fail "fnvlp_pretrain: exit $rc: $(cat "$tmp/out" "$tmp/err")"
grep -qx 'ranks 2 srun_cpus=12' "$tmp/out" || fail "fnvlp_pretrain: launch not with SRUN_CPUS_PER_TASK=12: $(cat "$tmp/out")"
grep -qx 'after: srun_cpus=unset' "$tmp/out" || fail "SRUN_CPUS_PER_TASK outlived the launch: $(cat "$tmp/out")"
grep -q -- "--set train.device=cuda --set comm.backend=nccl --set train.precision=bf16 --set train.cuda_graphs=true --set train.threads=12 .*--set comm.backend=mpi\$" "$tmp/out" ||
  fail "fnvlp_pretrain: overrides (the device, bf16 and CUDA graphs on it, the job's 12 CPUs per rank as train.threads) not before FNVLP_PRETRAIN_SET: $(cat "$tmp/out")"
grep -q "pretraining: method none, bf16, static step in CUDA graphs on cuda" "$tmp/out" ||
  fail "fnvlp_pretrain: the method, precision and step not logged: $(cat "$tmp/out")"
grep -q "device: $cuda\$" "$tmp/out" || fail "fnvlp_pretrain: the device is not logged: $(cat "$tmp/out")"
echo "fnvlp_pretrain: $cuda train.threads=12 before FNVLP_PRETRAIN_SET, SRUN_CPUS_PER_TASK=12 for the launch only"
run FNVLP_BUILD_DIR="$tmp/bin" FNVLP_RUN="$tmp/run" SLURM_JOB_ID=7 SLURM_GPUS_PER_NODE=0 -- "$launch"
[ "$rc" -eq 0 ] || fail "fnvlp_pretrain on CPU: exit $rc: $(cat "$tmp/out" "$tmp/err")"
grep -q -- "--set train.device=cpu --set comm.backend=mpi" "$tmp/out" ||
  fail "fnvlp_pretrain on CPU: $(cat "$tmp/out")"
grep -qE "$fallback" "$tmp/err" || fail "fnvlp_pretrain on CPU: no fallback line: $(cat "$tmp/err")"
! grep -q "train.threads" "$tmp/out" || fail "fnvlp_pretrain outside --cpus-per-task set train.threads: $(cat "$tmp/out")"
echo "fnvlp_pretrain without GPUs: $cpu, fallback logged"

# 3. GPU requests: the training stages only, FNVLP_GPUS_PER_NODE=0 opting out.
# gpus SCALE STAGE [VAR=VALUE...]: the --gpus-per-node of the stage's sbatch options.
gpus() {
  local scale=$1 stage=$2
  shift 2
  run FNVLP_SCALE="$scale" "$@" -- "fnvlp_stage_opts $stage | tr '\n' ' '"
  [ "$rc" -eq 0 ] || fail "$scale $stage: exit $rc: $(cat "$tmp/err")"
  sed -nE 's/.*--gpus-per-node=([0-9]+).*/\1/p' "$tmp/out"
}
for s in shard simstat report eval; do
  [ "$(gpus 4m "$s")" = 0 ] || fail "4m $s asks for GPUs: $(cat "$tmp/out")"
done
for s in pretrain finetune; do
  [ "$(gpus 4m "$s")" = 8 ] || fail "4m $s: not 8 GPUs per node: $(cat "$tmp/out")"
  grep -q -- "--nodes=4 --ntasks-per-node=8 --gpus-per-node=8 --gpu-bind=none --cpus-per-task=12" "$tmp/out" ||
    fail "4m $s: not 4 nodes x 8 ranks, one GPU each: $(cat "$tmp/out")"
  [ "$(gpus 4m "$s" FNVLP_GPUS_PER_NODE=0)" = 0 ] || fail "4m $s with FNVLP_GPUS_PER_NODE=0: $(cat "$tmp/out")"
  [ "$(gpus smoke "$s")" = 0 ] || fail "smoke $s asks for GPUs by default: $(cat "$tmp/out")"
  if [ "$(gpus 4m "$s" FNVLP_GPUS_PER_NODE=4)" != 4 ] || ! grep -q -- "--nodes=8 --ntasks-per-node=4 " "$tmp/out"; then
    fail "4m $s on 4-GPU nodes: not 8 nodes x 4 ranks: $(cat "$tmp/out")"
  fi
done
# A hand-submitted pretrain_4m.sh job (4m, no shards yet) chains its training jobs with the GPUs of
# its own allocation (its submissions printed by a dry run inside the job).
chained() { # chained STAGE VAR=VALUE...: the --gpus-per-node of STAGE's sbatch line
  local stage=$1
  shift
  # shellcheck disable=SC2016 # expanded by the inner shell
  run T_RAW=1 FNVLP_SCALE=4m FNVLP_DRY_RUN=1 FNVLP_WORK="$tmp/work4m" SLURM_JOB_ID=7 SLURM_NTASKS=32 \
    FNVLP_SKIP_MISSING="fnvlp-shard fnvlp-synth fnvlp-pretrain fnvlp-simstat fnvlp-report fnvlp-finetune fnvlp-eval" \
    "$@" -- 'bash "$FNVLP_ROOT/slurm/pretrain_4m.sh"'
  [ "$rc" -eq 0 ] || fail "pretrain_4m.sh in a job: exit $rc: $(cat "$tmp/out" "$tmp/err")"
  grep "^sbatch .*--job-name=fnvlp-$stage " "$tmp/err" | sed -nE 's/.*--gpus-per-node=([0-9]+).*/\1/p'
}
for s in pretrain finetune; do
  [ "$(chained "$s" SLURM_GPUS_PER_NODE=0)" = 0 ] ||
    fail "$s chained by a GPU-less pretrain_4m.sh job asks for GPUs: $(cat "$tmp/err")"
  [ "$(chained "$s" SLURM_GPUS_ON_NODE=8 SLURM_GPUS_PER_NODE=8)" = 8 ] ||
    fail "$s chained by an 8-GPU pretrain_4m.sh job: $(cat "$tmp/err")"
  [ "$(chained "$s" SLURM_GPUS_PER_NODE=0 FNVLP_GPUS_PER_NODE=8)" = 8 ] ||
    fail "$s chained with FNVLP_GPUS_PER_NODE=8 set: $(cat "$tmp/err")"
done
echo "pretrain_4m.sh in a job: chained training jobs ask for its own GPUs (0 or 8), FNVLP_GPUS_PER_NODE wins"
if [ "$(gpus 4m pretrain FNVLP_GPUS_PER_NODE=0)" != 0 ] || grep -q -- '--nodes=' "$tmp/out"; then
  fail "4m pretrain on CPUs: expected its #SBATCH layout with --gpus-per-node=0: $(cat "$tmp/out")"
fi
# Ranks that do not fill the GPU nodes: refused, nothing submitted (a dry run prints no sbatch line).
for s in pretrain finetune; do
  run FNVLP_SCALE=4m FNVLP_RANKS=12 FNVLP_DRY_RUN=1 -- "fnvlp_submit_stage $s ''"
  if [ "$rc" -eq 0 ] || grep -q '^sbatch ' "$tmp/err" ||
    ! grep -q '12 ranks do not fill nodes of FNVLP_GPUS_PER_NODE=8' "$tmp/err"; then
    fail "$s: 12 ranks on 8-GPU nodes accepted (exit $rc): $(cat "$tmp/out" "$tmp/err")"
  fi
done
echo "GPU requests: pretrain and finetune only (4 nodes x 8 at 4m), none with FNVLP_GPUS_PER_NODE=0"

# 3b. simstat goes to GPUs where its build's Kokkos runs on one (issue 66): a stub fnvlp-simstat
#     answers --kokkos-space and records each rank's launch.
simstat_stub() { # simstat_stub SPACE: the stub's answer
  mkdir -p "$tmp/kk/analysis"
  # shellcheck disable=SC2016 # expanded by the stub
  printf '#!/bin/sh\nif [ "$1" = --kokkos-space ]; then echo %s; exit 0; fi\necho "rank of ${OMPI_COMM_WORLD_SIZE:-?}: $*" >>"%s"\n' \
    "$1" "$tmp/simstat.calls" >"$tmp/kk/analysis/fnvlp-simstat"
  chmod +x "$tmp/kk/analysis/fnvlp-simstat"
}
simstat_stub Cuda
if [ "$(gpus 4m simstat FNVLP_BUILD_DIR="$tmp/kk")" != 8 ] ||
  ! grep -q -- "--job-name=fnvlp-simstat --mem=0 --time=1:00:00 --nodes=1 --ntasks-per-node=8 --gpus-per-node=8 --gpu-bind=none" "$tmp/out"; then
  fail "4m simstat built with Kokkos Cuda: not one node of 8 GPUs for an hour: $(cat "$tmp/out")"
fi
if [ "$(gpus 4m simstat FNVLP_BUILD_DIR="$tmp/kk" FNVLP_ANALYSIS_GPUS=16)" != 8 ] || ! grep -q -- "--nodes=2 " "$tmp/out"; then
  fail "4m simstat with FNVLP_ANALYSIS_GPUS=16: not 2 nodes x 8: $(cat "$tmp/out")"
fi
run FNVLP_SCALE=4m FNVLP_BUILD_DIR="$tmp/kk" FNVLP_DRY_RUN=1 -- "fnvlp_submit_stage simstat ''"
if [ "$rc" -ne 0 ] || ! grep -q "simstat on 8 GPUs: fnvlp-simstat is built with Kokkos Cuda" "$tmp/err"; then
  fail "the dry run does not say simstat runs on 8 GPUs (exit $rc): $(cat "$tmp/err")"
fi
run FNVLP_SCALE=4m FNVLP_BUILD_DIR="$tmp/kk" FNVLP_GPUS_PER_NODE=0 FNVLP_DRY_RUN=1 -- "fnvlp_submit_stage simstat ''"
if [ "$rc" -eq 0 ] || grep -q '^sbatch ' "$tmp/err" || ! grep -q 'runs on GPUs only, but the chain asks for none' "$tmp/err"; then
  fail "a Kokkos Cuda simstat in a chain without GPUs accepted (exit $rc): $(cat "$tmp/err")"
fi
simstat_stub Serial
if [ "$(gpus 4m simstat FNVLP_BUILD_DIR="$tmp/kk")" != 0 ] || ! grep -q -- "--ntasks=16 " "$tmp/out"; then
  fail "4m simstat built with Kokkos Serial: not 16 CPU ranks: $(cat "$tmp/out")"
fi
# In the job (slurm/step.sh simstat): the ranks run where the submitter planned them.
mkdir -p "$tmp/srun/embeddings"
: >"$tmp/srun/embeddings/epoch-000.h5"
in_job() { # in_job SPACE [VAR=VALUE...]: step.sh simstat with the stub; its launches in simstat.calls
  simstat_stub "$1"
  shift
  rm -f "$tmp/simstat.calls"
  # shellcheck disable=SC2016 # expanded by the inner shell
  run T_RAW=1 FNVLP_SCALE=4m FNVLP_BUILD_DIR="$tmp/kk" FNVLP_RUN="$tmp/srun" FNVLP_LAUNCHER=mpirun \
    FNVLP_WORK="$tmp/work4m" SLURM_JOB_ID=7 "$@" -- 'bash "$FNVLP_ROOT/slurm/step.sh" simstat'
}
in_job Cuda SLURM_GPUS_ON_NODE=8
if [ "$rc" -ne 0 ] || ! grep -q "simstat on 8 GPUs (8 per node; fnvlp-simstat is built with Kokkos Cuda)" "$tmp/out" ||
  [ "$(grep -c '^rank of 8: --embeddings' "$tmp/simstat.calls")" != 8 ]; then
  fail "step.sh simstat on GPUs: not 8 ranks (exit $rc): $(cat "$tmp/out" "$tmp/err" "$tmp/simstat.calls")"
fi
in_job Cuda SLURM_GPUS_PER_NODE=0
if [ "$rc" -eq 0 ] || [ -f "$tmp/simstat.calls" ] || ! grep -q "and this job has no GPU" "$tmp/err"; then
  fail "step.sh simstat with a Kokkos Cuda build in a job without GPUs ran (exit $rc): $(cat "$tmp/out" "$tmp/err")"
fi
in_job Serial SLURM_GPUS_ON_NODE=8 FNVLP_ANALYSIS_RANKS=3
if [ "$rc" -ne 0 ] || ! grep -q "simstat on 3 CPU ranks (fnvlp-simstat is built with Kokkos Serial" "$tmp/out" ||
  [ "$(grep -c '^rank of 3: --embeddings' "$tmp/simstat.calls")" != 3 ]; then
  fail "step.sh simstat on CPUs: not 3 ranks (exit $rc): $(cat "$tmp/out" "$tmp/err" "$tmp/simstat.calls")"
fi
echo "simstat: a Kokkos Cuda build on FNVLP_ANALYSIS_GPUS GPUs (one node of 8 at 4m; refused without GPUs), a host build on CPU ranks; dry run and job log say which"

# 4. The mpirun launcher leaves a rank every CPU the job has (Open MPI alone binds a rank to one
#    core at np <= 2, where its train.threads would share that core).
mine=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
if [ "$(nproc)" -lt 2 ]; then
  echo "mpirun launcher: not checked, one CPU here ($mine)"
else
  printf '#!/bin/sh\nsed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status\n' >"$tmp/cpus.sh"
  for np in 1 2; do
    run FNVLP_LAUNCHER=mpirun -- "fnvlp_run_ranks $np sh $tmp/cpus.sh"
    [ "$rc" -eq 0 ] || fail "mpirun launcher at np $np: exit $rc: $(cat "$tmp/out" "$tmp/err")"
    got=$(grep -v '^\[' "$tmp/out" | sort -u | tr '\n' ' ')
    [ "$got" = "$mine " ] || fail "mpirun launcher at np $np: ranks on CPUs '$got' of $mine"
  done
  echo "mpirun launcher at np 1 and 2: each rank on CPUs $mine"
fi
echo PASS
