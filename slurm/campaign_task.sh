#!/usr/bin/env bash
# One task of an ablation campaign (array job of slurm/ablation_campaign.sh): the array index
# selects (method, seed) in its submission's index (CAMPAIGN/submissions/K/index.tsv; a campaign
# submitted before those existed: CAMPAIGN/index.tsv); pretraining into tasks/<method>-s<seed>/run
# (requeued and resumed on preemption like slurm/pretrain_4m.sh), then evaluation into eval.json.
#SBATCH --job-name=fnvlp-camp
#SBATCH --output=logs/%x-%A_%a.out
set -euo pipefail
# sbatch runs a spool copy of this script: the checkout is found from the submitted command's path.
[ -n "${FNVLP_ROOT:-}" ] || [ -z "${SLURM_JOB_ID:-}" ] ||
  job_cmd=$(scontrol show job "$SLURM_JOB_ID" | sed -n 's/^ *Command=\([^ ]*\).*/\1/p')
FNVLP_ROOT=${FNVLP_ROOT:-$(cd "$(dirname "${job_cmd:-${BASH_SOURCE[0]}}")/.." && pwd)}
# shellcheck source=slurm/common.sh
source "$FNVLP_ROOT/slurm/common.sh"

camp=${1:?usage: sbatch --array=... slurm/campaign_task.sh CAMPAIGN_DIR [INDEX_TSV]}
index_tsv=${2:-$camp/index.tsv}
index=${SLURM_ARRAY_TASK_ID:?not an array task}
line=$(awk -F'\t' -v i="$index" 'NR > 1 && $1 == i' "$index_tsv")
[ -n "$line" ] || fnvlp_die "$index_tsv has no index $index"
IFS=$'\t' read -r _ method seed _ <<<"$line"
task=$camp/tasks/$method-s$seed
# One job per task: a task started twice (resubmitted, or a requeue racing its previous
# allocation) stops here with exit 2, naming the job that owns the directory.
fnvlp_own_dir "$task"
# The task's method comes with its overrides (task.json), not from FNVLP_METHOD.
export FNVLP_RUN=$task/run FNVLP_SEED=$seed FNVLP_METHOD=none
# The task's overrides (method's and matrix-wide), from task.json; train.seed comes first.
FNVLP_PRETRAIN_SET="$FNVLP_PRETRAIN_SET $(/usr/bin/python3 -c 'import json,sys; print(" ".join(json.load(open(sys.argv[1]))["overrides"]))' "$task/task.json")"
export FNVLP_PRETRAIN_SET
fnvlp_log_header "campaign task $index: $method seed $seed"

fnvlp_pretrain

# Claim (b) of issue 31: GloFND's learned lambda against the exact per-anchor (1-alpha)-quantile
# and FNC's in-batch threshold (simulated at the training global batch) on the run's last export.
emb=$(fnvlp_newest_embeddings "$FNVLP_RUN")
alpha=$(/usr/bin/python3 -c 'import json,sys
a=[o.split("=",1)[1] for o in json.load(open(sys.argv[1]))["overrides"] if o.startswith("negatives.alpha=")]
print(a[-1] if a else sys.argv[2])' "$task/task.json" "$FNVLP_FN_ALPHA")
fnc_batch=$(( ${FNVLP_BATCH:-256} * FNVLP_RANKS ))
# simstat_json EMBEDDINGS OUT_JSON: the thresholds of one export (with its lambda when it has one).
simstat_json() {
  local -a lam=()
  if fnvlp_has_lambda "$1"; then lam=(--lambda-from "$1"); fi
  mkdir -p "$FNVLP_RUN/analysis"
  fnvlp_run_ranks "$FNVLP_ANALYSIS_RANKS" "$(fnvlp_bin fnvlp-simstat)" --embeddings "$1" \
    --out "$FNVLP_RUN/analysis/simstat.h5" --alpha "$alpha" "${lam[@]}" --quantiles 2 \
    --fnc-batch "$fnc_batch" --json "$2.tmp"
  mv "$2.tmp" "$2"
}
if [ -n "$emb" ] && [ ! -s "$task/stats.json" ] && fnvlp_has_lambda "$emb" &&
  fnvlp_have_or_skip fnvlp-simstat; then
  simstat_json "$emb" "$task/stats.json"
  fnvlp_log "lambda vs exact thresholds ($emb, alpha $alpha, FNC batch $fnc_batch): $task/stats.json"
fi
# FNVLP_EPOCH_STATS=1 (long-horizon campaigns): the same summary for every epoch export of any
# method, one JSON line per export in TASK/epoch_stats.jsonl, so that lambda's distance to the
# exact quantile (and FNC's, simulated) can be followed epoch by epoch; exports already there are
# skipped, so a resumed task adds only the new ones.
if [ "${FNVLP_EPOCH_STATS:-0}" = 1 ] && fnvlp_have_or_skip fnvlp-simstat; then
  while IFS= read -r e; do
    base=$(basename "$e")
    grep -qF "\"$base\"" "$task/epoch_stats.jsonl" 2>/dev/null && continue
    simstat_json "$e" "$FNVLP_RUN/analysis/epoch.json"
    /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d["export"]=sys.argv[2]; print(json.dumps(d, sort_keys=True))' \
      "$FNVLP_RUN/analysis/epoch.json" "$base" >>"$task/epoch_stats.jsonl"
  done < <({ find "$FNVLP_RUN/embeddings" -maxdepth 1 -name 'epoch-*.h5' 2>/dev/null || true; } | sort)
  fnvlp_log "per-epoch thresholds (alpha $alpha, FNC batch $fnc_batch): $task/epoch_stats.jsonl"
fi

# FNVLP_EVAL_PROBE=1 (labelled data): also a linear probe on the frozen ViT features, trained on
# the training split's images, tested on the evaluation split's.
probe=()
[ "${FNVLP_EVAL_PROBE:-0}" != 1 ] || probe=(--probe --probe-train "$FNVLP_SHARDS_FT_TRAIN")
if fnvlp_have_or_skip fnvlp-eval; then
  fnvlp_run_ranks "$FNVLP_ANALYSIS_RANKS" "$(fnvlp_bin fnvlp-eval)" --checkpoint "$FNVLP_RUN/checkpoints/latest" \
    --data "$FNVLP_SHARDS_FT_VAL" --out "$task/eval.json" --k-test "$FNVLP_K_TEST" "${probe[@]}"
else
  # No fnvlp-eval: the run's last zero-shot validation record (ITC only, no ITM re-ranking),
  # labelled as such in eval.json and in the results table.
  /usr/bin/python3 - "$FNVLP_RUN/metrics.jsonl" "$task/eval.json" <<'PY'
import json, sys
src, out = sys.argv[1], sys.argv[2]
val = [r for r in map(json.loads, open(src)) if "val_r_mean" in r]
if not val:
    sys.exit(f"{src}: no validation record (val_r_mean) to fall back on; build fnvlp-eval")
v = val[-1]
keys = ["txt_r1", "txt_r5", "txt_r10", "img_r1", "img_r5", "img_r10", "txt_r_mean", "img_r_mean", "r_mean"]
e = {k: v["val_" + k] for k in keys}
e.update({"itc_" + k: v["val_" + k] for k in keys})
e.update(pairs=v.get("val_pairs"), step=v["step"], reranked=False,
         source="fnvlp-pretrain zero-shot validation (ITC only): fnvlp-eval not built")
json.dump(e, open(out, "w"), indent=1)
print(f"eval fallback: r_mean {e['r_mean']:.2f} from step {v['step']} of {src}")
PY
fi
fnvlp_log "task $index done: $task/eval.json"
