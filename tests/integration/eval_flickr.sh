#!/usr/bin/env bash
# Downstream on real data (2 ranks): the Flickr8k-128 val split (1,000 images x 5,000 captions)
# evaluated by fnvlp-eval (ITC + ITM re-ranking) with a tiny model pretrained briefly on the train
# split (the integration.flickr_shard fixture). A few hundred steps of a 5 M-parameter model from
# scratch are far from ALBEF's numbers; what the test asks is the real-data path end to end (five
# captions per image counted as five positives, ALBEF's metric names, recalls consistent with each
# other) and retrieval above chance by more than sampling noise could explain. The val split is
# sharded as JPEG streams (--image-codec jpeg), so evaluation decodes them; a few steps of training
# on it (with itself as --val) run the training augmentation's decode and crop too.
# Usage: eval_flickr.sh BUILD_DIR VOCAB SRC_DIR SHARED_DIR TRAIN_SHARDS [STEPS] [K_TEST]
set -euo pipefail
bin=$1 vocab=$2 src=$3 shared=$4 train=$5 steps=${6:-300} k_test=${7:-4}
flickr=$shared/data/flickr8k-128
# shellcheck source=tests/integration/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" eval_flickr
# The val split as JPEG streams at the model's resolution (64 px, the longer side).
"${mpirun[@]}" "$bin/data_prep/fnvlp-shard" --input "$flickr/captions.json" --format albef \
  --image-root "$flickr" --split-file "$flickr/splits.json" --split val --vocab "$vocab" \
  --out "$work/val" --image-codec jpeg --max-side 64 --max-len 30 --max-reject-fraction 0 \
  >/dev/null
"${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" --config "$src/jobs/configs/tiny.yaml" --data "$train" \
  --out "$work/pre" --set train.max_steps="$steps" --set train.export_embeddings=false \
  --set train.log_every=50 --set checkpoint.every_steps=0 --set optim.warmup_steps=30 >/dev/null
"${mpirun[@]}" "$bin/jobs/fnvlp-eval" --checkpoint "$work/pre/checkpoints/latest" \
  --data "$work/val" --out "$work/eval.json" --k-test "$k_test"
/usr/bin/python3 - "$work/eval.json" "$k_test" <<'PY'
import json, sys
from math import comb, sqrt
e, k_test = json.load(open(sys.argv[1])), int(sys.argv[2])
ni, nt = e["images"], e["pairs"]
assert (ni, nt, e["k_test"], e["ranks"]) == (1000, 5000, k_test, 2), (ni, nt, e["k_test"], e["ranks"])
assert not any(k.startswith("class_") for k in e), "class-level retrieval on unlabelled Flickr8k"
for p in ("", "itc_"):
    for d in ("txt", "img"):
        r = [e[f"{p}{d}_r{k}"] for k in (1, 5, 10)]
        assert 0 <= r[0] <= r[1] <= r[2] <= 100, (p, d, r)
        assert abs(e[f"{p}{d}_r_mean"] - sum(r) / 3) < 1e-9, (p, d)
    assert abs(e[f"{p}r_mean"] - (e[f"{p}txt_r_mean"] + e[f"{p}img_r_mean"]) / 2) < 1e-9, p
# ITM re-scores only the ITC top k_test; a positive outside it is a miss at every K (ALBEF's -inf
# fill). So with k_test <= 5, ITM R@5 = R@10 = the ITC hit rate in the top k_test <= ITC R@5.
if k_test <= 5:
    for d in ("txt", "img"):
        assert e[f"{d}_r5"] == e[f"{d}_r10"] <= e[f"itc_{d}_r5"], (d, e)
# Chance under a random ranking. Text retrieval: one query per image, 5 of nt captions positive,
# R@K = 1 - C(nt-5, K)/C(nt, K). Image retrieval: one query per caption, R@K = K/ni. Binomial
# standard deviations in percent; the r_mean bound sums them (R@1/5/10 are nested, so correlated).
txt = {k: 1 - comb(nt - 5, k) / comb(nt, k) for k in (1, 5, 10)}
img = {k: k / ni for k in (1, 5, 10)}
chance = 100 * (sum(txt.values()) + sum(img.values())) / 6
sd = 100 * (sum(sqrt(p * (1 - p) / ni) for p in txt.values()) +
            sum(sqrt(p * (1 - p) / nt) for p in img.values())) / 6
z = (e["itc_r_mean"] - chance) / sd
print("Flickr8k val: ITM txt R@1/5/10 %.1f/%.1f/%.1f img R@1/5/10 %.1f/%.1f/%.1f r_mean %.2f; "
      "ITC r_mean %.2f; chance %.2f (sd <= %.2f, ITC z >= %.1f); %.0f s"
      % (e["txt_r1"], e["txt_r5"], e["txt_r10"], e["img_r1"], e["img_r5"], e["img_r10"],
         e["r_mean"], e["itc_r_mean"], chance, sd, z, e["seconds"]))
assert z > 3.5, "ITC retrieval on Flickr8k val not above chance (z %.1f)" % z
PY
"${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" --config "$src/jobs/configs/tiny.yaml" --data "$work/val" \
  --val "$work/val" --out "$work/pre-jpeg" --set train.max_steps=4 --set train.log_every=2 \
  --set train.export_embeddings=false --set checkpoint.every_steps=0 >"$work/pre-jpeg.log" 2>&1 ||
  { cat "$work/pre-jpeg.log"; exit 1; }
grep -q "val epoch=0 .*r_mean=" "$work/pre-jpeg.log" || { cat "$work/pre-jpeg.log"; exit 1; }
echo "eval_flickr: OK"
