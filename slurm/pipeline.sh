#!/usr/bin/env bash
# The chain shard -> pretrain -> simstat -> report -> finetune -> eval as SLURM jobs, each
# submitted with `sbatch --parsable` and --dependency=afterok on the one before, so that a failed
# stage leaves its dependents pending with DependencyNeverSatisfied (they never run).
#
#   bash slurm/pipeline.sh submit [--wait]   submit the chain (FNVLP_STAGES, default all six);
#                                            with --wait, wait for it and exit non-zero with the
#                                            reason when a stage fails
#   FNVLP_DRY_RUN=1 bash slurm/pipeline.sh submit
#                                            print every sbatch line of the chain, submit nothing
#   bash slurm/pipeline.sh wait [--job ID]   wait for the chain recorded in $FNVLP_WORK/chain.tsv
#                                            (with --job: the chain that job ID submits, e.g. a
#                                            hand-submitted slurm/pretrain_4m.sh)
# Settings: slurm/common.sh (FNVLP_SCALE=smoke for minutes on one machine). The job ids of the
# chain are written to $FNVLP_WORK/chain.tsv (stage, job id). Also sourced by pretrain_4m.sh.
set -euo pipefail
if ! declare -F fnvlp_log >/dev/null; then # run as a command, not sourced by a script
  FNVLP_ROOT=${FNVLP_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
  # shellcheck source=slurm/common.sh
  source "$FNVLP_ROOT/slurm/common.sh"
fi

fnvlp_stage_wanted() { case " $FNVLP_STAGES " in *" $1 "*) return 0 ;; *) return 1 ;; esac }

# Executables a stage needs.
fnvlp_stage_bins() {
  case "$1" in
    shard)
      echo fnvlp-shard
      if [ "$FNVLP_SCALE" = smoke ] && [ "$FNVLP_DATA" = synthetic ]; then echo fnvlp-synth; fi
      ;;
    pretrain) echo fnvlp-pretrain ;;
    simstat | report | finetune | eval) echo "fnvlp-$1" ;;
    *) fnvlp_die "unknown stage '$1' in FNVLP_STAGES (shard pretrain simstat report finetune eval)" ;;
  esac
}

# Fails before anything is submitted when a stage's executable is not built (unless the tool is
# allowed to be missing: FNVLP_SKIP_MISSING).
fnvlp_check_stage_bins() {
  local s b
  for s in "$@"; do
    for b in $(fnvlp_stage_bins "$s"); do
      [ -n "$(fnvlp_bin_path "$b")" ] && continue
      case " $FNVLP_SKIP_MISSING " in *" $b "*) continue ;; esac
      fnvlp_die "$b not built: stage '$s' of FNVLP_STAGES=\"$FNVLP_STAGES\" needs it (build it with cmake --build $FNVLP_BUILD_DIR --target $b, or leave the stage out)"
    done
  done
}

# Every shard set the stages read passes `fnvlp-shard --verify`.
fnvlp_shards_ok() {
  local d bin=""
  for d in $(printf '%s\n' "$FNVLP_SHARDS_PRETRAIN" "$FNVLP_SHARDS_VAL" "$FNVLP_SHARDS_FT_TRAIN" \
    "$FNVLP_SHARDS_FT_VAL" | sort -u); do
    [ -f "$d/manifest.json" ] || return 1
    if fnvlp_dry_run; then
      fnvlp_log "dry run: $d has a manifest; its shards are not verified here"
      continue
    fi
    [ -n "$bin" ] || bin=$(fnvlp_bin fnvlp-shard)
    fnvlp_run_ranks "$FNVLP_SHARD_RANKS" "$bin" --verify "$d" || return 1
  done
}

