#!/usr/bin/env bash
# README command 1: install, build, and run the main job on the embedded default data:
# synthesize a labelled image-caption dataset, shard it over 2 MPI ranks, verify the shards, and
# pretrain the tiny ALBEF-style model on it (zero-shot retrieval on the held-out split is logged).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=${FNVLP_WORK:-$root/work/quickstart}
shared=${FNVLP_SHARED_DIR:-$root/../shared}
vocab=${FNVLP_VOCAB:-$shared/data/vocab/bert-base-uncased-vocab.txt}
ranks=${FNVLP_RANKS:-2}
bash "$root/env/install-debian.sh"
bash "$root/env/build.sh"
source "$root/env/mpi-env.sh"
bin=${FNVLP_BUILD_DIR:-$root/build}
mpirun=(mpirun --oversubscribe -np "$ranks")

[ -f "$vocab" ] || { echo "quickstart: WordPiece vocab not found at $vocab (set FNVLP_VOCAB)" >&2; exit 1; }
mkdir -p "$work"
"${mpirun[@]}" "$bin/data_prep/fnvlp-synth" --out "$work/synth" --images "${FNVLP_SYNTH_IMAGES:-4000}" \
  --captions-per-image 5 --classes 16 --image-size 64 --seed 1
for split in train val; do
  "${mpirun[@]}" "$bin/data_prep/fnvlp-shard" --input "$work/synth/captions.json" --format albef \
    --image-root "$work/synth" --split-file "$work/synth/splits.json" --split "$split" \
    --vocab "$vocab" --out "$work/shards-$split" --image-size 64 --max-len 30
  "${mpirun[@]}" "$bin/data_prep/fnvlp-shard" --verify "$work/shards-$split"
done
"${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" --config "$root/jobs/configs/tiny.yaml" \
  --data "$work/shards-train" --val "$work/shards-val" --out "$work/run" \
  --set train.epochs="${FNVLP_EPOCHS:-2}" --set train.log_every=20
echo "quickstart: shards in $work/shards-{train,val}; run directory $work/run (metrics.jsonl,"
echo "  summary.json, checkpoints/latest, embeddings/epoch-*.h5)"
