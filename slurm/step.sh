#!/usr/bin/env bash
# One stage of the chain as a batch job: `sbatch [options] slurm/step.sh STAGE` with STAGE one of
#   shard    synthesize (smoke default) or gather the inputs, shard them, verify; a shard set that
#            already passes `fnvlp-shard --verify` is kept as it is
#   simstat  fnvlp-simstat on the run's newest embeddings (exact per-anchor thresholds, quantiles)
#   report   fnvlp-report on the run (+ simstat output): RUN/report/report.html
#   finetune fnvlp-finetune from the run's final checkpoint on the downstream train split
#   eval     fnvlp-eval of the fine-tuned (or, without fine-tuning, the pretrained) checkpoint
# Resources come from the submitter (slurm/pipeline.sh); settings from slurm/common.sh.
#SBATCH --job-name=fnvlp-step
#SBATCH --output=logs/%x-%j.out
set -euo pipefail
# sbatch runs a spool copy of this script: the checkout is found from the submitted command's path.
[ -n "${FNVLP_ROOT:-}" ] || [ -z "${SLURM_JOB_ID:-}" ] ||
  job_cmd=$(scontrol show job "$SLURM_JOB_ID" | sed -n 's/^ *Command=\([^ ]*\).*/\1/p')
FNVLP_ROOT=${FNVLP_ROOT:-$(cd "$(dirname "${job_cmd:-${BASH_SOURCE[0]}}")/.." && pwd)}
# shellcheck source=slurm/common.sh
source "$FNVLP_ROOT/slurm/common.sh"

stage=${1:?usage: slurm/step.sh shard|simstat|report|finetune|eval}
fnvlp_log_header "step $stage"
# The last line of a failed step's log says so (the pipeline's waiter shows the log's tail).
trap 'rc=$?; [ "$rc" -eq 0 ] || fnvlp_log "step $stage FAILED (exit $rc)"' EXIT

# Shard sets to build, one "OUT|INPUT|IMAGE_ROOT|SPLIT_FILE|SPLIT" per line.
shard_specs() {
  local d
  if [ "$FNVLP_SCALE" = smoke ]; then
    if [ "$FNVLP_DATA" = synthetic ]; then d=$FNVLP_WORK/synth; else d=$FNVLP_DATA; fi
    echo "$FNVLP_SHARDS_PRETRAIN|$d/captions.json|$d|$d/splits.json|train"
    echo "$FNVLP_SHARDS_VAL|$d/captions.json|$d|$d/splits.json|val"
  else
    echo "$FNVLP_SHARDS_PRETRAIN|$FNVLP_WORK/pretrain-4m.json|/||"
    d=$FNVLP_DOWNSTREAM
    echo "$FNVLP_SHARDS_FT_TRAIN|$d/captions.json|$d|$d/splits.json|train"
    echo "$FNVLP_SHARDS_FT_VAL|$d/captions.json|$d|$d/splits.json|${FNVLP_DOWNSTREAM_EVAL_SPLIT:-val}"
  fi
}

# ALBEF's pretraining JSONs each name images relative to their own root: one JSON with absolute
# paths lets a single fnvlp-shard run (and one pair_id space) cover the whole 4M set.
merge_4m() {
  local out=$FNVLP_WORK/pretrain-4m.json
  [ -s "$out" ] && return 0
  # shellcheck disable=SC2086
  /usr/bin/python3 - "$out" $FNVLP_DATA <<'PY'
import json, os, sys
out, items = sys.argv[1], sys.argv[2:]
records = []
for item in items:
    path, _, root = item.partition(":")
    if not root:
        sys.exit(f"merge_4m: FNVLP_DATA item {item!r} is not JSON:IMAGE_ROOT")
    try:
        recs = json.load(open(path))
    except (OSError, ValueError) as e:
        sys.exit(f"merge_4m: cannot read {path}: {e}")
    for i, r in enumerate(recs):
        if "image" not in r:
            sys.exit(f"merge_4m: {path} record {i} has no 'image' key")
        r = dict(r)
        r["image"] = os.path.join(root, r["image"])
        records.append(r)
    print(f"merge_4m: {path}: {len(recs)} records")
tmp = out + ".tmp"
json.dump(records, open(tmp, "w"))
os.replace(tmp, out)
print(f"merge_4m: {len(records)} records -> {out}")
PY
}

