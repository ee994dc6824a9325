#!/usr/bin/env bash
# Offline false-negative statistics for an existing pretraining run:
#   bash slurm/fn_report.sh RUN_DIR            submit simstat -> report for RUN_DIR and wait
#   sbatch slurm/fn_report.sh RUN_DIR          the same as one batch job (both steps inside it)
# fnvlp-simstat on the run's newest embeddings (exact per-anchor (1-alpha)-quantile thresholds,
# quantile profiles, GloFND lambda against them when the run exported lambda), then fnvlp-report:
# RUN_DIR/analysis/simstat.{h5,json}, RUN_DIR/report/report.html.
#SBATCH --job-name=fnvlp-fn-report
#SBATCH --nodes=1
#SBATCH --ntasks=2
#SBATCH --time=02:00:00
#SBATCH --output=logs/%x-%j.out
set -euo pipefail
# sbatch runs a spool copy of this script: the checkout is found from the submitted command's path.
[ -n "${FNVLP_ROOT:-}" ] || [ -z "${SLURM_JOB_ID:-}" ] ||
  job_cmd=$(scontrol show job "$SLURM_JOB_ID" | sed -n 's/^ *Command=\([^ ]*\).*/\1/p')
FNVLP_ROOT=${FNVLP_ROOT:-$(cd "$(dirname "${job_cmd:-${BASH_SOURCE[0]}}")/.." && pwd)}
run=${1:?usage: slurm/fn_report.sh RUN_DIR}
[ -d "$run/embeddings" ] || { echo "fn_report: $run is not a run directory with embeddings/" >&2; exit 1; }
FNVLP_RUN=$(cd "$run" && pwd)
export FNVLP_RUN
# shellcheck source=slurm/common.sh
source "$FNVLP_ROOT/slurm/common.sh"
# shellcheck source=slurm/pipeline.sh
source "$FNVLP_ROOT/slurm/pipeline.sh"
fnvlp_check_stage_bins simstat report
if [ -n "${SLURM_JOB_ID:-}" ]; then
  export FNVLP_ANALYSIS_RANKS=${SLURM_NTASKS:-$FNVLP_ANALYSIS_RANKS}
  bash "$FNVLP_ROOT/slurm/step.sh" simstat
  bash "$FNVLP_ROOT/slurm/step.sh" report
else
  export FNVLP_WORK=${FNVLP_WORK_FN_REPORT:-$FNVLP_RUN/analysis/jobs} FNVLP_STAGES="simstat report"
  FNVLP_LOGS=$FNVLP_WORK/logs
  fnvlp_submit_chain
  fnvlp_wait_chain
  echo "fn_report: $FNVLP_RUN/report/report.html"
fi
