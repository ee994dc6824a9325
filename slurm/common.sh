# shellcheck shell=bash
# Sourced by every script in slurm/: resolved settings, logging, the rank launcher, sbatch helpers
# and the job waiter. ARCHITECTURE.md §12: set -euo pipefail, logs/%x-%j.out, the git commit in every
# log, srun --mpi=pmix (mpirun fallback), sbatch --parsable + --dependency=afterok:ID.
#
# Every size, path and resource is an environment variable with a default that depends on
# FNVLP_SCALE (4m: the real cluster job; smoke: minutes on one small machine). The submitting
# helpers export them, so the jobs of a chain see the settings of the command that started it.

: "${FNVLP_ROOT:?set FNVLP_ROOT before sourcing slurm/common.sh}"
export FNVLP_ROOT
# Every job launches or prepares MPI ranks: the settings they need on this kind of machine.
# shellcheck source=env/mpi-env.sh
source "$FNVLP_ROOT/env/mpi-env.sh"

fnvlp_die() {
  echo "fnvlp: error: $*" >&2
  exit 1
}
# A dry run (FNVLP_DRY_RUN=1) logs to stderr, in order with the sbatch lines it prints there.
fnvlp_log() {
  if [ "${FNVLP_DRY_RUN:-0}" = 1 ]; then
    echo "[$(date -u +%FT%TZ)] $*" >&2
  else
    echo "[$(date -u +%FT%TZ)] $*"
  fi
}

# Clients need the local cluster's config when no system-wide one exists (env/local-slurm.sh).
if [ -z "${SLURM_CONF:-}" ] && [ ! -f /etc/slurm/slurm.conf ] &&
  [ -f "${FNVLP_SLURM_DIR:-/var/tmp/fnvlp-slurm}/etc/slurm.conf" ]; then
  export SLURM_CONF=${FNVLP_SLURM_DIR:-/var/tmp/fnvlp-slurm}/etc/slurm.conf
fi

# GPUs the job's allocation gives this node, as "COUNT WHY" (COUNT 0: none; WHY the variable that
# says so). SLURM's own variables first: SLURM_GPUS_ON_NODE (the job's GPUs on this node),
# SLURM_JOB_GPUS (their ids), SLURM_GPUS_PER_NODE (the request, [type:]count[,...]; 0 with
# --gpus-per-node=0), so that a CUDA_VISIBLE_DEVICES inherited from the submitting shell cannot
# outvote a GPU-less allocation; then CUDA_VISIBLE_DEVICES (GPUs that are not SLURM GRES, or no
# SLURM at all; empty, NoDevFiles or -1: none).
fnvlp_alloc_gpus() {
  local v item n=0
  local -a ids
  if [ -n "${SLURM_GPUS_ON_NODE:-}" ]; then
    v=${SLURM_GPUS_ON_NODE//[!0-9]/}
    echo "$((10#${v:-0})) SLURM_GPUS_ON_NODE=$SLURM_GPUS_ON_NODE"
  elif [ -n "${SLURM_JOB_GPUS:-}" ]; then
    IFS=, read -r -a ids <<<"$SLURM_JOB_GPUS"
    echo "${#ids[@]} SLURM_JOB_GPUS=$SLURM_JOB_GPUS"
  elif [ -n "${SLURM_GPUS_PER_NODE:-}" ]; then
    IFS=, read -r -a ids <<<"$SLURM_GPUS_PER_NODE"
    for item in "${ids[@]}"; do
      v=${item##*:}
      v=${v//[!0-9]/}
      n=$((n + 10#${v:-0}))
    done
    echo "$n SLURM_GPUS_PER_NODE=$SLURM_GPUS_PER_NODE"
  elif [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
    case "$CUDA_VISIBLE_DEVICES" in
      "" | NoDevFiles* | -*) ;;
      *)
        IFS=, read -r -a ids <<<"$CUDA_VISIBLE_DEVICES"
        n=${#ids[@]}
        ;;
    esac
    echo "$n CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"
  else
    echo "0 none of SLURM_GPUS_ON_NODE, SLURM_JOB_GPUS, SLURM_GPUS_PER_NODE, CUDA_VISIBLE_DEVICES is set"
  fi
}

# The job's CPUs per rank become the rank's threads (train.threads: augmentation on the loader
# thread, fnvlp's and libtorch's CPU loops), as "train.threads=N"; nothing outside a job with
# --cpus-per-task. The callers pass it before FNVLP_PRETRAIN_SET / FNVLP_FT_SET, whose
# train.threads wins.
fnvlp_thread_overrides() {
  [ -z "${SLURM_CPUS_PER_TASK:-}" ] || printf 'train.threads=%s\n' "$SLURM_CPUS_PER_TASK"
}

# The --set overrides (key=value, space-separated) that put the training ranks on this
# allocation's device: GPUs (fnvlp_alloc_gpus) give "train.device=cuda comm.backend=nccl"; none
# give "train.device=cpu comm.backend=mpi" and one line on stderr saying so. FNVLP_DEVICE=cpu or
# cuda forces the choice; FNVLP_PRECISION adds train.precision (on CUDA; fp32 only on the CPU,
# where another value is dropped with a line on stderr). The callers pass these before
# FNVLP_PRETRAIN_SET / FNVLP_FT_SET, whose keys win (e.g. comm.backend=mpi for a build without
# NCCL).
fnvlp_device_overrides() {
  local gpus why dev
  read -r gpus why <<<"$(fnvlp_alloc_gpus)"
  case "$FNVLP_DEVICE" in
    cpu)
      dev=cpu
      echo "fnvlp: FNVLP_DEVICE=cpu: training on CPU with MPI (allocation: $gpus GPUs, $why)" >&2
      ;;
    cuda)
      dev=cuda
      [ "$gpus" -gt 0 ] ||
        echo "fnvlp: FNVLP_DEVICE=cuda though the allocation shows no GPU ($why): training on CUDA with NCCL" >&2
      ;;
    auto)
      if [ "$gpus" -gt 0 ]; then
        dev=cuda
      else
        dev=cpu
        echo "fnvlp: no GPU in this allocation ($why): training on CPU with MPI" >&2
      fi
      ;;
    *) fnvlp_die "FNVLP_DEVICE=$FNVLP_DEVICE: expected auto, cpu or cuda" ;;
  esac
  if [ "$dev" = cuda ]; then
    printf 'train.device=cuda comm.backend=nccl'
  else
    printf 'train.device=cpu comm.backend=mpi'
  fi
  case "$dev:${FNVLP_PRECISION:-}" in
    *:) ;;
    cuda:* | cpu:fp32) printf ' train.precision=%s' "$FNVLP_PRECISION" ;;
    # bf16 autocast is a CUDA path (fnvlp-pretrain refuses it on the CPU): fp32 there, said so.
    cpu:*) echo "fnvlp: FNVLP_PRECISION=$FNVLP_PRECISION is for GPUs: fp32 on the CPU" >&2 ;;
  esac
  echo
}