# sbatch options of a stage's job. The training stages (pretrain, finetune) ask for GPUs:
# FNVLP_GPUS_PER_NODE per node, one rank each (fnvlp_gpu_job_opts); 0 (CPU clusters, smoke by
# default) keeps them on CPUs. simstat asks for FNVLP_ANALYSIS_GPUS GPUs where its build runs on
# one (fnvlp_simstat_where). At 4m the pretraining job's time, memory and (without GPUs) layout
# are its #SBATCH lines.
fnvlp_stage_opts() {
  case "$1" in
    shard) fnvlp_small_job_opts "$FNVLP_SHARD_RANKS" fnvlp-shard ;;
    simstat)
      local at where ranks
      at=$(fnvlp_simstat_where) || exit 1
      read -r where ranks _ <<<"$at"
      if [ "$where" = gpu ]; then
        echo "--job-name=fnvlp-simstat --mem=$FNVLP_MEM --time=$FNVLP_ANALYSIS_GPU_TIME"
        fnvlp_gpu_job_opts "$ranks"
      else
        fnvlp_small_job_opts "$ranks" fnvlp-simstat
      fi
      ;;
    eval) fnvlp_small_job_opts "$FNVLP_ANALYSIS_RANKS" fnvlp-eval ;;
    report) fnvlp_small_job_opts 1 fnvlp-report ;;
    finetune)
      if [ "$FNVLP_GPUS_PER_NODE" -eq 0 ]; then
        fnvlp_small_job_opts "$FNVLP_RANKS" fnvlp-finetune
      else
        echo "--job-name=fnvlp-finetune --mem=$FNVLP_MEM --time=$FNVLP_TIME"
        fnvlp_gpu_job_opts "$FNVLP_RANKS"
      fi
      ;;
    pretrain)
      echo "--job-name=fnvlp-pretrain"
      if [ "$FNVLP_GPUS_PER_NODE" -gt 0 ]; then
        fnvlp_gpu_job_opts "$FNVLP_RANKS"
        [ "$FNVLP_SCALE" = 4m ] || echo "--mem=$FNVLP_MEM --time=$FNVLP_TIME"
      elif [ "$FNVLP_SCALE" = smoke ]; then
        [ $((FNVLP_RANKS % FNVLP_NODES)) -eq 0 ] ||
          fnvlp_die "FNVLP_RANKS=$FNVLP_RANKS does not spread evenly over FNVLP_NODES=$FNVLP_NODES nodes"
        echo "--nodes=$FNVLP_NODES --ntasks-per-node=$((FNVLP_RANKS / FNVLP_NODES)) --cpus-per-task=1 --gpus-per-node=0 --mem=$FNVLP_MEM --time=$FNVLP_TIME"
      else
        echo "--gpus-per-node=0" # the #SBATCH line asks for 8
      fi
      ;;
  esac
  # Site additions per stage, e.g. FNVLP_SBATCH_PRETRAIN="--partition=gpu --account=abc".
  local var
  var=FNVLP_SBATCH_$(tr '[:lower:]' '[:upper:]' <<<"$1")
  echo "${!var:-} ${FNVLP_SBATCH:-}"
}

# Submits `stage` after job `dep` (empty: no dependency); prints the job id.
fnvlp_submit_stage() {
  local stage=$1 dep=$2 o
  local -a opts
  # (A stage whose options cannot be made, e.g. ranks that do not fill the nodes, is not submitted.)
  o=$(fnvlp_stage_opts "$stage") || exit 1
  if [ "$stage" = simstat ]; then
    local at where ranks why
    at=$(fnvlp_simstat_where) || exit 1
    read -r where ranks why <<<"$at"
    # (stderr: this function's output is the job id)
    fnvlp_log "simstat on $ranks $([ "$where" = gpu ] && echo GPUs || echo "CPU ranks"): $why" >&2
  fi
  read -r -a opts <<<"$(tr '\n' ' ' <<<"$o")"
  [ -z "$dep" ] || opts+=("$(fnvlp_afterok "$dep")")
  if [ "$stage" = pretrain ]; then
    fnvlp_submit "${opts[@]}" --export=ALL,FNVLP_STAGE=pretrain "$FNVLP_ROOT/slurm/pretrain_4m.sh"
  else
    fnvlp_submit "${opts[@]}" "$FNVLP_ROOT/slurm/step.sh" "$stage"
  fi
}

# Submits `stages...` as a chain, the first after job `dep`; records them in the chain being built.
fnvlp_submit_stages() {
  local dep=$1 s id
  shift
  for s in "$@"; do
    id=$(fnvlp_submit_stage "$s" "$dep")
    printf '%s\t%s\n' "$s" "$id" >>"$FNVLP_CHAIN_PARTIAL"
    fnvlp_log "submitted $s: job $id${dep:+ (afterok:$dep)}"
    dep=$id
  done
}

