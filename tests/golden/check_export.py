#!/usr/bin/env python3
"""ctest weights.export_twin: the safetensors file fnvlp exported (test_weights_io.cpp's
RoundTripIsBitwiseAndKeepsAlbefNames, ALBEF's names) loads into the PyTorch twin through
albef_names.from_albef with strict=True, and the twin then computes the ITC similarities and ITM
logits of make_weights.py's reference batch: the way USAGE.md "Weights in and out" tells a
PyTorch user to load an export.

    python check_export.py DIR     (DIR: make_weights.py's --out, holding export.safetensors)
"""
import os
import sys

import h5py
import torch
import torch.nn.functional as F
import yaml
from safetensors import safe_open
from safetensors.torch import load_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench"))
import albef_names as names  # noqa: E402
import make_weights  # noqa: E402
import pytorch_albef as twin  # noqa: E402


def main():
    d = sys.argv[1]
    path = os.path.join(d, "export.safetensors")
    with safe_open(path, framework="pt") as f:
        meta = f.metadata()
    assert meta["format"] == "pt" and meta["fnvlp.layout"] == "albef", meta
    # The model config from the file's own metadata, as USAGE.md "Weights in and out" does.
    m = yaml.safe_load(meta["fnvlp.model"])
    assert all(m[k] == v for k, v in make_weights.MODEL.items()), (m, make_weights.MODEL)
    sd = load_file(path)
    model = twin.Albef(m).eval()
    model.load_state_dict(names.from_albef(sd, m, model.state_dict().keys()), strict=True)
    unused = set(sd) - {n for n in names.to_albef(model.state_dict(), m)}
    assert unused == {"text_encoder.cls.predictions.decoder.weight",
                      "text_encoder.cls.predictions.decoder.bias"}, unused
    with h5py.File(os.path.join(d, "ref.h5"), "r") as r:
        x, ids, mask = (torch.from_numpy(r[k][()]) for k in ("images", "ids", "mask"))
        img_ref, txt_ref = torch.from_numpy(r["image_embed"][()]), torch.from_numpy(r["text_embed"][()])
        itm_ref = torch.from_numpy(r["itm_logits"][()])
    with torch.no_grad():
        tokens, hidden = model.encode_image(x), model.encode_text(ids, mask)
        img = F.normalize(model.vision_proj(tokens[:, 0]), dim=-1)
        txt = F.normalize(model.text_proj(hidden[:, 0]), dim=-1)
        itm = model.itm_head(model.fuse(hidden, mask, tokens)[:, 0])
    sim, sim_ref = img @ txt.t(), img_ref @ txt_ref.t()
    err = max((sim - sim_ref).abs().max().item(), (itm - itm_ref).abs().max().item())
    print(f"check_export: {len(sd)} tensors; ITC similarities and ITM logits of the exported "
          f"weights in the twin against the reference: max |diff| {err:.2e}")
    if not err < 1e-5:
        sys.exit("check_export: the twin does not reproduce the reference from fnvlp's export")


if __name__ == "__main__":
    main()