# The pretraining job's method and step as --set overrides, one key=value per line:
# FNVLP_METHOD's overlay (slurm/methods.sh; none: nothing), FNVLP_EPOCHS, GloFND's start epoch
# (FNVLP_GLOFND_START, default 40% of FNVLP_EPOCHS: GloFND's protocol) where the method filters
# with GloFND, and for DEVICE (cuda or cpu) the step: on cuda FNVLP_STEP_MODE (graphs:
# train.cuda_graphs; static: train.static_step) and train.precision (FNVLP_PRECISION, else bf16);
# on the CPU the eager fp32 step (FNVLP_PRECISION fp32 only: fnvlp_device_overrides).
fnvlp_step_overrides() {
  local dev=$1 kv glofnd=0
  if [ "$FNVLP_METHOD" != none ]; then
    # shellcheck source=slurm/methods.sh
    source "$FNVLP_ROOT/slurm/methods.sh"
    local overrides
    overrides=$(fnvlp_method_overrides "$FNVLP_METHOD") ||
      fnvlp_die "FNVLP_METHOD=$FNVLP_METHOD: no jobs/configs/methods/$FNVLP_METHOD.yaml (or none)"
    for kv in $overrides; do
      echo "$kv"
      [ "$kv" != negatives.method=glofnd ] || glofnd=1
    done
  fi
  if [ -n "$FNVLP_EPOCHS" ]; then
    echo "train.epochs=$FNVLP_EPOCHS"
    [ "$glofnd" -eq 0 ] || echo "negatives.start_epoch=${FNVLP_GLOFND_START:-$((FNVLP_EPOCHS * 2 / 5))}"
  fi
  if [ "$dev" = cuda ]; then
    [ -n "$FNVLP_PRECISION" ] || echo "train.precision=bf16"
    case "$FNVLP_STEP_MODE" in
      graphs) echo "train.cuda_graphs=true" ;;
      static) echo "train.static_step=true" ;;
    esac
  fi
}

# FNVLP_INIT's files, one per line; dies naming the first that is not a readable file.
fnvlp_init_files() {
  local f
  for f in $FNVLP_INIT; do
    if [ ! -f "$f" ] || [ ! -r "$f" ]; then fnvlp_die "FNVLP_INIT: $f is not a readable file"; fi
    echo "$f"
  done
}

# One line saying what fnvlp_step_overrides gives for DEVICE: the method, precision and step.
fnvlp_step_summary() {
  local dev=$1 all precision=fp32 step=eager
  all=$(fnvlp_step_overrides "$dev" | tr '\n' ' ')
  case " $all " in *" train.precision=bf16 "*) precision=bf16 ;; esac
  [ "$dev" != cuda ] || [ -z "$FNVLP_PRECISION" ] || precision=$FNVLP_PRECISION
  case " $all " in
    *" train.cuda_graphs=true "*) step="static step in CUDA graphs" ;;
    *" train.static_step=true "*) step="static step" ;;
    *) step="eager step" ;;
  esac
  echo "pretraining: method $FNVLP_METHOD, $precision, $step on $dev (${all% })"
}

# ---------------------------------------------------------------------------------------------
# Settings (all overridable from the environment).
export FNVLP_SCALE=${FNVLP_SCALE:-4m}
case "$FNVLP_SCALE" in
  4m | smoke) ;;
  *) fnvlp_die "FNVLP_SCALE=$FNVLP_SCALE: expected 4m or smoke" ;;
esac
export FNVLP_BUILD_DIR=${FNVLP_BUILD_DIR:-$FNVLP_ROOT/build}
export FNVLP_SHARED_DIR=${FNVLP_SHARED_DIR:-$FNVLP_ROOT/../shared}
export FNVLP_VOCAB=${FNVLP_VOCAB:-$FNVLP_SHARED_DIR/data/vocab/bert-base-uncased-vocab.txt}
export FNVLP_WORK=${FNVLP_WORK:-$FNVLP_ROOT/work/$FNVLP_SCALE}
export FNVLP_LOGS=${FNVLP_LOGS:-$FNVLP_WORK/logs}
export FNVLP_RUN=${FNVLP_RUN:-$FNVLP_WORK/run}
# Stages the chain runs, in order (a subset keeps the order: FNVLP_STAGES="shard pretrain").
export FNVLP_STAGES=${FNVLP_STAGES:-shard pretrain simstat report finetune eval}
# Tools that may be missing: their stage logs SKIPPED and succeeds (campaign evaluation falls
# back to the last zero-shot validation record of the pretraining run). Empty: missing = failure.
export FNVLP_SKIP_MISSING=${FNVLP_SKIP_MISSING:-}
# Nodes of the smoke pretraining job and of every stage job with several ranks (each job spreads
# its ranks over min(ranks, FNVLP_NODES) nodes; the pretraining ranks must divide evenly). At 4m
# the pretraining job's nodes are its #SBATCH lines.
export FNVLP_NODES=${FNVLP_NODES:-1}
case "$FNVLP_NODES" in '' | *[!0-9]* | 0) fnvlp_die "FNVLP_NODES=$FNVLP_NODES: expected a positive node count" ;; esac
# Launcher: auto (srun --mpi=pmix inside an allocation when pmix is offered, else mpirun),
# srun or mpirun.
export FNVLP_LAUNCHER=${FNVLP_LAUNCHER:-auto}
# Device of the training ranks (pretraining, fine-tuning): auto (CUDA with NCCL when the job's
# allocation has GPUs, else CPU with MPI, logged: fnvlp_device_overrides), cpu or cuda.
export FNVLP_DEVICE=${FNVLP_DEVICE:-auto}
case "$FNVLP_DEVICE" in
  auto | cpu | cuda) ;;
  *) fnvlp_die "FNVLP_DEVICE=$FNVLP_DEVICE: expected auto, cpu or cuda" ;;
