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
