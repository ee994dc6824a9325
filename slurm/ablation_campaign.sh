#!/usr/bin/env bash
# An ablation campaign as one SLURM job array: `bash slurm/ablation_campaign.sh MATRIX.yaml
# [--out CAMPAIGN_DIR] [--methods m1,m2] [--wait | --local]`; with FNVLP_DRY_RUN=1 it prints every
# sbatch line and every array task's config, and submits and writes nothing. --local runs the same
# jobs here without SLURM, one after another in the foreground (shard, each task as
# slurm/campaign_task.sh with SLURM_ARRAY_TASK_ID set, collect; logs in FNVLP_LOGS), for a machine
# whose SLURM is busy with other work; it exits non-zero when a cell failed.
# MATRIX.yaml (slurm/campaigns/): name, methods (slurm/methods.sh names or `custom` ones), seeds,
# concurrency (%N of the array), set (overrides for every task), custom (name -> overrides),
# env (FNVLP_* settings of the whole campaign, below).
# Jobs: shard (kept when the shards verify) -> array over methods x seeds (%A_%a; each task
# pretrains, then evaluates, into CAMPAIGN/tasks/<method>-s<seed>/) -> collect, afterany
# (results.csv, results.md with failed cells marked, fnvlp-report --campaign); --wait exits
# non-zero when a cell failed, after printing the table. Array index = method position *
# len(seeds) + seed position, written to CAMPAIGN/submissions/K/index.tsv (K = 1, 2, ... per
# submission) before anything is submitted; the array tasks read that file, so a later submission
# into the same campaign (other methods or seeds) leaves the cells of a queued one alone. A
# submission whose cells are still queued or running in an earlier one is refused (two jobs would
# train one run directory). CAMPAIGN/index.tsv lists the campaign's cells over all submissions
# (columns index, method, seed, submission), what the collect job and analysis/claims.py read.
# The matrix's env (optional): FNVLP_* settings of the whole campaign (FNVLP_DATA, FNVLP_STEPS, ...), exported
# before slurm/common.sh resolves its defaults, so the matrix alone defines what the campaign runs
# on; "{root}" in a value is the checkout. A variable already set in the environment wins (logged).
set -euo pipefail
FNVLP_ROOT=${FNVLP_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
if [ -f "${1:-}" ]; then
  matrix_env=$(/usr/bin/python3 - "$1" "$FNVLP_ROOT" <<'PY'
import re, sys, yaml
path, root = sys.argv[1:3]
try:
    env = (yaml.safe_load(open(path)) or {}).get("env") or {}
except (OSError, yaml.YAMLError) as e:
    sys.exit(f"{path}: cannot read the matrix: {e}")
if not isinstance(env, dict):
    sys.exit(f"{path}: 'env' must be a mapping of FNVLP_* variables")
for k, v in env.items():
    if not re.fullmatch(r"FNVLP_[A-Z0-9_]+", str(k)):
        sys.exit(f"{path}: env: '{k}' is not an FNVLP_* variable")
    if isinstance(v, (dict, list)) or v is None:
        sys.exit(f"{path}: env: {k} must be a scalar")
    v = str(v).lower() if isinstance(v, bool) else str(v)
    print(f"{k}={v.replace('{root}', root)}")
PY
  ) || {
    echo "fnvlp: error: bad matrix $1" >&2
    exit 1
  }
  while IFS= read -r kv; do
    [ -n "$kv" ] || continue
    var=${kv%%=*}
    if [ -n "$(printenv "$var" || true)" ]; then
      echo "fnvlp: $var=$(printenv "$var") from the environment, not the matrix's" >&2
    else
      export "${kv?}"
    fi
  done <<<"$matrix_env"
fi
# shellcheck source=slurm/common.sh
source "$FNVLP_ROOT/slurm/common.sh"
# shellcheck source=slurm/methods.sh
source "$FNVLP_ROOT/slurm/methods.sh"
# shellcheck source=slurm/pipeline.sh
source "$FNVLP_ROOT/slurm/pipeline.sh"

matrix=${1:?usage: slurm/ablation_campaign.sh MATRIX.yaml [--out DIR] [--methods a,b] [--wait]}
shift
[ -f "$matrix" ] || fnvlp_die "matrix not found: $matrix"
out="" methods_cli="" wait=0 local_run=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2 && shift 2 ;;
    --methods) methods_cli=$2 && shift 2 ;;
    --wait) wait=1 && shift ;;
    --local) local_run=1 && shift ;;
    *) fnvlp_die "unknown option $1" ;;
  esac