esac
# train.precision of the training ranks (fp32, bf16); empty: the config's (fp32 unless it says),
# and bf16 for pretraining on GPUs (fnvlp_step_overrides).
export FNVLP_PRECISION=${FNVLP_PRECISION:-}
# The pretraining step on GPUs (fnvlp_step_overrides): graphs (train.cuda_graphs: the static step
# captured in CUDA graphs), static (train.static_step) or eager; the CPU trains eager.
export FNVLP_STEP_MODE=${FNVLP_STEP_MODE:-graphs}
case "$FNVLP_STEP_MODE" in
  graphs | static | eager) ;;
  *) fnvlp_die "FNVLP_STEP_MODE=$FNVLP_STEP_MODE: expected graphs, static or eager" ;;
esac

if [ "$FNVLP_SCALE" = smoke ]; then
  # Synthetic labelled data by default; FNVLP_DATA=DIR (captions.json + splits.json in ALBEF's
  # layout, e.g. ../shared/data/flickr8k-128) uses a real dataset instead.
  export FNVLP_DATA=${FNVLP_DATA:-synthetic}
  export FNVLP_PRESET=${FNVLP_PRESET:-tiny}
  export FNVLP_RANKS=${FNVLP_RANKS:-2}
  export FNVLP_IMAGE_SIZE=${FNVLP_IMAGE_SIZE:-64}
  export FNVLP_IMAGE_CODEC=${FNVLP_IMAGE_CODEC:-raw}
  export FNVLP_SYNTH_IMAGES=${FNVLP_SYNTH_IMAGES:-400}
  export FNVLP_SYNTH_CLASSES=${FNVLP_SYNTH_CLASSES:-8}
  export FNVLP_BATCH=${FNVLP_BATCH:-16}
  export FNVLP_STEPS=${FNVLP_STEPS:-24}
  export FNVLP_FT_STEPS=${FNVLP_FT_STEPS:-8}
  export FNVLP_CKPT_EVERY=${FNVLP_CKPT_EVERY:-0}
  export FNVLP_LOG_EVERY=${FNVLP_LOG_EVERY:-2}
  export FNVLP_WARMUP=${FNVLP_WARMUP:-4}
  export FNVLP_SHARD_RANKS=${FNVLP_SHARD_RANKS:-2}
  export FNVLP_SHARD_SIZE=${FNVLP_SHARD_SIZE:-400}
  export FNVLP_ANALYSIS_RANKS=${FNVLP_ANALYSIS_RANKS:-2}
  export FNVLP_TIME=${FNVLP_TIME:-30:00}
  export FNVLP_MEM=${FNVLP_MEM:-6G}
  export FNVLP_K_TEST=${FNVLP_K_TEST:-16}
  export FNVLP_METHOD=${FNVLP_METHOD:-none}
  export FNVLP_EPOCHS=${FNVLP_EPOCHS:-}
else
  # The mission's method: FALCON's scheduler composes the batches, GloFND's per-anchor thresholds
  # filter their false negatives, in GloFND's protocol (lambda_0 = 1, from FNVLP_GLOFND_START,
  # 40% of the epochs by default); ALBEF's 30 epochs (Pretrain.yaml).
  export FNVLP_METHOD=${FNVLP_METHOD:-falcon_glofnd}
  export FNVLP_EPOCHS=${FNVLP_EPOCHS:-30}
  # ALBEF's 4M set: "json:image_root" items (COCO, Visual Genome, CC3M, SBU in ALBEF's JSON).
  d4=${FNVLP_DATA_ROOT:-/datasets}
  export FNVLP_DATA=${FNVLP_DATA:-$d4/albef/coco.json:$d4/coco $d4/albef/vg.json:$d4/vg $d4/albef/cc3m_train.json:$d4/cc3m $d4/albef/sbu.json:$d4/sbu}
  # Downstream retrieval (fine-tuning, evaluation, validation): ALBEF-layout captions.json +
  # splits.json with train and val (or test) splits.
  export FNVLP_DOWNSTREAM=${FNVLP_DOWNSTREAM:-$d4/flickr30k}
  export FNVLP_PRESET=${FNVLP_PRESET:-base}
  export FNVLP_RANKS=${FNVLP_RANKS:-${SLURM_NTASKS:-32}}
  export FNVLP_IMAGE_SIZE=${FNVLP_IMAGE_SIZE:-256}
  # JPEG streams at most 384 px on the longer side: a fraction of the bytes of decoded 256 px
  # squares, crops from the whole image as ALBEF's, ~2 of a rank's 12 CPUs to decode at the GPU
  # goal (tests/bench/README.md, "Shards of JPEG streams"); raw where decoding is the bottleneck.
  export FNVLP_IMAGE_CODEC=${FNVLP_IMAGE_CODEC:-jpeg}
  export FNVLP_BATCH=${FNVLP_BATCH:-}
  export FNVLP_STEPS=${FNVLP_STEPS:-}
  export FNVLP_FT_STEPS=${FNVLP_FT_STEPS:-}
  export FNVLP_CKPT_EVERY=${FNVLP_CKPT_EVERY:-2000}
  export FNVLP_LOG_EVERY=${FNVLP_LOG_EVERY:-50}
  export FNVLP_WARMUP=${FNVLP_WARMUP:-}
  export FNVLP_SHARD_RANKS=${FNVLP_SHARD_RANKS:-64}
  export FNVLP_SHARD_SIZE=${FNVLP_SHARD_SIZE:-8192}
  export FNVLP_ANALYSIS_RANKS=${FNVLP_ANALYSIS_RANKS:-16}
  export FNVLP_TIME=${FNVLP_TIME:-12:00:00}
  export FNVLP_MEM=${FNVLP_MEM:-0}
  export FNVLP_K_TEST=${FNVLP_K_TEST:-128}