# chain.tsv appears only once every stage is submitted (built aside, then renamed): a waiter that
# read it half-written would wait for the first jobs only and call the chain completed while
# later stages still run.
fnvlp_chain_start() {
  FNVLP_CHAIN_PARTIAL=/dev/null
  fnvlp_dry_run && return 0
  mkdir -p "$FNVLP_WORK" "$FNVLP_LOGS"
  FNVLP_CHAIN_PARTIAL=$FNVLP_WORK/.chain.tsv.$$
  printf 'entry\t%s\n' "${SLURM_JOB_ID:-none}" >"$FNVLP_CHAIN_PARTIAL"
}

fnvlp_chain_publish() { fnvlp_dry_run || mv -f "$FNVLP_CHAIN_PARTIAL" "$FNVLP_WORK/chain.tsv"; }

# The whole chain (FNVLP_STAGES).
fnvlp_submit_chain() {
  local -a stages
  read -r -a stages <<<"$FNVLP_STAGES"
  fnvlp_check_stage_bins "${stages[@]}"
  fnvlp_chain_start
  fnvlp_submit_stages "" "${stages[@]}"
  fnvlp_chain_publish
}

# The stages after pretraining, after job `pid` (the running pretrain_4m.sh job itself).
fnvlp_submit_chain_after_pretrain() {
  local pid=$1 s after=0
  local -a rest=()
  for s in $FNVLP_STAGES; do
    if [ "$after" -eq 1 ]; then rest+=("$s"); fi
    [ "$s" != pretrain ] || after=1
  done
  fnvlp_check_stage_bins pretrain "${rest[@]}"
  fnvlp_chain_start
  printf 'pretrain\t%s\n' "$pid" >>"$FNVLP_CHAIN_PARTIAL"
  [ "${#rest[@]}" -eq 0 ] || fnvlp_submit_stages "$pid" "${rest[@]}"
  fnvlp_chain_publish
}

# Waits for every job of chain.tsv; with `entry_id`, first for that job to write it.
fnvlp_wait_chain() {
  local entry=${1:-} t0 ids
  local f=$FNVLP_WORK/chain.tsv
  t0=$(date +%s)
  if [ -n "$entry" ]; then
    fnvlp_log "waiting for job $entry to record its chain in $f"
    until [ -f "$f" ] && grep -q "^entry	$entry\$" "$f"; do
      if ! scontrol show job -o "$entry" 2>/dev/null | grep -E 'JobState=(PENDING|RUNNING|CONFIGURING|REQUEUED)' >/dev/null; then
        # It ended without writing a chain: report why.
        fnvlp_wait_jobs "$entry" || return 1
        grep -q "^entry	$entry\$" "$f" 2>/dev/null || fnvlp_die "job $entry ended without submitting a chain (see its log)"
        break
      fi
      [ $(($(date +%s) - t0)) -lt "${FNVLP_WAIT_TIMEOUT:-3600}" ] || fnvlp_die "job $entry: no chain after ${FNVLP_WAIT_TIMEOUT:-3600}s"
      sleep "${FNVLP_WAIT_POLL:-3}"
    done
  fi
  [ -f "$f" ] || fnvlp_die "no chain recorded in $f"
  # Every job the chain holds (the entry too, when it is a job).
  ids=$(awk -F'\t' '$2 != "none" {print $2}' "$f" | sort -u | tr '\n' ' ')
  fnvlp_log "waiting for jobs: $ids"
  # shellcheck disable=SC2086
  fnvlp_wait_jobs $ids || return 1
  fnvlp_log "chain completed: $(awk -F'\t' '{printf "%s=%s ", $1, $2}' "$f")"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  cmd=${1:-}
  shift || true
  case "$cmd" in
    submit)
      fnvlp_submit_chain
      if fnvlp_dry_run; then
        if [ "$FNVLP_GPUS_PER_NODE" -eq 0 ]; then dev=cpu; else dev=cuda; fi
        fnvlp_log "dry run: $(fnvlp_step_summary "$dev")"
        fnvlp_log "dry run: nothing submitted"
      elif [ "${1:-}" = --wait ]; then
        fnvlp_wait_chain
      fi
      ;;
    wait)
      if [ "${1:-}" = --job ]; then fnvlp_wait_chain "${2:?--job needs a job id}"; else fnvlp_wait_chain; fi
      ;;
    *)
      echo "usage: $0 submit [--wait] | wait [--job ID]" >&2
      exit 2
      ;;
  esac
fi
