#!/usr/bin/env bash
# README command 1 in small: fnvlp-synth -> fnvlp-shard (train and val) -> --verify, then checks
# that counts, splits and semantic labels survive into the shards.
set -euo pipefail
bin=$1 vocab=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/fnvlp_synth_pipeline.XXXXXX")
trap 'rm -rf "$work"' EXIT
mpirun --oversubscribe -np 2 "$bin/data_prep/fnvlp-synth" --out "$work/synth" --images 300 \
  --captions-per-image 5 --classes 12 --image-size 48 --seed 7 --val-fraction 0.2
for split in train val; do
  mpirun --oversubscribe -np 2 "$bin/data_prep/fnvlp-shard" --input "$work/synth/captions.json" \
    --image-root "$work/synth" --split-file "$work/synth/splits.json" --split "$split" \
    --vocab "$vocab" --out "$work/$split" --image-size 48 --shard-size 256 --max-reject-fraction 0
  mpirun --oversubscribe -np 2 "$bin/data_prep/fnvlp-shard" --verify "$work/$split"
done
/usr/bin/python3 - "$work" <<'PY'
import glob, json, sys
import h5py, numpy as np
work = sys.argv[1]
caps = json.load(open(work + "/synth/captions.json"))
splits = json.load(open(work + "/synth/splits.json"))
label_of = {c["image_id"]: c["label"] for c in caps}
for split in ("train", "val"):
    m = json.load(open("%s/%s/manifest.json" % (work, split)))
    n_img = len(splits[split])
    assert m["num_images"] == n_img and m["num_pairs"] == 5 * n_img, (split, m["num_pairs"])
    want = [label_of[c["image_id"]] for c in caps if c["image_id"] in set(splits[split])]
    got = np.concatenate([h5py.File(f, "r")["label"][:]
                          for f in sorted(glob.glob("%s/%s/shard-*.h5" % (work, split)))])
    assert list(got) == want, split + ": labels differ from captions.json"
    assert len(set(want)) > 1
print("synth pipeline: counts, splits and labels OK")
PY