fi
export FNVLP_MAX_SIDE=${FNVLP_MAX_SIDE:-384}
case "$FNVLP_IMAGE_CODEC" in
  raw | jpeg) ;;
  *) fnvlp_die "FNVLP_IMAGE_CODEC=$FNVLP_IMAGE_CODEC: expected raw or jpeg" ;;
esac
[ "$FNVLP_METHOD" = none ] || [ -f "$FNVLP_ROOT/jobs/configs/methods/$FNVLP_METHOD.yaml" ] ||
  fnvlp_die "FNVLP_METHOD=$FNVLP_METHOD: no jobs/configs/methods/$FNVLP_METHOD.yaml (or none)"
case "$FNVLP_EPOCHS" in '' | [1-9] | [1-9]*[0-9]) ;; *) fnvlp_die "FNVLP_EPOCHS=$FNVLP_EPOCHS: expected a positive epoch count" ;; esac
# GPUs per node of the training jobs the scripts submit (pretrain, finetune, campaign tasks), one
# rank per GPU; 0 asks for none (CPU clusters, the local SLURM). Default 8 at 4m (the #SBATCH
# lines of pretrain_4m.sh), 0 at smoke; a hand-submitted pretrain_4m.sh chains its jobs with the
# GPUs of its own allocation. FNVLP_CPUS_PER_GPU: CPUs per rank on GPU nodes.
if [ "$FNVLP_SCALE" = 4m ]; then
  export FNVLP_GPUS_PER_NODE=${FNVLP_GPUS_PER_NODE:-8}
else
  export FNVLP_GPUS_PER_NODE=${FNVLP_GPUS_PER_NODE:-0}
fi
case "$FNVLP_GPUS_PER_NODE" in '' | *[!0-9]*) fnvlp_die "FNVLP_GPUS_PER_NODE=$FNVLP_GPUS_PER_NODE: expected a GPU count (0: none)" ;; esac
if [ "$FNVLP_SCALE" = 4m ]; then
  export FNVLP_CPUS_PER_GPU=${FNVLP_CPUS_PER_GPU:-12}
else
  export FNVLP_CPUS_PER_GPU=${FNVLP_CPUS_PER_GPU:-1}
fi
# The simstat stage on GPUs (fnvlp_simstat_where): FNVLP_ANALYSIS_GPUS ranks, one GPU each (default
# one node's), for FNVLP_ANALYSIS_GPU_TIME, where fnvlp-simstat is built with a device Kokkos
# (FNVLP_KOKKOS=cuda) and the chain asks for GPUs; else FNVLP_ANALYSIS_RANKS CPU ranks.
export FNVLP_ANALYSIS_GPUS=${FNVLP_ANALYSIS_GPUS:-$FNVLP_GPUS_PER_NODE}
case "$FNVLP_ANALYSIS_GPUS" in '' | *[!0-9]*) fnvlp_die "FNVLP_ANALYSIS_GPUS=$FNVLP_ANALYSIS_GPUS: expected a GPU count" ;; esac
export FNVLP_ANALYSIS_GPU_TIME=${FNVLP_ANALYSIS_GPU_TIME:-1:00:00}
export FNVLP_CONFIG=${FNVLP_CONFIG:-$FNVLP_ROOT/jobs/configs/$FNVLP_PRESET.yaml}
export FNVLP_FT_CONFIG=${FNVLP_FT_CONFIG:-$FNVLP_ROOT/jobs/configs/retrieval_flickr.yaml}
# Extra --set overrides, whitespace-separated key=value (pretraining / fine-tuning).
export FNVLP_PRETRAIN_SET=${FNVLP_PRETRAIN_SET:-}
export FNVLP_FT_SET=${FNVLP_FT_SET:-}
export FNVLP_FN_ALPHA=${FNVLP_FN_ALPHA:-0.01}
export FNVLP_SEED=${FNVLP_SEED:-42}
# Initial weights, as ALBEF's recipe (Pretrain.yaml: DeiT-B/16 for the image encoder,
# bert-base-uncased for the text and fusion encoders): whitespace-separated files on the
# cluster's disk, each passed as fnvlp-pretrain --init-from (USAGE.md "Weights in and out").
# Empty: random initialisation.
export FNVLP_INIT=${FNVLP_INIT:-}
# Requeues of one pretraining run (preemption, time limit) before it is failed instead: counted in
# RUN/requeues.tsv, so a job that keeps being preempted without progress cannot loop forever.
export FNVLP_MAX_REQUEUES=${FNVLP_MAX_REQUEUES:-20}

# Shard directories the stages read.
export FNVLP_SHARDS=${FNVLP_SHARDS:-$FNVLP_WORK/shards}
if [ "$FNVLP_SCALE" = smoke ]; then
  FNVLP_SHARDS_PRETRAIN=$FNVLP_SHARDS/train FNVLP_SHARDS_VAL=$FNVLP_SHARDS/val
  FNVLP_SHARDS_FT_TRAIN=$FNVLP_SHARDS/train FNVLP_SHARDS_FT_VAL=$FNVLP_SHARDS/val
else
  FNVLP_SHARDS_PRETRAIN=$FNVLP_SHARDS/pretrain-4m FNVLP_SHARDS_VAL=$FNVLP_SHARDS/downstream-val
  FNVLP_SHARDS_FT_TRAIN=$FNVLP_SHARDS/downstream-train FNVLP_SHARDS_FT_VAL=$FNVLP_SHARDS/downstream-val