done
[ "$local_run" -eq 0 ] || ! fnvlp_dry_run || fnvlp_die "--local runs the cells; FNVLP_DRY_RUN=1 prints sbatch lines: choose one"

# The matrix, validated: name, then one line per method (name TAB custom overrides or "-").
parsed=$(/usr/bin/python3 - "$matrix" "$methods_cli" <<'PY'
import sys, yaml
path, cli = sys.argv[1], sys.argv[2]
try:
    m = yaml.safe_load(open(path))
except (OSError, yaml.YAMLError) as e:
    sys.exit(f"{path}: cannot read the matrix: {e}")
def need(key, kind):
    if not isinstance(m.get(key), kind):
        sys.exit(f"{path}: '{key}' missing or not a {kind.__name__}")
    return m[key]
need("name", str); need("methods", list); seeds = need("seeds", list)
if not seeds or not all(isinstance(s, int) for s in seeds):
    sys.exit(f"{path}: seeds must be a non-empty list of integers")
methods = cli.split(",") if cli else [str(x) for x in m["methods"]]
if len(set(methods)) != len(methods) or not methods:
    sys.exit(f"{path}: methods must be a non-empty list without repeats: {methods}")
custom = m.get("custom") or {}
print(m["name"], int(m.get("concurrency", 4)), " ".join(str(s) for s in seeds), sep="\t")
for name in methods:
    c = custom.get(name)
    print(name, " ".join(c) if c else "-", sep="\t")
PY
) || fnvlp_die "bad matrix $matrix"
IFS=$'\t' read -r name concurrency seeds <<<"$(head -1 <<<"$parsed")"
camp=${out:-$FNVLP_WORK/campaigns/$name}
# The campaign's files go to CAMP; in a dry run (FNVLP_DRY_RUN=1) to a scratch directory whose
# task configs are printed and removed, while the printed sbatch lines name CAMP.
files=$camp
if fnvlp_dry_run; then
  files=$(mktemp -d "${TMPDIR:-/tmp}/fnvlp-dry-campaign.XXXXXX")
  trap 'rm -rf "$files"' EXIT
fi
mkdir -p "$files/tasks"
if [ "$local_run" -eq 1 ]; then
  # Two local runs of one campaign would train the same run directories at once.
  exec 9>"$camp/.local.lock"
  flock -n 9 || fnvlp_die "campaign $name: another --local run holds $camp/.local.lock"
fi
cp "$matrix" "$files/matrix.yaml"
set_all=$(/usr/bin/python3 -c 'import sys,yaml; print(" ".join(yaml.safe_load(open(sys.argv[1])).get("set") or []))' "$matrix")

bins=(fnvlp-pretrain fnvlp-eval fnvlp-report)
fnvlp_check_stage_bins shard
for b in "${bins[@]}"; do
  [ -n "$(fnvlp_bin_path "$b")" ] && continue
  case " $FNVLP_SKIP_MISSING " in *" $b "*) continue ;; esac
  fnvlp_die "$b not built: the campaign needs it (cmake --build $FNVLP_BUILD_DIR --target $b)"
done

# Cells of an earlier submission still queued or running: refused before anything is written.
read -r -a seed_list <<<"$seeds"
cells=" "
while IFS=$'\t' read -r method _; do
  for seed in "${seed_list[@]}"; do cells+="$method-s$seed "; done
