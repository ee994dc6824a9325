#!/usr/bin/env bash
# Downstream end to end on synthetic data (2 ranks): fnvlp-synth -> fnvlp-shard -> fnvlp-pretrain
# (tiny, 4 epochs) -> fnvlp-eval (ITC + ITM re-ranking, linear probe) -> fnvlp-finetune (1 epoch
# from the pretrained checkpoint, val every epoch, best kept) -> fnvlp-eval of RUN/best/latest.
# Retrieval must be far above chance, which is computed here for this gallery (40 images, 5
# captions each).
set -euo pipefail
bin=$1 vocab=$2 src=$3
# shellcheck source=tests/integration/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" eval_synth
synth_data "$work/synth" 400 5 8 3
for split in train val; do shard_split "$work/synth" "$split" "$work/$split"; done
"${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" --config "$src/jobs/configs/tiny.yaml" --data "$work/train" \
  --out "$work/pre" --set train.epochs=4 --set train.log_every=28 \
  --set train.export_embeddings=false >/dev/null
"${mpirun[@]}" "$bin/jobs/fnvlp-eval" --checkpoint "$work/pre/checkpoints/latest" --data "$work/val" \
  --out "$work/eval-pre.json" --k-test 32 --probe --probe-train "$work/train"
"${mpirun[@]}" "$bin/jobs/fnvlp-finetune" --config "$src/jobs/configs/retrieval_tiny.yaml" \
  --init "$work/pre/checkpoints/latest" --data "$work/train" --val "$work/val" --out "$work/ft" \
  --set train.epochs=1 --set train.log_every=28 >/dev/null
"${mpirun[@]}" "$bin/jobs/fnvlp-eval" --checkpoint "$work/ft/best/latest" --data "$work/val" \
  --out "$work/eval-ft.json" --k-test 32
/usr/bin/python3 - "$work" <<'PY'
import json, sys
from math import comb
w = sys.argv[1]
pre, ft = json.load(open(f"{w}/eval-pre.json")), json.load(open(f"{w}/eval-ft.json"))
best = json.load(open(f"{w}/ft/best.json"))
val = [json.loads(l) for l in open(f"{w}/ft/metrics.jsonl") if "val_r_mean" in l]
ni, nt = pre["images"], pre["pairs"]
assert (ni, nt) == (40, 200), (ni, nt)
# Chance of a random ranking: image retrieval R@K = K / ni; text retrieval (5 of nt captions are
# positives) R@K = 1 - C(nt - 5, K) / C(nt, K).
img = {k: 100 * k / ni for k in (1, 5, 10)}
txt = {k: 100 * (1 - comb(nt - 5, k) / comb(nt, k)) for k in (1, 5, 10)}
chance = (sum(img.values()) / 3 + sum(txt.values()) / 3) / 2
print("chance r_mean %.1f (img R@1 %.1f, txt R@1 %.1f)" % (chance, img[1], txt[1]))
for name, e in (("pretrained", pre), ("fine-tuned best", ft)):
    print("%s: ITM txt R@1 %.1f img R@1 %.1f r_mean %.1f | ITC txt R@1/10 %.1f/%.1f img R@1/10 "
          "%.1f/%.1f r_mean %.1f" % (name, e["txt_r1"], e["img_r1"], e["r_mean"], e["itc_txt_r1"],
                                    e["itc_txt_r10"], e["itc_img_r1"], e["itc_img_r10"], e["itc_r_mean"]))
print("probe accuracy %.1f%% (train %.1f%%, majority-class chance %.1f%%, %d classes)"
      % (pre["probe_accuracy"], pre["probe_train_accuracy"], pre["probe_chance"], pre["probe_classes"]))
# ITC ranks far above chance after 4 epochs. The ITM head of so short a run still sits near the
# class prior (its loss ~0.637 = entropy of 1 positive : 2 negatives), so re-ranking by it is
# asked only to stay clearly above chance, for the fine-tuned model.
for e in (pre, ft):
    assert e["itc_r_mean"] > 2 * chance, "ITC retrieval not far above chance"
assert ft["r_mean"] > 1.5 * chance, "ITM re-ranked retrieval of the fine-tuned model near chance"
assert ft["itc_r_mean"] > pre["itc_r_mean"], "retrieval fine-tuning did not improve ITC retrieval"
assert pre["probe_accuracy"] > 2 * pre["probe_chance"], "linear probe not far above chance"
# Class-level retrieval (8 classes): a query's own image or caption is of its class, so every
# image-level hit is a class-level hit; all 40 images and 200 captions are labelled queries; a
# random ranking hits the class at R@1 about 1/8 of the time, the trained model far more often.
for e in (pre, ft):
    assert (e["class_queries_images"], e["class_queries_texts"]) == (40, 200), e
    for p in ("", "itc_"):
        for d in ("txt", "img"):
            for k in (1, 5, 10):
                assert e[f"{p}{d}_r{k}"] <= e[f"class_{p}{d}_r{k}"] <= 100, (p, d, k, e)
    assert e["class_itc_img_r1"] > 2 * 100 / 8, "class-level image retrieval not above chance"
print("class-level: ITM txt R@1 %.1f img R@1 %.1f r_mean %.1f | ITC r_mean %.1f"
      % (pre["class_txt_r1"], pre["class_img_r1"], pre["class_r_mean"], pre["class_itc_r_mean"]))
assert len(val) == 1 and val[0]["val_k_test"] == 16, val
assert abs(best["value"] - val[0]["val_r_mean"]) < 1e-9 and best["step"] == val[0]["step"]
# The best checkpoint evaluated at k_test 32 differs from the per-epoch k_test 16 only by re-ranking.
assert abs(ft["itc_r_mean"] - val[0]["val_itc_r_mean"]) < 1e-9, (ft["itc_r_mean"], val[0])
PY
echo "eval_synth: OK"