# Shards of another codec than FNVLP_IMAGE_CODEC are made again (manifests without one are raw).
verify_ok() {
  [ -f "$1/manifest.json" ] || return 1
  local codec
  codec=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("image_codec", "raw"))' \
    "$1/manifest.json" 2>/dev/null) || codec=unreadable
  if [ "$codec" != "$FNVLP_IMAGE_CODEC" ]; then
    fnvlp_log "shards $1 are $codec, FNVLP_IMAGE_CODEC is $FNVLP_IMAGE_CODEC: sharded again"
    return 1
  fi
  fnvlp_run_ranks "$FNVLP_SHARD_RANKS" "$shard_bin" --verify "$1"
}

stage_shard() {
  shard_bin=$(fnvlp_bin fnvlp-shard)
  [ -f "$FNVLP_VOCAB" ] || fnvlp_die "WordPiece vocabulary not found: $FNVLP_VOCAB (set FNVLP_VOCAB)"
  if [ "$FNVLP_SCALE" = smoke ] && [ "$FNVLP_DATA" = synthetic ] &&
    [ ! -s "$FNVLP_WORK/synth/splits.json" ]; then
    fnvlp_run_ranks "$FNVLP_SHARD_RANKS" "$(fnvlp_bin fnvlp-synth)" --out "$FNVLP_WORK/synth" \
      --images "$FNVLP_SYNTH_IMAGES" --captions-per-image 5 --classes "$FNVLP_SYNTH_CLASSES" \
      --image-size "$FNVLP_IMAGE_SIZE" --seed 1 --val-fraction 0.2
  fi
  [ "$FNVLP_SCALE" = smoke ] || merge_4m
  local out input root splits split seen=" "
  local -a extra
  while IFS='|' read -r out input root splits split; do
    case "$seen" in *" $out "*) continue ;; esac
    seen="$seen$out "
    if verify_ok "$out"; then
      fnvlp_log "shards $out pass --verify: kept"
      continue
    fi
    [ -f "$input" ] || fnvlp_die "shard input not found: $input (FNVLP_DATA=$FNVLP_DATA)"
    extra=()
    [ -z "$splits" ] || extra+=(--split-file "$splits" --split "$split")
    rm -rf "$out"
    fnvlp_run_ranks "$FNVLP_SHARD_RANKS" "$shard_bin" --input "$input" --format albef \
      --image-root "$root" "${extra[@]}" --vocab "$FNVLP_VOCAB" --out "$out" \
      --image-size "$FNVLP_IMAGE_SIZE" --image-codec "$FNVLP_IMAGE_CODEC" \
      --max-side "$FNVLP_MAX_SIDE" --max-len 30 --shard-size "$FNVLP_SHARD_SIZE" \
      ${FNVLP_MAX_REJECT:+--max-reject-fraction "$FNVLP_MAX_REJECT"}
    fnvlp_run_ranks "$FNVLP_SHARD_RANKS" "$shard_bin" --verify "$out"
  done < <(shard_specs)
}

newest_embeddings() {
  local f
  f=$(fnvlp_newest_embeddings "$FNVLP_RUN")
  [ -n "$f" ] || fnvlp_die "no embeddings in $FNVLP_RUN/embeddings (did pretraining finish?)"
  echo "$f"
}

stage_simstat() {
  fnvlp_have_or_skip fnvlp-simstat || return 0
  local emb
  local -a lam=()
  emb=$(newest_embeddings)
  # GloFND's learned thresholds are compared with the exact ones when the run exported them.
  if fnvlp_has_lambda "$emb"; then lam=(--lambda-from "$FNVLP_RUN"); fi
  # On the GPUs of this job where the build's kernels run on a device (the submitter asked for
  # them: fnvlp_stage_opts), else on CPU ranks; a device build in a job without GPUs is an error
  # here, not Kokkos's abort in every rank.
  local at where ranks why gpus gwhy
  at=$(fnvlp_simstat_where) || exit 1
  read -r where ranks why <<<"$at"
  if [ "$where" = gpu ]; then
    read -r gpus gwhy <<<"$(fnvlp_alloc_gpus)"
    [ "$gpus" -gt 0 ] || fnvlp_die "$why, and this job has no GPU ($gwhy): submit it with GPUs (slurm/pipeline.sh does)"
    fnvlp_log "simstat on $ranks GPUs ($gpus per node; $why)"
  else
    fnvlp_log "simstat on $ranks CPU ranks ($why)"
  fi
  mkdir -p "$FNVLP_RUN/analysis"
  fnvlp_run_ranks "$ranks" "$(fnvlp_bin fnvlp-simstat)" --embeddings "$emb" \
    --out "$FNVLP_RUN/analysis/simstat.h5" --alpha "$FNVLP_FN_ALPHA" "${lam[@]}" \
    --json "$FNVLP_RUN/analysis/simstat.json"
}

