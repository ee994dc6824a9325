#!/usr/bin/env bash
# Pretraining on ALBEF's 4M set (COCO + Visual Genome + CC3M + SBU, `base` preset) and the chain
# around it. `sbatch slurm/pretrain_4m.sh` (from the repository root, with logs/ present):
#   * shards that pass `fnvlp-shard --verify`: the chain's later stages (simstat -> report ->
#     finetune -> eval, FNVLP_STAGES) are submitted with --dependency=afterok on this job, and
#     this job pretrains;
#   * shards missing or failing --verify: this job submits shard -> pretrain -> ... (slurm/
#     pipeline.sh) and ends.
# Preemption: SLURM sends USR1 120 s before the time limit (--signal=B:USR1@120); the trap
# forwards it to the ranks, which checkpoint and exit 3; the job then requeues itself and the
# next start resumes (--resume auto). `scontrol requeue` (SIGTERM to the ranks) resumes the same way.
#
# `FNVLP_DRY_RUN=1 bash slurm/pretrain_4m.sh` prints what that would submit and submits nothing.
# Smoke scale (here: 2 CPU cores, minutes): the same script with FNVLP_SCALE=smoke and small
# resources on the command line (command-line options override #SBATCH lines):
#   mkdir -p logs && FNVLP_SCALE=smoke sbatch --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 \
#     --gpus-per-node=0 --mem=6G --time=30:00 slurm/pretrain_4m.sh
# Every setting is an environment variable (slurm/common.sh): FNVLP_DATA (smoke: synthetic, or a
# Flickr8k-128 directory), FNVLP_WORK, FNVLP_RUN, FNVLP_PRESET, FNVLP_RANKS, FNVLP_STEPS,
# FNVLP_BATCH, FNVLP_PRETRAIN_SET, FNVLP_STAGES, FNVLP_LAUNCHER, NCCL_*.
# GPUs: 4 nodes x 8 GPUs, one rank per GPU. No SLURM GPU binding (--gpu-bind=none, no
# --gpus-per-task): each rank sees its node's 8 GPUs and trains on the one of its node-local rank,
# so NCCL reaches the others over NVLink (per-task binding hides them from CUDA IPC). With GPUs in
# the allocation the ranks train with train.device=cuda comm.backend=nccl, without (a CPU cluster:
# `sbatch --gpus-per-node=0 slurm/pretrain_4m.sh`) with cpu/mpi, logged (fnvlp_device_overrides;
# FNVLP_DEVICE=cpu|cuda forces it, FNVLP_PRECISION=bf16 sets train.precision); the jobs it chains
# follow its allocation (FNVLP_GPUS_PER_NODE). Each rank's 12 CPUs are its train.threads (the
# loader's augmentation and the CPU loops; fnvlp_thread_overrides). fnvlp-simstat runs on one node's
# GPUs (FNVLP_ANALYSIS_GPUS) when it is built with Kokkos on CUDA (FNVLP_GPU=1 FNVLP_KOKKOS=cuda
# env/build.sh), else on 16 CPU ranks (FNVLP_ANALYSIS_RANKS); the dry run says which.
# What it trains (fnvlp_step_overrides, printed by the dry run and logged at the start):
# FNVLP_METHOD (default falcon_glofnd: FALCON's batches with GloFND's per-anchor thresholds from
# 40% of the FNVLP_EPOCHS=30 epochs; `none`: the preset alone), on GPUs in bf16 with the static
# step in CUDA graphs (FNVLP_PRECISION, FNVLP_STEP_MODE=graphs|static|eager), on CPUs eager fp32.
# ALBEF's initialisation: FNVLP_INIT="/path/deit_base_patch16_224.pth /path/bert-base-uncased.safetensors"
# (fnvlp-pretrain --init-from; USAGE.md "Weights in and out"); empty, random weights.
#SBATCH --job-name=fnvlp-pretrain-4m
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --gpu-bind=none
#SBATCH --cpus-per-task=12
#SBATCH --mem=0
#SBATCH --time=48:00:00
#SBATCH --signal=B:USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=logs/%x-%j.out
set -euo pipefail
# sbatch runs a spool copy of this script: the checkout is found from the submitted command's path.
[ -n "${FNVLP_ROOT:-}" ] || [ -z "${SLURM_JOB_ID:-}" ] ||
  job_cmd=$(scontrol show job "$SLURM_JOB_ID" | sed -n 's/^ *Command=\([^ ]*\).*/\1/p')
