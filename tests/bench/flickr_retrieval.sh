#!/usr/bin/env bash
# Flickr8k-128 downstream check (too slow for CI): shard the train and val splits, pretrain a model
# briefly on train, fine-tune it for retrieval with per-epoch validation, and evaluate the
# pretrained and the best fine-tuned model on the val split (1,000 images, 5,000 captions) with
# ITC + ITM re-ranking. Figures in tests/bench/README.md.
# Usage: flickr_retrieval.sh BUILD_DIR WORK_DIR [PRETRAIN_STEPS] [FINETUNE_STEPS] [K_TEST] [PRESET]
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac  # the header above
set -euo pipefail
bin=$1 work=$2 pre_steps=${3:-600} ft_steps=${4:-300} k_test=${5:-16} preset=${6:-tiny}
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
shared=${FNVLP_SHARED_DIR:-$src/../shared}
flickr=$shared/data/flickr8k-128 vocab=$shared/data/vocab/bert-base-uncased-vocab.txt
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 HDF5_USE_FILE_LOCKING=FALSE
mpirun=(mpirun --oversubscribe -np 2)
mkdir -p "$work"
for split in train val; do
  [ -f "$work/$split/manifest.json" ] ||
    "${mpirun[@]}" "$bin/data_prep/fnvlp-shard" --input "$flickr/captions.json" --format albef \
      --image-root "$flickr" --split-file "$flickr/splits.json" --split "$split" --vocab "$vocab" \
      --out "$work/$split" --image-size 128 --max-len 30 >/dev/null
done
t0=$(date +%s)
"${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" --config "$src/jobs/configs/$preset.yaml" \
  --data "$work/train" --out "$work/pre" --set train.max_steps="$pre_steps" \
  --set train.export_embeddings=false --set train.log_every=50 --set checkpoint.every_steps=0 \
  --set optim.warmup_steps=50
t1=$(date +%s)
"${mpirun[@]}" "$bin/jobs/fnvlp-eval" --checkpoint "$work/pre/checkpoints/latest" \
  --data "$work/val" --out "$work/eval-pre.json" --k-test "$k_test"
t2=$(date +%s)
"${mpirun[@]}" "$bin/jobs/fnvlp-finetune" --config "$src/jobs/configs/retrieval_tiny.yaml" \
  --init "$work/pre/checkpoints/latest" --data "$work/train" --val "$work/val" --out "$work/ft" \
  --set train.max_steps="$ft_steps" --set train.log_every=50 --set checkpoint.every_steps=0 \
  --set eval.k_test="$k_test"
t3=$(date +%s)
"${mpirun[@]}" "$bin/jobs/fnvlp-eval" --checkpoint "$work/ft/best/latest" --data "$work/val" \
  --out "$work/eval-ft.json" --k-test "$k_test"
t4=$(date +%s)
echo "seconds: pretrain $((t1 - t0)), eval $((t2 - t1)), finetune+val $((t3 - t2)), eval $((t4 - t3))"
/usr/bin/python3 - "$work" <<'PY'
import json, sys
from math import comb
w = sys.argv[1]
for name in ("pre", "ft"):
    e = json.load(open(f"{w}/eval-{name}.json"))
    ni, nt = e["images"], e["pairs"]
    chance = (sum(100 * k / ni for k in (1, 5, 10)) / 3 +
              sum(100 * (1 - comb(nt - 5, k) / comb(nt, k)) for k in (1, 5, 10)) / 3) / 2
    print(f"{name}: {ni} images x {nt} captions, k_test {e['k_test']}: "
          f"ITM txt R@1/5/10 {e['txt_r1']:.1f}/{e['txt_r5']:.1f}/{e['txt_r10']:.1f} "
          f"img R@1/5/10 {e['img_r1']:.1f}/{e['img_r5']:.1f}/{e['img_r10']:.1f} r_mean {e['r_mean']:.2f}; "
          f"ITC r_mean {e['itc_r_mean']:.2f}; chance r_mean {chance:.2f}; {e['seconds']:.0f}s")
PY