fi
export FNVLP_SHARDS_PRETRAIN FNVLP_SHARDS_VAL FNVLP_SHARDS_FT_TRAIN FNVLP_SHARDS_FT_VAL

# ---------------------------------------------------------------------------------------------
# Executables.

# Path of an fnvlp executable in the build tree (or on PATH); empty when it is not built.
fnvlp_bin_path() {
  local name=$1 d
  for d in data_prep jobs analysis; do
    if [ -x "$FNVLP_BUILD_DIR/$d/$name" ]; then
      echo "$FNVLP_BUILD_DIR/$d/$name"
      return 0
    fi
  done
  command -v "$name" 2>/dev/null || true
}

# Path of a required executable; a clear failure when it is not built.
fnvlp_bin() {
  local p
  p=$(fnvlp_bin_path "$1")
  [ -n "$p" ] || fnvlp_die "$1 not built (looked in $FNVLP_BUILD_DIR/{data_prep,jobs,analysis} and PATH; build it with: cmake --build $FNVLP_BUILD_DIR --target $1)"
  echo "$p"
}

# The Kokkos execution space fnvlp-simstat's kernels run on (`fnvlp-simstat --kokkos-space`:
# Cuda, HIP, SYCL on a GPU; Serial, OpenMP on the host), "none" when it is not built.
fnvlp_simstat_space() {
  local b
  b=$(fnvlp_bin_path fnvlp-simstat)
  if [ -z "$b" ]; then
    echo none
  else
    "$b" --kokkos-space 2>/dev/null || echo unknown
  fi
}

# Where the simstat stage runs, as "gpu|cpu RANKS WHY": on FNVLP_ANALYSIS_GPUS GPUs when its
# build's Kokkos runs on a device, else on FNVLP_ANALYSIS_RANKS CPU ranks. A device build in a chain
# that asks for no GPU (FNVLP_GPUS_PER_NODE=0 or FNVLP_ANALYSIS_GPUS=0) cannot run: refused.
fnvlp_simstat_where() {
  local space
  space=$(fnvlp_simstat_space)
  case "$space" in
    Cuda | HIP | SYCL)
      if [ "$FNVLP_GPUS_PER_NODE" -eq 0 ] || [ "$FNVLP_ANALYSIS_GPUS" -eq 0 ]; then
        fnvlp_die "fnvlp-simstat is built with Kokkos $space and runs on GPUs only, but the chain asks for none (FNVLP_GPUS_PER_NODE=$FNVLP_GPUS_PER_NODE, FNVLP_ANALYSIS_GPUS=$FNVLP_ANALYSIS_GPUS): give it GPUs, or point FNVLP_BUILD_DIR at a build with a host Kokkos"
      fi
      echo "gpu $FNVLP_ANALYSIS_GPUS fnvlp-simstat is built with Kokkos $space"
      ;;
    none) echo "cpu $FNVLP_ANALYSIS_RANKS fnvlp-simstat is not built (with Kokkos on CUDA it would run on GPUs)" ;;
    unknown) echo "cpu $FNVLP_ANALYSIS_RANKS fnvlp-simstat does not answer --kokkos-space (built before it could)" ;;
    *) echo "cpu $FNVLP_ANALYSIS_RANKS fnvlp-simstat is built with Kokkos $space (a FNVLP_KOKKOS=cuda build runs it on GPUs)" ;;
  esac
}

# The newest RUN/embeddings/epoch-EEE.h5 of a run directory ("" when there is none).
fnvlp_newest_embeddings() {
  { find "$1/embeddings" -maxdepth 1 -name 'epoch-*.h5' 2>/dev/null || true; } | sort | tail -1
}

# Whether an embeddings export carries GloFND's lambda (the run trained with GloFND).
fnvlp_has_lambda() { h5ls "$1" 2>/dev/null | grep glofnd_lambda_image >/dev/null; }

# True (0) when the tool is built; 1 when it is missing but allowed (FNVLP_SKIP_MISSING, which
# logs SKIPPED); dies otherwise.
fnvlp_have_or_skip() {
  [ -n "$(fnvlp_bin_path "$1")" ] && return 0
  case " $FNVLP_SKIP_MISSING " in
    *" $1 "*)
      fnvlp_log "SKIPPED: $1 not built (listed in FNVLP_SKIP_MISSING)"
      return 1
      ;;
  esac
  fnvlp_bin "$1" >/dev/null
}

# This batch shell owns directory $1 for the rest of the script (DIR/owner.lock through
# fnvlp-lock, released when the shell exits; src/fnvlp/store/run_lock.hpp): a second job into it
# exits 2 at once, naming the owner; the lock of an owner that is gone (killed, or an earlier
# allocation of this requeued job) is taken over with a line saying so.
fnvlp_own_dir() {
  local bin rc=0
  bin=$(fnvlp_bin fnvlp-lock)
  "$bin" take "$1" --pid $$ --program "${SLURM_JOB_NAME:-$(basename "$0")} (batch shell)" || rc=$?
  [ "$rc" -eq 0 ] || exit "$rc"
  FNVLP_OWNED_DIR=$1 FNVLP_LOCK_BIN=$bin
  trap '"$FNVLP_LOCK_BIN" release "$FNVLP_OWNED_DIR" --pid $$ || true' EXIT
}