FNVLP_ROOT=${FNVLP_ROOT:-$(cd "$(dirname "${job_cmd:-${BASH_SOURCE[0]}}")/.." && pwd)}
gpus_asked=${FNVLP_GPUS_PER_NODE:-}
# shellcheck source=slurm/common.sh
source "$FNVLP_ROOT/slurm/common.sh"
if [ -n "${SLURM_JOB_ID:-}" ] && [ -z "$gpus_asked" ]; then
  # A hand-submitted job: the training jobs it chains ask for GPUs as it got them (none after
  # `sbatch --gpus-per-node=0 slurm/pretrain_4m.sh` on a CPU cluster).
  read -r FNVLP_GPUS_PER_NODE _ <<<"$(fnvlp_alloc_gpus)"
fi
# shellcheck source=slurm/pipeline.sh
source "$FNVLP_ROOT/slurm/pipeline.sh"

if [ -z "${SLURM_JOB_ID:-}" ] && fnvlp_dry_run; then
  # `FNVLP_DRY_RUN=1 bash slurm/pretrain_4m.sh`: what `sbatch slurm/pretrain_4m.sh` would submit,
  # this job (its #SBATCH lines) and then the chain its first start submits.
  read -r -a own <<<"$(sed -n 's/^#SBATCH //p' "$FNVLP_ROOT/slurm/pretrain_4m.sh" | tr '\n' ' ')"
  entry=$(fnvlp_submit "${own[@]}" "$FNVLP_ROOT/slurm/pretrain_4m.sh")
  if fnvlp_stage_wanted shard && ! fnvlp_shards_ok; then
    fnvlp_log "dry run: shards missing: job $entry would submit shard -> pretrain -> ... and end"
    fnvlp_submit_chain
  else
    fnvlp_submit_chain_after_pretrain "$entry"
  fi
  # What the pretraining ranks will train, on the device the job asks for.
  dev=cpu
  [ "$FNVLP_GPUS_PER_NODE" -eq 0 ] || dev=cuda
  fnvlp_log "dry run: $(fnvlp_step_summary "$dev")"
  fnvlp_init_files >/dev/null
  fnvlp_log "dry run: initial weights: ${FNVLP_INIT:-random (FNVLP_INIT empty)}"
  fnvlp_log "dry run: nothing submitted"
  exit 0
fi
[ -n "${SLURM_JOB_ID:-}" ] || fnvlp_die "submit with sbatch (see the header), or run bash slurm/pipeline.sh submit"

if [ "$FNVLP_SCALE" = 4m ]; then
  # Multi-node collectives: fail fast on a dead peer, log warnings only; site-specific
  # interfaces come from the environment (NCCL_SOCKET_IFNAME, NCCL_IB_HCA).
  export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
  export TORCH_NCCL_ASYNC_ERROR_HANDLING=${TORCH_NCCL_ASYNC_ERROR_HANDLING:-1}
  export NCCL_IB_TIMEOUT=${NCCL_IB_TIMEOUT:-22}
  export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-^lo,docker}
fi

fnvlp_log_header "pretrain_4m (scale $FNVLP_SCALE, stage ${FNVLP_STAGE:-entry})"
mkdir -p "$FNVLP_WORK" "$FNVLP_LOGS"
if [ "${FNVLP_STAGE:-entry}" = entry ] && [ "${SLURM_RESTART_COUNT:-0}" -eq 0 ]; then
  # First start of a job submitted by hand: check the data, then chain the rest around it.
  if fnvlp_stage_wanted shard && ! fnvlp_shards_ok; then
    fnvlp_log "shards missing or failing --verify: submitting shard -> pretrain -> ... and ending"
    fnvlp_submit_chain
    exit 0
  fi
  fnvlp_submit_chain_after_pretrain "$SLURM_JOB_ID"
fi
fnvlp_pretrain
