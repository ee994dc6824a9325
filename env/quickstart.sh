#!/usr/bin/env bash
# README command 1: install, build, start the local single-node SLURM, submit the main job
# (`sbatch slurm/pretrain_4m.sh` at smoke scale on the synthetic default data), wait for its chain
# (shard -> pretrain -> simstat -> report -> finetune -> eval) and print where the results are.
# FNVLP_STAGES, FNVLP_DATA, FNVLP_WORK, ... (slurm/common.sh) change what runs.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/env/install-debian.sh"
bash "$root/env/build.sh"
bash "$root/env/local-slurm.sh" start
eval "$(bash "$root/env/local-slurm.sh" env)"
export FNVLP_SCALE=smoke FNVLP_ROOT=$root
# The first report a user sees: ~6 minutes of the chain on 2 free cores, long enough for zero-shot
# retrieval well above chance, with GloFND on from epoch 1 (lambda learned from 0.5, lambda
# against the exact thresholds, false-negative precision/recall/F1 against FNC's on the labelled
# set) and the sampler's in-batch false-negative rate: the glofnd cell of
# slurm/campaigns/fidelity_synth.yaml. Every value can be overridden from the environment.
export FNVLP_SYNTH_IMAGES=${FNVLP_SYNTH_IMAGES:-1000} FNVLP_BATCH=${FNVLP_BATCH:-32}
# 4,000 train pairs: 62 steps per epoch at 2 x 32, 9 epochs.
export FNVLP_STEPS=${FNVLP_STEPS:-560} FNVLP_WARMUP=${FNVLP_WARMUP:-50}
export FNVLP_LOG_EVERY=${FNVLP_LOG_EVERY:-10} FNVLP_CKPT_EVERY=${FNVLP_CKPT_EVERY:-140}
export FNVLP_FN_ALPHA=${FNVLP_FN_ALPHA:-0.05}
# shellcheck source=slurm/methods.sh
source "$root/slurm/methods.sh"
FNVLP_PRETRAIN_SET=${FNVLP_PRETRAIN_SET:-$(fnvlp_method_overrides glofnd | tr '\n' ' ')negatives.start_epoch=1 negatives.glofnd.init=0.5 train.export_embeddings=true}
export FNVLP_PRETRAIN_SET
# shellcheck source=slurm/common.sh
source "$root/slurm/common.sh"
# shellcheck source=slurm/pipeline.sh
source "$root/slurm/pipeline.sh"
# shellcheck disable=SC2086  # the stage list is whitespace-separated
fnvlp_check_stage_bins $FNVLP_STAGES # a stage whose executable is missing fails here, not in a job
mkdir -p "$FNVLP_LOGS"
cd "$root"
# Command-line options override the 4M job's #SBATCH lines (4 nodes x 8 GPUs, 48 h).
id=$(sbatch --parsable --nodes=1 --ntasks-per-node="$FNVLP_RANKS" --cpus-per-task=1 \
  --gpus-per-node=0 --mem="$FNVLP_MEM" --time="$FNVLP_TIME" --output="$FNVLP_LOGS/%x-%j.out" \
  slurm/pretrain_4m.sh)
echo "quickstart: submitted slurm/pretrain_4m.sh as job $id (logs in $FNVLP_LOGS)"
bash slurm/pipeline.sh wait --job "$id"
echo "quickstart: run directory $FNVLP_RUN (metrics.jsonl, checkpoints/latest, embeddings/)"
echo "quickstart: report $FNVLP_RUN/report/report.html; evaluation $FNVLP_WORK/eval.json"
