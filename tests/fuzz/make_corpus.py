#!/usr/bin/python3
"""Regenerates the seed corpora of tests/fuzz/corpus/ from the real data in shared/. Small on
purpose: a few KB per target. The image corpus (real photos re-encoded) is not committed: the fuzz
tests make it at test time with --images-only (ctest fixture fuzz.image_corpus).
Usage: make_corpus.py SHARED_DIR OUT_CORPUS_DIR [SHARD_DIR] [--images-only]
SHARD_DIR: a tiny dataset made by fnvlp-shard from these images (manifest.json + shard-*.h5)."""
import io, json, os, shutil, sys
from PIL import Image

images_only = "--images-only" in sys.argv
args = [a for a in sys.argv[1:] if a != "--images-only"]
shared, out = args[0], args[1]
shard_dir = args[2] if len(args) > 2 else None
flickr = os.path.join(shared, "data/flickr8k-128")
records = json.load(open(os.path.join(flickr, "captions.json")))[:12]
images = sorted({r["image"] for r in records})[:3]

def put(target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())

# image: real photos downscaled, as baseline/progressive/greyscale JPEG and RGB/RGBA/palette PNG.
for i, rel in enumerate(images):
    im = Image.open(os.path.join(flickr, rel)).convert("RGB")
    im.thumbnail((40, 40))
    for kind in ("jpeg", "jpeg-progressive", "jpeg-grey", "png", "png-rgba", "png-palette"):
        b = io.BytesIO()
        if kind == "jpeg":
            im.save(b, "JPEG", quality=60)
        elif kind == "jpeg-progressive":
            im.save(b, "JPEG", quality=60, progressive=True)
        elif kind == "jpeg-grey":
            im.convert("L").save(b, "JPEG", quality=60)
        elif kind == "png":
            im.save(b, "PNG")
        elif kind == "png-rgba":
            im.convert("RGBA").save(b, "PNG")
        else:
            im.convert("P", palette=Image.ADAPTIVE, colors=16).save(b, "PNG")
        if i == 0 or kind in ("jpeg", "png"):
            put("image", "%s-%d.%s" % (kind, i, "png" if kind.startswith("png") else "jpg"),
                b.getvalue())

if images_only:
    sys.exit(0)

# tokenizer: real captions, plus accents and CJK the uncased BERT path normalises.
for i, r in enumerate(records[:8]):
    put("tokenizer", "caption-%d.txt" % i, r["caption"])
put("tokenizer", "unicode.txt", "Café naïve RÉSUMÉ — 東京 don't [MASK] ##ing".encode())

# ingest: the first byte selects the reader (0 albef, 1 coco, 2/3 flickr-token, 4 splits).
albef = json.dumps(records[:4], indent=1)
put("ingest", "albef.json", b"\x00" + albef.encode())
coco = {"images": [{"id": k, "file_name": rel} for k, rel in enumerate(images)],
        "annotations": [{"id": n, "image_id": images.index(r["image"]), "caption": r["caption"]}
                        for n, r in enumerate(records) if r["image"] in images]}
put("ingest", "coco.json", b"\x01" + json.dumps(coco).encode())
tokens = "".join("%s#%d\t%s\n" % (os.path.basename(r["image"]), n % 5, r["caption"])
                 for n, r in enumerate(records[:6]))
put("ingest", "flickr.token.txt", b"\x02" + tokens.encode())
put("ingest", "flickr-split.token.txt", b"\x03" + tokens.encode())
splits = json.load(open(os.path.join(flickr, "splits.json")))
put("ingest", "splits.json", b"\x04" + json.dumps({k: v[:3] for k, v in splits.items()}).encode())

# shard / manifest: a tiny real dataset from fnvlp-shard.
if shard_dir:
    put("manifest", "manifest.json", open(os.path.join(shard_dir, "manifest.json"), "rb").read())
    for n in sorted(os.listdir(shard_dir)):
        if n.endswith(".h5"):
            put("shard", n, open(os.path.join(shard_dir, n), "rb").read())