stage_report() {
  fnvlp_have_or_skip fnvlp-report || return 0
  local -a stats=()
  [ ! -f "$FNVLP_RUN/analysis/simstat.h5" ] || stats=(--stats "$FNVLP_RUN/analysis/simstat.h5")
  "$(fnvlp_bin fnvlp-report)" --run "$FNVLP_RUN" "${stats[@]}" --out "$FNVLP_RUN/report"
  fnvlp_log "report: $FNVLP_RUN/report/report.html"
}

stage_finetune() {
  fnvlp_have_or_skip fnvlp-finetune || return 0
  local bin
  local -a args
  bin=$(fnvlp_bin fnvlp-finetune)
  [ -f "$FNVLP_FT_CONFIG" ] || fnvlp_die "fine-tuning config not found: $FNVLP_FT_CONFIG (set FNVLP_FT_CONFIG)"
  [ -d "$FNVLP_RUN/checkpoints/latest" ] || fnvlp_die "no final checkpoint in $FNVLP_RUN/checkpoints/latest"
  args=(--config "$FNVLP_FT_CONFIG" --init "$FNVLP_RUN/checkpoints/latest"
    --data "$FNVLP_SHARDS_FT_TRAIN" --val "$FNVLP_SHARDS_FT_VAL" --out "$FNVLP_WORK/finetune")
  if "$bin" --help 2>&1 | grep -- '--resume' >/dev/null; then args+=(--resume auto); fi
  local dev
  dev=$(fnvlp_device_overrides) || exit 1
  fnvlp_log "device: $dev"
  for kv in $dev; do args+=(--set "$kv"); done
  for kv in $(fnvlp_thread_overrides); do args+=(--set "$kv"); done
  [ -z "$FNVLP_FT_STEPS" ] || args+=(--set "train.max_steps=$FNVLP_FT_STEPS")
  [ -z "$FNVLP_BATCH" ] || args+=(--set "train.batch_size=$FNVLP_BATCH")
  for kv in $FNVLP_FT_SET; do args+=(--set "$kv"); done
  # The job's CPUs per rank reach the srun step (fnvlp_pretrain says why).
  if [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then local -x SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK; fi
  fnvlp_run_ranks "$FNVLP_RANKS" "$bin" "${args[@]}"
}

stage_eval() {
  fnvlp_have_or_skip fnvlp-eval || return 0
  local ckpt=${FNVLP_EVAL_CHECKPOINT:-}
  if [ -z "$ckpt" ]; then
    # Fine-tuning's best by validation (store/best.hpp: RUN/best/latest), else its last.
    for ckpt in "$FNVLP_WORK/finetune/best/latest" "$FNVLP_WORK/finetune/checkpoints/latest" \
      "$FNVLP_RUN/checkpoints/latest"; do
      [ -d "$ckpt" ] && break
    done
  fi
  [ -d "$ckpt" ] || fnvlp_die "no checkpoint to evaluate (looked in $FNVLP_WORK/finetune and $FNVLP_RUN)"
  fnvlp_run_ranks "$FNVLP_ANALYSIS_RANKS" "$(fnvlp_bin fnvlp-eval)" --checkpoint "$ckpt" \
    --data "$FNVLP_SHARDS_FT_VAL" --out "${FNVLP_EVAL_OUT:-$FNVLP_WORK/eval.json}" --k-test "$FNVLP_K_TEST"
}

case "$stage" in
  shard | simstat | report | finetune | eval) "stage_$stage" ;;
  *) fnvlp_die "unknown stage '$stage' (shard, simstat, report, finetune, eval)" ;;
esac
fnvlp_log "step $stage done"