done < <(tail -n +2 <<<"$parsed")
busy=""
for old in "$camp"/submissions/*/jobs.tsv; do
  [ -f "$old" ] || continue
  old_array=$(awk -F'\t' '$1 == "array" {print $2}' "$old")
  if [ -z "$old_array" ] || ! fnvlp_jobs_active "$old_array"; then continue; fi
  while IFS=$'\t' read -r _ method seed; do
    case "$cells" in *" $method-s$seed "*) busy+=" $method-s$seed (array $old_array)" ;; esac
  done < <(tail -n +2 "${old%/jobs.tsv}/index.tsv")
done
[ -z "$busy" ] || fnvlp_die "campaign $name: cells still queued or running:$busy; wait for them or scancel, then resubmit"
sub=1
while [ -e "$camp/submissions/$sub" ]; do sub=$((sub + 1)); done
sub_dir=$camp/submissions/$sub
mkdir -p "$files/submissions/$sub"

# The submission's index.tsv and task.json files: the deterministic index <-> (method, seed) map.
printf 'index\tmethod\tseed\n' >"$files/submissions/$sub/index.tsv"
i=0
while IFS=$'\t' read -r method custom; do
  if [ "$custom" != - ]; then
    overrides=$custom
  else
    overrides=$(fnvlp_method_overrides "$method" | tr '\n' ' ') ||
      fnvlp_die "unknown method '$method' (slurm/methods.sh: ${FNVLP_METHODS[*]}; or define it under 'custom' in $matrix)"
  fi
  for seed in $seeds; do
    task=$files/tasks/$method-s$seed
    mkdir -p "$task"
    printf '%s\t%s\t%s\n' "$i" "$method" "$seed" >>"$files/submissions/$sub/index.tsv"
    # shellcheck disable=SC2086
    /usr/bin/python3 -c 'import json,sys; i,m,s=sys.argv[1:4]; print(json.dumps({"index":int(i),"method":m,"seed":int(s),"overrides":["train.seed="+s]+sys.argv[4:]}))' \
      "$i" "$method" "$seed" $overrides $set_all >"$task/task.json"
    i=$((i + 1))
  done
done < <(tail -n +2 <<<"$parsed")
n=$i
# The campaign's cells: the earlier list in its order (a resubmitted cell now names this
# submission), then this submission's new cells.
/usr/bin/python3 - "$files/index.tsv" "$files/submissions/$sub/index.tsv" "$sub" <<'PY'
import csv, os, sys
path, new, sub = sys.argv[1:4]
old = list(csv.DictReader(open(path), delimiter="\t")) if os.path.exists(path) else []
cells = {(r["method"], r["seed"]): r.get("submission", "") for r in old}
for r in csv.DictReader(open(new), delimiter="\t"):
    cells[(r["method"], r["seed"])] = sub
with open(path + ".tmp", "w") as f:
    f.write("index\tmethod\tseed\tsubmission\n")
    for i, ((m, s), k) in enumerate(cells.items()):
        f.write(f"{i}\t{m}\t{s}\t{k}\n")
os.replace(path + ".tmp", path)
PY
fnvlp_log "campaign $name: submission $sub, $n tasks ($sub_dir/index.tsv; all cells in $camp/index.tsv)"
if fnvlp_dry_run; then
  while IFS=$'\t' read -r i method seed; do
    echo "array task $i: $(cat "$files/tasks/$method-s$seed/task.json")" >&2
  done < <(tail -n +2 "$files/submissions/$sub/index.tsv")
fi

if [ "$local_run" -eq 1 ]; then
  # The array's jobs in order, here: no SLURM variables but the task index campaign_task.sh reads.
  mkdir -p "$FNVLP_LOGS"
  fnvlp_log "campaign $name: running $n tasks here (--local), logs $FNVLP_LOGS/fnvlp-camp-$name-local-${sub}_*.out"
  bash "$FNVLP_ROOT/slurm/step.sh" shard >"$FNVLP_LOGS/fnvlp-shard-$name-local-$sub.out" 2>&1 ||
    fnvlp_die "shard stage failed ($FNVLP_LOGS/fnvlp-shard-$name-local-$sub.out)"
  failed=""
  while IFS=$'\t' read -r i method seed; do
    log=$FNVLP_LOGS/fnvlp-camp-$name-local-${sub}_$i.out
    t0=$(date +%s)
    if SLURM_ARRAY_TASK_ID=$i bash "$FNVLP_ROOT/slurm/campaign_task.sh" "$camp" "$sub_dir/index.tsv" >"$log" 2>&1; then
      fnvlp_log "task $i ($method seed $seed) done in $(($(date +%s) - t0)) s"
    else
      failed+=" $method-s$seed"
      fnvlp_log "task $i ($method seed $seed) FAILED after $(($(date +%s) - t0)) s ($log)"
    fi
  done < <(tail -n +2 "$sub_dir/index.tsv")
  bash "$FNVLP_ROOT/slurm/campaign_collect.sh" "$camp" >"$FNVLP_LOGS/fnvlp-collect-$name-local-$sub.out" 2>&1 ||
    fnvlp_die "collect failed ($FNVLP_LOGS/fnvlp-collect-$name-local-$sub.out)"
  cat "$camp/results.md"
  [ -z "$failed" ] || fnvlp_die "campaign $name: failed cells:$failed (marked in $camp/results.md)"
  fnvlp_log "campaign $name completed (--local)"
  exit 0
fi

# Array tasks: pretraining resources (smoke: one node, FNVLP_RANKS tasks).
task_opts=(--job-name="fnvlp-camp-$name" --requeue --open-mode=append --signal=B:USR1@120)
if [ "$FNVLP_SCALE" = smoke ]; then
  task_opts+=(--nodes=1 --ntasks-per-node="$FNVLP_RANKS" --cpus-per-task=1 --gpus-per-node=0
    --mem="$FNVLP_MEM" --time="$FNVLP_TIME")
else
  task_opts+=(--nodes="${FNVLP_TASK_NODES:-1}" --ntasks-per-node="${FNVLP_TASK_RANKS_PER_NODE:-8}"
    --gpus-per-node="${FNVLP_TASK_GPUS_PER_NODE:-$FNVLP_GPUS_PER_NODE}" --cpus-per-task="${FNVLP_TASK_CPUS:-12}"
    --mem=0 --time="${FNVLP_TASK_TIME:-24:00:00}")
fi
read -r -a site <<<"${FNVLP_SBATCH_CAMPAIGN:-} ${FNVLP_SBATCH:-}"
shard_id=$(fnvlp_submit_stage shard "")
array_id=$(fnvlp_submit "${task_opts[@]}" "${site[@]}" --array="0-$((n - 1))%$concurrency" \
  "$(fnvlp_afterok "$shard_id")" "$FNVLP_ROOT/slurm/campaign_task.sh" "$camp" "$sub_dir/index.tsv")
read -r -a copts <<<"$(fnvlp_small_job_opts 1 "fnvlp-collect-$name")"
# afterany: the table is made whatever the tasks' outcome, failed cells marked in it.
collect_id=$(fnvlp_submit "${copts[@]}" "${site[@]}" "--dependency=afterany:$array_id" \
  "$FNVLP_ROOT/slurm/campaign_collect.sh" "$camp")
if fnvlp_dry_run; then
  fnvlp_log "dry run: nothing submitted, nothing written to $camp"
  exit 0
fi
printf 'shard\t%s\narray\t%s\ncollect\t%s\n' "$shard_id" "$array_id" "$collect_id" >"$sub_dir/jobs.tsv"
cp "$sub_dir/jobs.tsv" "$camp/jobs.tsv"
fnvlp_log "submitted shard $shard_id -> array $array_id (0-$((n - 1))%$concurrency) -> collect $collect_id"
fnvlp_log "results: $camp/results.md, $camp/results.csv, report $camp/report/"
if [ "$wait" -eq 1 ]; then
  # A failed shard job leaves the array and so the collect job waiting forever: cancelled.
  fnvlp_wait_jobs "$shard_id" || { scancel "$array_id" "$collect_id" 2>/dev/null || true; exit 1; }
  fnvlp_wait_jobs "$collect_id" || exit 1
  cat "$camp/results.md"
  # This submission's cells decide (the table also lists earlier submissions' cells).
  if ! /usr/bin/python3 - "$camp/results.csv" "$sub_dir/index.tsv" <<'PY'; then
import csv, sys
mine = {(r["method"], r["seed"]) for r in csv.DictReader(open(sys.argv[2]), delimiter="\t")}
sys.exit(any((r["method"], r["seed"]) in mine and r["status"].startswith("failed")
             for r in csv.DictReader(open(sys.argv[1]))))
PY
    fnvlp_die "campaign $name: failed cells (marked in $camp/results.md)"
  fi
  fnvlp_log "campaign $name completed"
fi
