#!/usr/bin/env python3
"""The baseline for tests/bench: fnvlp-shard's job written plainly in Python with Debian's
python3-pil, python3-h5py and numpy. Same input, same outputs (shards with the ARCHITECTURE.md §2 schema,
chunked + Fletcher32, sha256, manifest), single process, as a user would write it."""
import argparse
import hashlib
import json
import os
import sys
import time

import h5py
import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wordpiece import WordPiece  # noqa: E402


def load_square(path, size):
    img = Image.open(path)
    img.draft("RGB", (size, size))  # JPEG DCT scaling, as fnvlp-shard does
    img = img.convert("RGB")
    w, h = img.size
    scale = size / min(w, h)
    nw, nh = max(size, round(w * scale)), max(size, round(h * scale))
    if (nw, nh) != (w, h):
        img = img.resize((nw, nh), Image.BILINEAR)
    left, top = (nw - size) // 2, (nh - size) // 2
    return np.asarray(img.crop((left, top, left + size, top + size)), dtype=np.uint8)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", required=True)
    ap.add_argument("--image-root", required=True)
    ap.add_argument("--vocab", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--split-file")
    ap.add_argument("--split")
    ap.add_argument("--image-size", type=int, default=128)
    ap.add_argument("--max-len", type=int, default=30)
    ap.add_argument("--shard-size", type=int, default=4096)
    ap.add_argument("--image-chunk", type=int, default=8)
    a = ap.parse_args()
    t0 = time.time()

    tok = WordPiece(a.vocab)
    vocab_sha = hashlib.sha256(open(a.vocab, "rb").read()).hexdigest()
    records = json.load(open(a.input, encoding="utf-8"))
    if a.split:
        keep = set(json.load(open(a.split_file))[a.split])
        records = [r for r in records if r["image_id"] in keep]
    os.makedirs(a.out, exist_ok=True)

    # Shards of shard_size captions, never splitting one image's consecutive captions.
    bounds, b = [], 0
    while b < len(records):
        e = min(len(records), b + a.shard_size)
        while e < len(records) and records[e]["image"] == records[e - 1]["image"]:
            e += 1
        bounds.append((b, e))
        b = e

    S, L = a.image_size, a.max_len
    image_ids, shards, decoded = {}, [], 0
    for si, (b, e) in enumerate(bounds):
        rows, pixels = {}, []
        n = e - b
        tokens = np.zeros((n, L), np.int32)
        lengths = np.zeros(n, np.int16)
        pair_image = np.zeros(n, np.int64)
        pair_id = np.arange(b, e, dtype=np.int64)
        image_id = np.zeros(n, np.int64)
        for i, r in enumerate(records[b:e]):
            ids = tok.encode(r["caption"], L)
            tokens[i, : len(ids)] = ids
            lengths[i] = len(ids)
            if r["image"] not in rows:
                rows[r["image"]] = len(pixels)
                pixels.append(load_square(os.path.join(a.image_root, r["image"]), S))
                decoded += 1
            pair_image[i] = rows[r["image"]]
            image_id[i] = image_ids.setdefault(r["image"], len(image_ids))
        name = "shard-%05d.h5" % si
        tmp = os.path.join(a.out, "." + name + ".tmp")
        with h5py.File(tmp, "w", track_order=False) as f:
            f.attrs.update(fnvlp_schema=1, created_by="reference_shard.py", image_size=S,
                           max_len=L, vocab_sha256=vocab_sha, num_pairs=n)
            f.create_dataset("images", data=np.stack(pixels), chunks=(a.image_chunk, S, S, 3),
                             fletcher32=True, maxshape=(None, S, S, 3))
            for key, arr in (("pair_image", pair_image), ("tokens", tokens), ("lengths", lengths),
                             ("pair_id", pair_id), ("image_id", image_id),
                             ("label", np.full(n, -1, np.int32))):
                f.create_dataset(key, data=arr, chunks=(min(n, 4096),) + arr.shape[1:],
                                 fletcher32=True)
        sha = hashlib.sha256(open(tmp, "rb").read()).hexdigest()
        os.rename(tmp, os.path.join(a.out, name))
        shards.append({"file": name, "first_pair_id": b, "num_pairs": n,
                       "num_images": len(pixels), "sha256": sha})
    manifest = {"num_pairs": len(records), "num_images": len(image_ids), "shards": shards}
    json.dump(manifest, open(os.path.join(a.out, "manifest.json"), "w"), indent=1)
    dt = time.time() - t0
    print("reference_shard.py: %d pairs, %d images decoded, %.2f s, %.0f images/s"
          % (len(records), decoded, dt, decoded / dt))


if __name__ == "__main__":
    main()
