#!/usr/bin/env python3
"""Builds the sharding test fixture: real Flickr8k-128 images and captions, plus one record of
every kind of bad input fnvlp-shard must reject, in the three input formats.

Writes OUT/captions.json (ALBEF), OUT/coco.json and OUT/tokens.txt (the good records only, same
order), OUT/images/ and OUT/expected.json (what the shards and rejects.jsonl must contain)."""
import argparse
import json
import os
import shutil

from PIL import Image


def patch_sof(jpeg, precision, height, width):
    """The JPEG with its SOF0 frame header's precision and size rewritten."""
    i = jpeg.index(b"\xff\xc0")
    return (jpeg[: i + 4] + bytes([precision]) + height.to_bytes(2, "big")
            + width.to_bytes(2, "big") + jpeg[i + 9:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flickr", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--images", type=int, default=40)
    a = ap.parse_args()

    shutil.rmtree(a.out, ignore_errors=True)
    os.makedirs(os.path.join(a.out, "images"))
    with open(os.path.join(a.flickr, "captions.json"), encoding="utf-8") as f:
        records = json.load(f)
    by_image = {}
    for r in records:
        by_image.setdefault(r["image_id"], []).append(r)
    ids = sorted(by_image)[: a.images]

    img_dir = os.path.join(a.out, "images")
    good = []  # (image file name, caption)
    for i, iid in enumerate(ids):
        src = os.path.join(a.flickr, by_image[iid][0]["image"])
        name = iid + ".jpg"
        if i % 10 == 3:  # some inputs are PNG (real pixels, other codec)
            name = iid + ".png"
            Image.open(src).convert("RGB").save(os.path.join(img_dir, name))
        elif i % 10 == 5:  # not square: --image-codec jpeg keeps the aspect ratio
            Image.open(src).convert("RGB").crop((0, 0, 128, 80)).save(
                os.path.join(img_dir, name), quality=95)
        elif i % 10 == 7:  # CMYK (Adobe), converted to RGB when decoded
            Image.open(src).convert("CMYK").save(os.path.join(img_dir, name), quality=95)
        else:
            shutil.copyfile(src, os.path.join(img_dir, name))
        for r in by_image[iid]:
            good.append((name, r["caption"]))

    real = open(os.path.join(a.flickr, by_image[ids[0]][0]["image"]), "rb").read()
    bad_files = {
        "truncated.jpg": real[: len(real) // 2],
        "no_eoi.jpg": real[:-2],
        "zero.jpg": b"",
        "garbage.jpg": bytes((i * 97 + 13) % 256 for i in range(4000)),
        "corrupt_header.jpg": real[:20] + b"\x00" * 300 + real[320:],
        "huge_header.jpg": patch_sof(real, 8, 60000, 60000),
        "twelve_bit.jpg": patch_sof(real, 12, 128, 128),
    }
    png_path = os.path.join(img_dir, ids[3] + ".png")
    png = open(png_path, "rb").read()
    bad_files["truncated.png"] = png[: len(png) // 2]
    for name, data in bad_files.items():
        with open(os.path.join(img_dir, name), "wb") as f:
            f.write(data)

    # ALBEF JSON, written by hand so that malformed records and raw non-UTF-8 bytes can be in it.
    items = []
    expected_rejects = {}

    def add_good(name, caption):
        items.append(json.dumps({"image": "images/" + name, "caption": caption,
                                 "image_id": os.path.splitext(name)[0]}).encode())

    def add_bad(raw, reason):
        items.append(raw)
        expected_rejects[str(len(items) - 1)] = reason

    bad = [
        (b'{"image": "images/missing.jpg", "caption": "a photo that is not there"}', "missing_image"),
        (b'{"image": "images/truncated.jpg", "caption": "half a jpeg"}', "truncated_image"),
        (b'{"image": "images/no_eoi.jpg", "caption": "a jpeg without its end marker"}', None),
        (b'{"image": "images/zero.jpg", "caption": "an empty file"}', "empty_image"),
        (b'{"image": "images/garbage.jpg", "caption": "not an image at all"}', "unsupported_image"),
        (b'{"image": "images/corrupt_header.jpg", "caption": "a damaged header"}', None),
        (b'{"image": "images/truncated.png", "caption": "half a png"}', None),
        (b'{"image": "images/' + ids[0].encode() + b'.jpg", "caption": ""}', "empty_caption"),
        (b'{"image": "images/' + ids[0].encode() + b'.jpg", "caption": "  \\t \\n "}', "empty_caption"),
        (b'{"image": "images/' + ids[1].encode() + b'.jpg", "caption": "caf\xe9 latin-1"}', "invalid_utf8"),
        (b'{"image": "images/' + ids[1].encode() + b'.jpg", "caption": }', "malformed_record"),
        (b'{"image": "images/' + ids[1].encode() + b'.jpg"}', "malformed_record"),
    ]
    # Inputs that must be refused before a byte is read (issue 28): paths resolving outside the
    # image root (a real image, so only the confinement rejects it), a device, a FIFO without a
    # writer (would block a reader forever) and a sparse 10 GB file (above the 64 MiB cap).
    outside = os.path.abspath(os.path.join(a.flickr, by_image[ids[0]][0]["image"]))
    os.symlink(outside, os.path.join(img_dir, "escape.jpg"))
    os.mkfifo(os.path.join(img_dir, "fifo.jpg"))
    with open(os.path.join(img_dir, "huge.jpg"), "wb") as f:
        f.truncate(10 << 30)

    def record(path, caption):
        return json.dumps({"image": path, "caption": caption}).encode()

    bad += [
        (record(os.path.relpath(outside, os.path.abspath(a.out)), "a dot-dot escape"),
         "image_outside_root"),
        (record(outside, "an absolute path elsewhere"), "image_outside_root"),
        (record("images/escape.jpg", "a symlink out of the root"), "image_outside_root"),
        (record("/dev/zero", "endless zeros"), "image_not_regular_file"),
        (record("images/fifo.jpg", "a pipe nobody writes"), "image_not_regular_file"),
        (record("images/huge.jpg", "ten gigabytes of nothing"), "image_too_large"),
    ]
    # Interleave: a bad record after every few good ones, so bad input lands in several shards.
    g = iter(good)
    for raw, reason in bad:
        for _ in range(9):
            name, cap = next(g)
            add_good(name, cap)
        add_bad(raw, reason or "image_error")
    for name, cap in g:
        add_good(name, cap)
    # Hostile JPEG headers last, so that the layout above (no image's captions split across
    # shards) stays as it was.
    add_bad(b'{"image": "images/huge_header.jpg", "caption": "claims 60000 x 60000"}',
            "unsupported_image")
    add_bad(b'{"image": "images/twelve_bit.jpg", "caption": "twelve bits per sample"}',
            "image_error")
    with open(os.path.join(a.out, "captions.json"), "wb") as f:
        f.write(b"[\n" + b",\n".join(items) + b"\n]\n")

    names = sorted({n for n, _ in good})
    coco = {"images": [{"id": 1000 + i, "file_name": "images/" + n} for i, n in enumerate(names)],
            "annotations": [{"image_id": 1000 + names.index(n), "id": k, "caption": c}
                            for k, (n, c) in enumerate(good)]}
    with open(os.path.join(a.out, "coco.json"), "w", encoding="utf-8") as f:
        json.dump(coco, f)
    with open(os.path.join(a.out, "tokens.txt"), "w", encoding="utf-8") as f:
        for k, (n, c) in enumerate(good):
            f.write("%s#%d\t%s\n" % (n, k % 5, c))

    with open(os.path.join(a.out, "expected.json"), "w") as f:
        json.dump({"records": len(items), "pairs": len(good), "images": len(names),
                   "rejects": expected_rejects}, f, indent=1)


if __name__ == "__main__":
    main()