# ---------------------------------------------------------------------------------------------
# Logging: what ran, on which commit, with which settings.
fnvlp_log_header() {
  local commit dirty=""
  commit=$(git -C "$FNVLP_ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
  if [ "$commit" != unknown ] && ! git -C "$FNVLP_ROOT" diff --quiet HEAD 2>/dev/null; then
    dirty=" (with uncommitted changes)"
  fi
  fnvlp_log "fnvlp $1 on $(hostname) job ${SLURM_JOB_ID:-none}${SLURM_ARRAY_TASK_ID:+ array task $SLURM_ARRAY_TASK_ID} restart ${SLURM_RESTART_COUNT:-0}"
  fnvlp_log "git commit $commit$dirty"
  fnvlp_log "resolved settings:"
  env | grep -E '^(FNVLP_|SLURM_(JOB_ID|JOB_NAME|NTASKS|NNODES|JOB_NODELIST|ARRAY_|RESTART_COUNT|CONF|CPUS_PER_TASK|GPUS_ON_NODE|GPUS_PER_NODE|JOB_GPUS|GPU_BIND)|CUDA_VISIBLE_DEVICES|NCCL_|OMP_NUM_THREADS)' |
    sort | sed 's/^/    /'
}

# ---------------------------------------------------------------------------------------------
# Rank launcher: srun --mpi=pmix inside an allocation (pmix offered), mpirun otherwise. mpirun
# runs unbound: Open MPI binds each rank to one core at np <= 2 (to a socket above), which would
# put all train.threads of a rank (the job's --cpus-per-task) on that core.
fnvlp_launcher() {
  local n=$1 mode=$FNVLP_LAUNCHER
  if [ "$mode" = auto ]; then
    mode=mpirun
    if [ -n "${SLURM_JOB_ID:-}" ] && command -v srun >/dev/null &&
      srun --mpi=list 2>&1 | grep -w pmix >/dev/null; then
      mode=srun
    fi
  fi
  case "$mode" in
    srun) echo "srun --mpi=pmix --ntasks=$n --kill-on-bad-exit=1" ;;
    mpirun) echo "mpirun --oversubscribe --bind-to none -np $n" ;;
    *) fnvlp_die "FNVLP_LAUNCHER=$mode: expected auto, srun or mpirun" ;;
  esac
}

# Runs `cmd...` on `n` ranks in the background and waits for it, so that a trapped USR1/TERM
# can be forwarded to the ranks (fnvlp_forward_signal); returns the ranks' exit code.
FNVLP_LAUNCH_PID=""
fnvlp_run_ranks() {
  local n=$1 rc=0
  shift
  local -a launcher
  read -r -a launcher <<<"$(fnvlp_launcher "$n")"
  fnvlp_log "launch: ${launcher[*]} $*"
  # stdin from /dev/null: mpirun forwards stdin to rank 0 and would swallow a caller's loop input.
  "${launcher[@]}" "$@" </dev/null &
  FNVLP_LAUNCH_PID=$!
  # `wait` returns early (>128) when a trapped signal arrives: wait again until the ranks exit.
  while true; do
    rc=0
    wait "$FNVLP_LAUNCH_PID" || rc=$?
    kill -0 "$FNVLP_LAUNCH_PID" 2>/dev/null || break
  done
  FNVLP_LAUNCH_PID=""
  return "$rc"
}

# Trap target: SLURM sends USR1 to the batch shell (--signal=B:USR1@120); srun and mpirun both
# forward USR1 to every rank, which checkpoint and exit with code 3 (src/fnvlp/train/signals.hpp).
fnvlp_forward_signal() {
  fnvlp_log "received $1: forwarding USR1 to the ranks (checkpoint, exit 3, requeue)"
  if [ -n "$FNVLP_LAUNCH_PID" ]; then kill -USR1 "$FNVLP_LAUNCH_PID" 2>/dev/null || true; fi
}

# Trap target for USR2 (`scancel --batch --signal=USR2 JOB`; plain `scancel --signal=USR2 JOB`
# reaches srun's ranks directly): the ranks export every pair's embeddings after the current step
# to RUN/embeddings/step-SSSSSSS.h5 and train on (src/fnvlp/train/signals.hpp).
fnvlp_forward_export() {
  fnvlp_log "received USR2: forwarding it to the ranks (export embeddings now, training goes on)"
  if [ -n "$FNVLP_LAUNCH_PID" ]; then kill -USR2 "$FNVLP_LAUNCH_PID" 2>/dev/null || true; fi
}

# ---------------------------------------------------------------------------------------------
# Submission helpers.

# FNVLP_DRY_RUN=1: a dry run. Nothing is submitted and nothing is written; every sbatch command
# line the scripts would run is printed instead (stderr, one shell-quoted line each), and a job
# submitted after it depends on the stand-in id JOBNAME.dry.
fnvlp_dry_run() { [ "${FNVLP_DRY_RUN:-0}" = 1 ]; }

# `fnvlp_submit [sbatch options] SCRIPT [args]` prints the job id (sbatch --parsable). Logs go to
# $FNVLP_LOGS/%x-%j.out (%x-%A_%a.out for arrays) unless --output is given.
fnvlp_submit() {
  local id
  local -a outopt
  fnvlp_dry_run || mkdir -p "$FNVLP_LOGS"
  case " $* " in
    *" --output="* | *" -o "*) outopt=() ;;
    *" --array="*) outopt=(--output="$FNVLP_LOGS/%x-%A_%a.out") ;;
    *) outopt=(--output="$FNVLP_LOGS/%x-%j.out") ;;
  esac
  # A job submitted from inside a job must not inherit the outer job's SLURM_* variables (srun
  # would read stale task counts from them); SLURM_CONF stays. Nor its CUDA_VISIBLE_DEVICES (the
  # outer job's GPUs, which would make a GPU-less job look like it has some).
  local v
  local -a clean=()
  for v in $(compgen -e | grep '^SLURM_' | grep -v '^SLURM_CONF$' || true); do clean+=(-u "$v"); done
  if [ -n "${SLURM_JOB_ID:-}" ]; then clean+=(-u CUDA_VISIBLE_DEVICES); fi
  case " $* " in *" --export="*) ;; *) outopt+=(--export=ALL) ;; esac
  if fnvlp_dry_run; then
    local line
    line=$(printf ' %q' sbatch --parsable "${outopt[@]}" "$@")
    echo "${line# }" >&2
    id=$(sed -nE 's/(^|.* )--job-name=([^ ]+).*/\2/p' <<<"$*")
    echo "${id:-job}.dry"
    return 0
  fi
  id=$(env "${clean[@]}" sbatch --parsable "${outopt[@]}" "$@") || fnvlp_die "sbatch $* failed"
  echo "${id%%;*}"
}

