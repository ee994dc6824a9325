# shellcheck shell=bash disable=SC2034  # what it sets is the sourcing script's
# Sourced by bench_methods.sh and bench_static_methods.sh with their arguments [BUILD_DIR] [ROUNDS]
# [IMAGES]: root, build, rounds, images, py, mpirun (2 ranks), a work directory removed on exit,
# IMAGES synthetic images x 5 captions at 64 px sharded in $work/shards, and `common`: the tiny
# preset's options for 2 epochs over them (the grouped samplers group epoch 1).
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
rounds=${2:-3}
images=${3:-600}
vocab=${FNVLP_SHARED_DIR:-$root/../shared}/data/vocab/bert-base-uncased-vocab.txt
py=/usr/bin/python3
source "$root/env/mpi-env.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/fnvlp_bench_methods.XXXXXX")
trap 'rm -rf "$work"' EXIT
mpirun=(mpirun --oversubscribe -np 2)
"${mpirun[@]}" "$build/data_prep/fnvlp-synth" --out "$work/synth" --images "$images" \
  --captions-per-image 5 --classes 8 --image-size 64 --seed 11 --val-fraction 0 >/dev/null
"${mpirun[@]}" "$build/data_prep/fnvlp-shard" --input "$work/synth/captions.json" \
  --image-root "$work/synth" --vocab "$vocab" --out "$work/shards" --image-size 64 \
  --shard-size 1000 >/dev/null
common=(--config "$root/jobs/configs/tiny.yaml" --data "$work/shards" --set train.epochs=2
        --set train.log_every=5 --set checkpoint.every_steps=0 --set sampler.search_space=480)
