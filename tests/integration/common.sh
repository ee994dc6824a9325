# shellcheck shell=bash disable=SC2154 # bin and vocab come from the sourcing script
# Sourced by the integration scripts after they set `bin` (build dir) and `vocab`: a scratch
# directory removed on exit, 2-rank mpirun, and synthetic data sharded the way every test needs.
# Usage: source common.sh NAME   (NAME tags the scratch directory)
work=$(mktemp -d "${TMPDIR:-/tmp}/fnvlp_$1.XXXXXX")
trap 'rm -rf "$work"' EXIT
mpirun=(mpirun --oversubscribe -np 2)
fail() { echo "FAIL: $*"; exit 1; }

# synth_data OUT IMAGES CAPTIONS_PER_IMAGE CLASSES SEED: 64 px scenes, 10% held out as val.
synth_data() {
  "${mpirun[@]}" "$bin/data_prep/fnvlp-synth" --out "$1" --images "$2" --captions-per-image "$3" \
    --classes "$4" --image-size 64 --seed "$5" --val-fraction 0.1 >/dev/null
}

# shard_split SYNTH_DIR SPLIT OUT [fnvlp-shard options...]: one split of synth_data, at 64 px.
shard_split() {
  local synth=$1 split=$2 out=$3
  shift 3
  "${mpirun[@]}" "$bin/data_prep/fnvlp-shard" --input "$synth/captions.json" --image-root "$synth" \
    --split-file "$synth/splits.json" --split "$split" --vocab "$vocab" --out "$out" \
    --image-size 64 "$@" >/dev/null
}

# wait_metrics_lines RUN N: waits up to 60 s until RUN/metrics.jsonl has N lines (the job is
# training, so a signal sent next arrives mid-run); the caller checks what follows.
wait_metrics_lines() {
  for _ in $(seq 1 600); do
    [ -f "$1/metrics.jsonl" ] && [ "$(wc -l <"$1/metrics.jsonl")" -ge "$2" ] && return
    sleep 0.1
  done
}
