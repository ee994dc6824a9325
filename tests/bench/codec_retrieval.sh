#!/usr/bin/env bash
# Benchmark (issue 67): does storing images as JPEG cost retrieval? The Flickr8k-128 train and val
# splits sharded raw and as JPEG (--image-codec jpeg, quality QUALITY), the same model pretrained
# from each for STEPS steps with the same seed (2 ranks), each evaluated on its own val shards
# (ITC + ITM re-ranking of the top K_TEST). Prints both rows and their difference; judge it against
# the seed spread the Flickr campaigns measured (tests/bench/README.md, "Shards of JPEG streams").
# Usage: codec_retrieval.sh BUILD_DIR WORK_DIR [STEPS=600] [SEED=1] [QUALITY=95] [K_TEST=16]
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac  # the header above
set -euo pipefail
bin=$1 work=$2 steps=${3:-600} seed=${4:-1} quality=${5:-95} k_test=${6:-16}
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
shared=${FNVLP_SHARED_DIR:-$src/../shared}
flickr=$shared/data/flickr8k-128 vocab=$shared/data/vocab/bert-base-uncased-vocab.txt
source "$src/env/mpi-env.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 HDF5_USE_FILE_LOCKING=FALSE
mpirun=(mpirun --oversubscribe -np 2)
mkdir -p "$work"
declare -A codec=([raw]="--image-size 128" [jpeg]="--image-codec jpeg --jpeg-quality $quality")
for name in raw jpeg; do
  for split in train val; do
    [ -f "$work/$name-$split/manifest.json" ] && continue
    # shellcheck disable=SC2086  # the codec's arguments, split on purpose
    "${mpirun[@]}" "$bin/data_prep/fnvlp-shard" --input "$flickr/captions.json" --format albef \
      --image-root "$flickr" --split-file "$flickr/splits.json" --split "$split" \
      --vocab "$vocab" --out "$work/$name-$split" --max-len 30 ${codec[$name]} >/dev/null
  done
  t0=$(date +%s)
  "${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" --config "$src/jobs/configs/tiny.yaml" \
    --data "$work/$name-train" --out "$work/$name-pre" --set train.max_steps="$steps" \
    --set train.seed="$seed" --set train.export_embeddings=false --set train.log_every=100 \
    --set checkpoint.every_steps=0 --set optim.warmup_steps=50 >"$work/$name-pre.log" 2>&1
  t1=$(date +%s)
  "${mpirun[@]}" "$bin/jobs/fnvlp-eval" --checkpoint "$work/$name-pre/checkpoints/latest" \
    --data "$work/$name-val" --out "$work/$name-eval.json" --k-test "$k_test" >/dev/null 2>&1
  echo "$name: pretrain $((t1 - t0)) s"
done
/usr/bin/python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
keys = ["txt_r1", "txt_r5", "txt_r10", "img_r1", "img_r5", "img_r10", "r_mean", "itc_r_mean"]
e = {n: json.load(open(f"{w}/{n}-eval.json")) for n in ("raw", "jpeg")}
print("| shards | " + " | ".join(keys) + " |")
print("|---|" + "---|" * len(keys))
for n in ("raw", "jpeg"):
    print(f"| {n} | " + " | ".join(f"{e[n][k]:.2f}" for k in keys) + " |")
print("| jpeg - raw | " + " | ".join(f"{e['jpeg'][k] - e['raw'][k]:+.2f}" for k in keys) + " |")
PY