# Dependency option for sbatch: afterok on every given id (none: no option).
fnvlp_afterok() {
  local ids
  ids=$(printf ':%s' "$@")
  [ -z "$ids" ] || echo "--dependency=afterok$ids"
}

# sbatch options of the small single-node jobs (shard, analysis, evaluation) for `n` ranks.
fnvlp_small_job_opts() {
  local n=$1 name=$2 nodes=$FNVLP_NODES
  [ "$n" -ge "$nodes" ] || nodes=$n
  echo "--job-name=$name --nodes=$nodes --ntasks=$n --cpus-per-task=1 --time=$FNVLP_TIME --mem=$FNVLP_MEM --gpus-per-node=0"
}

# Resources of a training job on GPU nodes (FNVLP_GPUS_PER_NODE > 0): `n` ranks, one GPU each
# (min(n, FNVLP_GPUS_PER_NODE) per node, every node full), FNVLP_CPUS_PER_GPU CPUs per rank. No
# SLURM GPU binding: every rank sees its node's GPUs and uses the one of its node-local rank, so
# NCCL can reach the others over NVLink (CUDA IPC); per-task binding (--gpus-per-task,
# --gpu-bind=single) hides them.
fnvlp_gpu_job_opts() {
  local n=$1 per=$FNVLP_GPUS_PER_NODE
  [ "$n" -ge "$per" ] || per=$n
  [ $((n % per)) -eq 0 ] ||
    fnvlp_die "$n ranks do not fill nodes of FNVLP_GPUS_PER_NODE=$FNVLP_GPUS_PER_NODE GPUs (one rank per GPU)"
  echo "--nodes=$((n / per)) --ntasks-per-node=$per --gpus-per-node=$per --gpu-bind=none --cpus-per-task=$FNVLP_CPUS_PER_GPU"
}

# ---------------------------------------------------------------------------------------------
# Waiting (tests, README command 1, `--wait` options): polls the jobs' states (scontrol, then
# sacct once the controller has forgotten a job: fnvlp_job_records) until every job ended.
# A job that fails, or one left pending with DependencyNeverSatisfied, ends the wait: the
# reason is printed (with the failed job's log tail), the remaining jobs are cancelled, and the
# function returns 1.
fnvlp_job_field() { sed -En "s/(^|.*[[:space:]])$2=([^[:space:]]*).*/\2/p" <<<"$1" | head -1; }

# A job's state as scontrol's one-line records (one per array task): from scontrol while the
# controller remembers the job, from sacct (accounting) once it has forgotten it (MinJobAge,
# 300 s by default on clusters), else a record with JobState=UNKNOWN.
fnvlp_job_records() {
  local out
  if out=$(scontrol show job -o "$1" 2>/dev/null) && [ -n "$out" ]; then
    echo "$out"
  elif out=$(sacct -n -X -P -j "$1" -o JobIDRaw,State,Reason,JobName,ExitCode 2>/dev/null) &&
    [ -n "$out" ]; then
    # sacct's State may carry words after the state ("CANCELLED by 0"): keep the first.
    awk -F'|' '{split($2, st, " "); printf "JobId=%s JobState=%s Reason=%s JobName=%s ExitCode=%s StateFrom=sacct\n", $1, st[1], ($3 == "" ? "None" : $3), $4, $5}' <<<"$out"
  else
    echo "JobId=$1 JobState=UNKNOWN Reason=not_found_by_scontrol_or_sacct"
  fi
}

# True (0) for a job state that may still change: queued, running or being requeued.
fnvlp_state_active() {
  case "$1" in
    PENDING | RUNNING | CONFIGURING | COMPLETING | REQUEUED | REQUEUE_HOLD | RESIZING | SUSPENDED | REQUEUE_FED) return 0 ;;
  esac
  return 1
}

# True (0) when a job (any task of an array) is still queued or running.
fnvlp_jobs_active() {
  local line
  while IFS= read -r line; do
    fnvlp_state_active "$(fnvlp_job_field "$line" JobState)" && return 0
  done < <(fnvlp_job_records "$1")
  return 1
}

fnvlp_wait_jobs() {
  local timeout=${FNVLP_WAIT_TIMEOUT:-3600} t0 id line state reason pending failed=""
  t0=$(date +%s)
  while true; do
    pending=0
    for id in "$@"; do
      # One line per job (array tasks included).
      while IFS= read -r line; do
        [ -n "$line" ] || continue
        state=$(fnvlp_job_field "$line" JobState)
        reason=$(fnvlp_job_field "$line" Reason)
        if [ "$state" = COMPLETED ]; then
          :
        elif fnvlp_state_active "$state" &&
          ! { [ "$state" = PENDING ] && [ "$reason" = DependencyNeverSatisfied ]; }; then
          pending=1
        else
          failed="$failed $(fnvlp_job_field "$line" JobId):$state:$reason"
        fi
      done < <(fnvlp_job_records "$id")
    done
    if [ -n "$failed" ]; then
      fnvlp_report_failure "$failed" "$@"
      return 1
    fi
    [ "$pending" -eq 1 ] || return 0
    if [ $(($(date +%s) - t0)) -gt "$timeout" ]; then
      echo "fnvlp: error: jobs $* still not finished after ${timeout}s" >&2
      return 1
    fi
    sleep "${FNVLP_WAIT_POLL:-3}"
  done
}

