#!/usr/bin/env python3
"""Writes the weight files of ctest weights.import (test_weights_io.cpp) into --out: one randomly
initialised PyTorch twin (tests/bench/pytorch_albef.py) saved under other projects' names
(tests/bench/albef_names.py), as safetensors (the `safetensors` package) and as torch.save zips,
with the twin's forward on a fixed batch for fnvlp to match after importing them:

  deit.safetensors, deit.pth   timm ViT names (+ the classifier head, unused), {"model": sd}
  bert.safetensors, bert.bin   BertForMaskedLM names; 40 positions (the model has 16), the
                               position_ids buffer, pooler and tied decoder (unused)
  albef.pth                    ALBEF's names, {"model": sd, "config": ..., "epoch": ...}, with
                               momentum copies and queues as ALBEF_4M.pth has them
  bert_ln_gamma.bin            bert.bin with TensorFlow-era LayerNorm names (gamma, beta)
  twin_state_dict.pt           the twin's own state_dict() (fnvlp's names, an OrderedDict)
  model.yaml, model48.yaml     the model config; the same at 48 px (grid 6 instead of 4)
  ref.h5                       images (normalised), ids, mask; the twin's image tokens, text
                               hidden states, ITC embeddings, ITM logits; the position embedding
                               interpolated to 48 px by ALBEF's interpolate_pos_embed

Run by tests/golden/weights_python.sh (env/install-python.sh's venv: Debian's torch and h5py
plus PyPI's safetensors).
"""
import argparse
import os
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench"))
import albef_names as names  # noqa: E402
import pytorch_albef as twin  # noqa: E402

MODEL = {
    "image_size": 32, "patch_size": 8, "vision_width": 64, "vision_layers": 2, "vision_heads": 4,
    "text_width": 64, "text_layers": 2, "fusion_layers": 2, "text_heads": 4, "mlp_ratio": 4,
    "vocab_size": 512, "max_len": 16, "embed_dim": 32, "dropout": 0.0, "temp": 0.07,
    "temp_min": 0.001, "temp_max": 0.5,
}
BATCH = 4