fnvlp_report_failure() {
  local failed=$1 item id state reason line log
  shift
  echo "fnvlp: error: the chain stopped:" >&2
  for item in $failed; do
    IFS=: read -r id state reason <<<"$item"
    line=$(fnvlp_job_records "$id" | head -1)
    echo "  job $id ($(fnvlp_job_field "$line" JobName)): $state, reason $reason, exit $(fnvlp_job_field "$line" ExitCode)" >&2
    log=$(fnvlp_job_field "$line" StdOut)
    if [ "$state" != PENDING ] && [ -f "$log" ]; then
      echo "  last lines of $log:" >&2
      tail -n 15 "$log" | sed 's/^/    | /' >&2
    fi
  done
  # Jobs still waiting on the failed one: the scheduler marks them DependencyNeverSatisfied
  # within a few passes; show that reason before cancelling them.
  local t
  for id in "$@"; do
    for t in $(seq 1 15); do
      line=$(scontrol show job -o "$id" 2>/dev/null | grep -m1 'JobState=PENDING' || true)
      [ -n "$line" ] || break
      reason=$(fnvlp_job_field "$line" Reason)
      if [ "$reason" = DependencyNeverSatisfied ] || [ "$t" -eq 15 ]; then
        case "$failed" in *" $(fnvlp_job_field "$line" JobId):"*) ;; *)
          echo "  job $(fnvlp_job_field "$line" JobId) ($(fnvlp_job_field "$line" JobName)): PENDING, reason $reason" >&2 ;;
        esac
        break
      fi
      sleep 1
    done
    scancel "$id" 2>/dev/null || true
  done
  echo "fnvlp: error: cancelled the remaining jobs of: $*" >&2
}

# ---------------------------------------------------------------------------------------------
# Pretraining inside a batch job ($FNVLP_RUN, $FNVLP_SEED, $FNVLP_PRETRAIN_SET), with the
# preemption protocol: USR1 (--signal=B:USR1@120) or TERM (scontrol requeue, preemption) is
# forwarded to the ranks, which checkpoint and exit 3; the job then requeues itself and its next
# start resumes from the checkpoint (--resume auto).
fnvlp_pretrain() {
  local bin rc=0
  local -a args
  bin=$(fnvlp_bin fnvlp-pretrain)
  [ -f "$FNVLP_CONFIG" ] || fnvlp_die "config not found: $FNVLP_CONFIG (FNVLP_PRESET=$FNVLP_PRESET)"
  args=(--config "$FNVLP_CONFIG" --data "$FNVLP_SHARDS_PRETRAIN" --out "$FNVLP_RUN" --resume auto
    --set "train.seed=$FNVLP_SEED" --set "checkpoint.every_steps=$FNVLP_CKPT_EVERY"
    --set "train.log_every=$FNVLP_LOG_EVERY")
  [ ! -f "$FNVLP_SHARDS_VAL/manifest.json" ] || args+=(--val "$FNVLP_SHARDS_VAL")
  local dev
  dev=$(fnvlp_device_overrides) || exit 1
  fnvlp_log "device: $dev"
  for kv in $dev; do args+=(--set "$kv"); done
  local kind=cpu
  case " $dev " in *" train.device=cuda "*) kind=cuda ;; esac
  local step
  step=$(fnvlp_step_overrides "$kind") || exit 1
  fnvlp_log "$(fnvlp_step_summary "$kind")"
  for kv in $step; do args+=(--set "$kv"); done
  for kv in $(fnvlp_thread_overrides); do args+=(--set "$kv"); done
  [ -z "$FNVLP_STEPS" ] || args+=(--set "train.max_steps=$FNVLP_STEPS")
  [ -z "$FNVLP_BATCH" ] || args+=(--set "train.batch_size=$FNVLP_BATCH")
  local f inits
  inits=$(fnvlp_init_files) || exit 1
  for f in $inits; do args+=(--init-from "$f"); done
  fnvlp_log "initial weights: ${FNVLP_INIT:-random (FNVLP_INIT empty)}"
  [ -z "$FNVLP_WARMUP" ] || args+=(--set "optim.warmup_steps=$FNVLP_WARMUP")
  for kv in $FNVLP_PRETRAIN_SET; do args+=(--set "$kv"); done

  local log=$FNVLP_RUN/requeues.tsv requeues
  requeues=$( [ -f "$log" ] && wc -l <"$log" || echo 0)
  [ "$requeues" -le "$FNVLP_MAX_REQUEUES" ] ||
    fnvlp_die "$FNVLP_RUN was requeued $requeues times, more than FNVLP_MAX_REQUEUES=$FNVLP_MAX_REQUEUES ($log): not started again"

  trap 'fnvlp_forward_signal USR1' USR1
  trap 'fnvlp_forward_signal TERM' TERM
  trap fnvlp_forward_export USR2
  # srun steps need not inherit the job's --cpus-per-task (SLURM 22.05's do not: 1 CPU per rank):
  # the ranks ask for it again (this launch only: others may start more ranks than the job has
  # tasks).
  if [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then local -x SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK; fi
  fnvlp_run_ranks "$FNVLP_RANKS" "$bin" "${args[@]}" || rc=$?
  trap - USR1 TERM USR2
  if [ "$rc" -eq 3 ]; then
    requeues=$((requeues + 1))
    printf '%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "${SLURM_JOB_ID:-none}" "${SLURM_RESTART_COUNT:-0}" >>"$log"
    [ "$requeues" -le "$FNVLP_MAX_REQUEUES" ] ||
      fnvlp_die "checkpointed and stopped (exit 3), but this would be requeue $requeues of $FNVLP_RUN, above FNVLP_MAX_REQUEUES=$FNVLP_MAX_REQUEUES ($log): not requeued (the checkpoint stays; raise the limit or remove $log to go on)"
    # The ranks saved a committed checkpoint: put the job back in the queue (same id, so the
    # afterok dependents keep waiting); the next start resumes from that checkpoint.
    fnvlp_log "ranks stopped with the requeue code 3: scontrol requeue $SLURM_JOB_ID"
    # (After an external `scontrol requeue` SLURM has already done it: the call fails, harmlessly.)
    scontrol requeue "$SLURM_JOB_ID" || fnvlp_log "scontrol requeue $SLURM_JOB_ID refused (already requeued?)"
    # Stay alive until SLURM ends this run of the job, so it is not recorded as completed.
    sleep 300
    fnvlp_die "job $SLURM_JOB_ID was not requeued within 300 s"
  fi
  [ "$rc" -eq 0 ] || fnvlp_die "fnvlp-pretrain failed with exit code $rc (rank logs: $FNVLP_RUN/logs/)"
  fnvlp_log "pretraining done: $FNVLP_RUN (summary.json, metrics.jsonl, checkpoints/latest)"
}