def write_yaml(path, m):
    with open(path, "w") as f:
        for k, v in m.items():
            f.write(f"{k}: {v}\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--config", help="a job config whose model section replaces the small model "
                    "here (tests/integration/weights_run.sh: jobs/configs/tiny.yaml)")
    ap.add_argument("--bench", action="store_true",
                    help="only the model in ALBEF's names, as albef.safetensors and albef.pth, "
                    "and model.yaml (tests/bench/bench_weights.sh)")
    a = ap.parse_args()
    global MODEL
    if a.config:
        MODEL = dict(MODEL, **twin.load_config(a.config)["model"])
    if a.bench:
        os.makedirs(a.out, exist_ok=True)
        torch.manual_seed(7)
        sd = names.to_albef(twin.Albef(MODEL).state_dict(), MODEL)
        save_file(sd, os.path.join(a.out, "albef.safetensors"))
        torch.save({"model": sd}, os.path.join(a.out, "albef.pth"))
        write_yaml(os.path.join(a.out, "model.yaml"), MODEL)
        return
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(7)
    torch.set_num_threads(1)
    model = twin.Albef(MODEL).eval()
    g = torch.Generator().manual_seed(8)
    with torch.no_grad():  # non-trivial biases and LayerNorms, so a dropped one shows
        for n, p in model.named_parameters():
            if n.endswith(".bias") or n == "mlm_bias":
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
            elif "norm" in n.lower() and n.endswith(".weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
        model.temp.fill_(0.05)
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}

    deit = names.to_timm(sd)
    deit["head.weight"] = torch.randn(10, MODEL["vision_width"], generator=g)
    deit["head.bias"] = torch.zeros(10)
    save_file(deit, os.path.join(a.out, "deit.safetensors"), metadata={"format": "pt"})
    torch.save({"model": deit}, os.path.join(a.out, "deit.pth"))

    bert = names.to_hf_bert(sd, MODEL)
    pos = bert["bert.embeddings.position_embeddings.weight"]
    bert["bert.embeddings.position_embeddings.weight"] = torch.cat(
        [pos, torch.randn(40 - pos.shape[0], pos.shape[1], generator=g)])
    bert["bert.embeddings.position_ids"] = torch.arange(40).unsqueeze(0)
    bert["bert.pooler.dense.weight"] = torch.randn(MODEL["text_width"], MODEL["text_width"])
    bert["bert.pooler.dense.bias"] = torch.zeros(MODEL["text_width"])
    bert["cls.predictions.decoder.weight"] = sd["text_embeddings.word_embeddings"].clone()
    save_file(bert, os.path.join(a.out, "bert.safetensors"))
    torch.save(bert, os.path.join(a.out, "bert.bin"))
    gamma = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias",
                                                                      "LayerNorm.beta"): v
             for k, v in bert.items()}
    torch.save(gamma, os.path.join(a.out, "bert_ln_gamma.bin"))

    albef = names.to_albef(sd, MODEL)
    momentum = {}
    for k, v in albef.items():
        head, _, rest = k.partition(".")
        if head in ("visual_encoder", "text_encoder", "vision_proj", "text_proj"):
            momentum[f"{head}_m.{rest}"] = v + 0.01
    albef.update(momentum)
    albef["image_queue"] = F.normalize(torch.randn(MODEL["embed_dim"], 64, generator=g), dim=0)
    albef["text_queue"] = F.normalize(torch.randn(MODEL["embed_dim"], 64, generator=g), dim=0)
    albef["queue_ptr"] = torch.zeros(1, dtype=torch.long)
    albef["text_encoder.cls.predictions.decoder.weight"] = sd["text_embeddings.word_embeddings"]
    torch.save({"model": albef, "config": {"queue_size": 64, "temp": 0.05}, "epoch": 29},
               os.path.join(a.out, "albef.pth"))

    # nn.Module.state_dict() itself: an OrderedDict with _metadata (pickled through BUILD).
    torch.save(model.state_dict(), os.path.join(a.out, "twin_state_dict.pt"))

    write_yaml(os.path.join(a.out, "model.yaml"), MODEL)
    write_yaml(os.path.join(a.out, "model48.yaml"), dict(MODEL, image_size=48))

    rng = np.random.RandomState(9)
    s = MODEL["image_size"]
    images = torch.from_numpy(rng.randint(0, 256, (BATCH, s, s, 3)).astype(np.uint8))
    x = images.permute(0, 3, 1, 2).float()
    x = ((x / 255 - torch.tensor(twin.MEAN).view(1, 3, 1, 1)) /
         torch.tensor(twin.STD).view(1, 3, 1, 1)).contiguous()
    L = MODEL["max_len"]
    ids = torch.from_numpy(rng.randint(1, MODEL["vocab_size"], (BATCH, L)).astype(np.int64))
    mask = torch.ones(BATCH, L, dtype=torch.long)
    mask[1, 10:] = 0
    mask[3, 5:] = 0
    with torch.no_grad():
        image_tokens = model.encode_image(x)
        text_hidden = model.encode_text(ids, mask)
        img = F.normalize(model.vision_proj(image_tokens[:, 0]), dim=-1)
        txt = F.normalize(model.text_proj(text_hidden[:, 0]), dim=-1)
        itm = model.itm_head(model.fuse(text_hidden, mask, image_tokens)[:, 0])
        pos48 = names.interpolate_pos_embed(sd["visual_encoder.pos_embed"],
                                            (48 // MODEL["patch_size"]) ** 2)
    with h5py.File(os.path.join(a.out, "ref.h5"), "w") as f:
        for k, v in {"images": x, "ids": ids, "mask": mask, "image_tokens": image_tokens,
                     "text_hidden": text_hidden, "image_embed": img, "text_embed": txt,
                     "itm_logits": itm, "pos_embed_48": pos48}.items():
            f[k] = v.numpy()
    print(f"make_weights: {len(os.listdir(a.out))} files in {a.out} (torch {torch.__version__})")


if __name__ == "__main__":
    main()
