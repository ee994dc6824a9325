#!/usr/bin/env python3
"""Writes tiny_step.h5 (ctest golden.make: into the build directory): one ALBEF training step and
ten AdamW steps of the PyTorch twin (tests/bench/pytorch_albef.py) on a fixed batch, for
tests/golden/test_golden.cpp to replay through fnvlp's own model, losses and optimizer (llm.c's
test_gpt2 scheme).

Run with Debian's python3 (python3-torch 1.13, python3-h5py) from the repository root:
    /usr/bin/python3 tests/golden/make_golden.py [--config tests/golden/golden.yaml]
        [--out build/tests/golden/tiny_step.h5]
The result depends only on the config and the seed (one thread, fixed draws); README.md says when
to regenerate.

Nothing random has to match across the two frameworks: the file carries the initial weights (by
fnvlp's parameter names), the images, token ids, every step's MLM masks and ITM negatives. The twin
draws the negatives with its own multinomial sampler (ALBEF's hard negatives); fnvlp is handed them.

Layout (float32 unless said otherwise; every dataset but scalars gzip-compressed):
  /config            attributes: the model sizes, optim and loss settings, seed, batch, steps,
                     total_steps (the learning-rate schedule's length)
  /tolerances        attributes: rtol_* / atol_*, `why` (README.md "Tolerances"), and
                     float32_vs_float64_*: the twin's float32 run against its float64 run
  /inputs/images     uint8 [B, H, W, 3] (normalised by each side's own code)
  /inputs/ids, mask, image_id                  int64 [B, L], [B, L], [B]
  /inputs/mlm_input_ids int64 [S, B, L], mlm_selected uint8 [S, B, L]   per step
  /inputs/itm_neg_image, itm_neg_text          int64 [S, B]                per step
  /params/NAME       initial weights (multiples of 2^-12, see golden_init)
  /grads/NAME        gradients of step 0 before clipping, rounded to GRAD_BITS significant bits
  /forward/losses    float64 [4]: itc, itm, mlm, total of step 0
  /forward/LOGITS_checksum float64 [3]: sum, sum of squares, sum of |x|, and LOGITS_sample
                     (float32 [8] at LOGITS_sample_index, int64 flat indices), for itc_i2t,
                     itc_t2i, itm, mlm
  /steps/losses      float64 [S, 4]; /steps/grad_norm, /steps/lr float64 [S]
"""
import argparse
import os
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench"))
import pytorch_albef as twin  # noqa: E402

SCHEMA = 1
N_SAMPLE = 8  # logits elements stored besides the checksums

# Tolerances, read by test_golden.cpp from the file; README.md "Tolerances" has the measurements
# they rest on (fnvlp against this twin, and this twin's float32 against its float64 run).
TOLERANCES = {
    "rtol_loss": 2e-6,       # step-0 losses, relative
    "rtol_logits": 2e-5,     # logits: sum and sampled elements against mean |x|; sums of
                             # squares and of |x| relative, halved
    "rtol_grad": 5e-4,       # per tensor: ||g - ref|| <= rtol ||ref|| + atol sqrt(n)
    "atol_grad": 1e-9,
    "rtol_grad_norm": 2e-5,  # global gradient norm (summed in double), relative
    "rtol_clip_norm": 1e-3,  # FlatGradients::clip_scale's norm (float32 sum), relative
    "rtol_step_loss": 1e-5,  # losses of the AdamW steps, relative
}
WHY = ("float32 against float32 with different summation orders (fused kernels, OpenBLAS "
       "blocking) and fnvlp's polynomial erfc/exp; each tolerance is 5-20x the largest "
       "difference measured between fnvlp and this file (tests/golden/README.md)")
# Gradients are stored rounded to this many significant bits (float32 has 24): a relative error
# of at most 2^-16 = 1.5e-5 per element, 30x below rtol_grad, for a file 1.3 MB smaller.
GRAD_BITS = 16


WEIGHT_GRID = 2.0 ** -12


def golden_init(model, seed):
    """The twin's initialisation leaves biases 0 and LayerNorms (1, 0), which would hide a kernel
    that drops a bias or swaps gamma and beta: give them small random values (fixed seed). Every
    weight is then rounded to a multiple of 2^-12 (still exact float32, ~80 steps per standard
    deviation of 0.02): such values compress to about a third, which keeps the file small."""
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias") or name == "mlm_bias":
                p.copy_(0.02 * torch.randn(p.shape, generator=g))
            elif "norm" in name.lower() and name.endswith(".weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            p.copy_(torch.round(p / WEIGHT_GRID) * WEIGHT_GRID)


def make_batch(cfg, rng):
    m, g = cfg["model"], cfg["golden"]
    b, length, size, vocab = g["batch"], m["max_len"], m["image_size"], m["vocab_size"]
    # Pairs 2 and 5 share an image (same pixels, same image_id): positives of each other in ITC,
    # never each other's ITM negative.
    image_id = np.array([0, 1, 2, 3, 4, 2, 5, 6], np.int64)[:b]
    images = rng.randint(0, 256, size=(b, size, size, 3)).astype(np.uint8)
    for i in range(b):
        first = int(np.nonzero(image_id == image_id[i])[0][0])
        images[i] = images[first]
    lengths = rng.randint(6, length + 1, size=b)
    lengths[0] = length  # one caption fills every position
    ids = np.zeros((b, length), np.int64)
    mask = np.zeros((b, length), np.int64)
    for i, n in enumerate(lengths):
        ids[i, 0], ids[i, n - 1] = twin.CLS, twin.SEP
        ids[i, 1:n - 1] = rng.randint(twin.MASK + 1, vocab, size=n - 2)
        mask[i, :n] = 1
    return images, ids, mask, image_id


def make_mlm_masks(cfg, rng, ids, mask):
    """BERT 80/10/10 masking drawn here once per step; at least one selected token per step."""
    steps, p = cfg["golden"]["steps"], cfg["loss"]["mlm_probability"]
    vocab = cfg["model"]["vocab_size"]
    maskable = (mask != 0) & (ids != twin.PAD) & (ids != twin.CLS) & (ids != twin.SEP)
    masked_all, selected_all = [], []
    for _ in range(steps):
        selected = (rng.rand(*ids.shape) < p) & maskable
        if not selected.any():
            selected[0, 1] = True
        u = rng.rand(*ids.shape)
        masked = np.where(selected & (u < 0.8), twin.MASK, ids)
        masked = np.where(selected & (u >= 0.8) & (u < 0.9), rng.randint(vocab, size=ids.shape),
                          masked)
        masked_all.append(masked)
        selected_all.append(selected)
    return np.stack(masked_all).astype(np.int64), np.stack(selected_all).astype(np.uint8)


def normalise(images_u8):
    """The twin's normalisation (pytorch_albef.shard_batch)."""
    x = torch.from_numpy(images_u8).permute(0, 3, 1, 2).float()
    mean = torch.tensor(twin.MEAN).view(1, 3, 1, 1)
    std = torch.tensor(twin.STD).view(1, 3, 1, 1)
    return ((x / 255 - mean) / std).contiguous()


def forward(model, cfg, images, ids, mask, image_id, masked_ids, selected, negatives):
    """pytorch_albef.Step.__call__'s forward with the MLM masks given and the ITM negatives given
    (or drawn, `negatives` None, with the twin's sampler). Returns the losses and what to record."""
    lc = cfg["loss"]
    image_tokens = model.encode_image(images)
    text_hidden = model.encode_text(ids, mask)
    img = F.normalize(model.vision_proj(image_tokens[:, 0]), dim=-1)
    txt = F.normalize(model.text_proj(text_hidden[:, 0]), dim=-1)
    itc, sim_i2t, sim_t2i = twin.itc_loss(img, txt, model.clamped_temp(), image_id,
                                          lc["soft_weight"])

    b = ids.shape[0]
    if negatives is None:
        with torch.no_grad():
            same = image_id.unsqueeze(1).eq(image_id.unsqueeze(0))
            negatives = (twin.sample_negatives(sim_t2i, same), twin.sample_negatives(sim_i2t, same))
    neg_image, neg_text = negatives
    ar = torch.arange(b)
    image_index = torch.cat([ar, neg_image[neg_image >= 0], ar[neg_text >= 0]])
    text_index = torch.cat([ar, ar[neg_image >= 0], neg_text[neg_text >= 0]])
    labels = torch.cat([torch.ones(b, dtype=torch.long),
                        torch.zeros(image_index.shape[0] - b, dtype=torch.long)])
    fused = model.fuse(text_hidden[text_index], mask[text_index], image_tokens[image_index])
    itm_logits = model.itm_head(fused[:, 0])
    itm = F.cross_entropy(itm_logits, labels)

    positions = selected.reshape(-1).nonzero().reshape(-1)
    targets = ids.reshape(-1)[positions]
    masked_fused = model.fuse(model.encode_text(masked_ids, mask), mask, image_tokens)
    hidden = masked_fused.reshape(-1, masked_fused.shape[2]).index_select(0, positions)
    mlm_logits = model.mlm_logits(hidden)
    mlm = F.cross_entropy(mlm_logits, targets)

    total = lc["itc_weight"] * itc + lc["itm_weight"] * itm + lc["mlm_weight"] * mlm
    logits = {"itc_i2t": sim_i2t, "itc_t2i": sim_t2i, "itm": itm_logits.detach(),
              "mlm": mlm_logits.detach()}
    return (itc, itm, mlm, total), logits, negatives


def checksum(t):
    """(sum, sum of squares, sum of |x|), N_SAMPLE elements evenly spaced over the flat tensor,
    their indices, and the element count."""
    x = t.detach().double().reshape(-1)
    index = np.linspace(0, x.numel() - 1, N_SAMPLE).round().astype(np.int64)
    return (np.array([x.sum().item(), (x * x).sum().item(), x.abs().sum().item()]),
            x[torch.from_numpy(index)].numpy(), index, x.numel())


def run(step, cfg, batch, negatives, verbose=False):
    """The golden steps with the twin `step` (pytorch_albef.Step: model, AdamW, schedule), in the
    model's dtype. negatives: int64 [S, B] arrays (neg_image, neg_text), or None to draw them with
    the twin's sampler. Returns what the file records."""
    images_u8, ids, mask, image_id, masked_np, selected_np = batch
    model, seed = step.model, int(cfg["golden"]["seed"])
    dtype = next(model.parameters()).dtype
    images = normalise(images_u8).to(dtype)
    rec = {"step_losses": [], "grad_norm": [], "lr": []}
    drawn = ([], [])
    for s in range(int(cfg["golden"]["steps"])):
        lr = step.lr()
        for group in step.opt.param_groups:
            group["lr"] = lr
        torch.manual_seed(seed * 1000 + s)  # the twin's multinomial draws the ITM negatives
        given = None if negatives is None else tuple(torch.from_numpy(n[s]) for n in negatives)
        losses, logits, (neg_image, neg_text) = forward(
            model, cfg, images, ids, mask, image_id, torch.from_numpy(masked_np[s]),
            torch.from_numpy(selected_np[s].astype(bool)), given)
        drawn[0].append(neg_image.numpy())
        drawn[1].append(neg_text.numpy())
        step.opt.zero_grad()
        losses[3].backward()
        if s == 0:
            rec["losses"] = np.array([x.item() for x in losses])
            rec["logits"] = {k: checksum(v) for k, v in logits.items()}
            rec["grads"] = {n: p.grad.detach().float().clone().numpy()
                            for n, p in model.named_parameters()}
            rec["grads64"] = {n: p.grad.detach().double().clone().numpy()
                              for n, p in model.named_parameters()}
        norm = torch.nn.utils.clip_grad_norm_(step.params, cfg["optim"]["grad_clip"])
        step.opt.step()
        step.step_no += 1
        rec["step_losses"].append([x.item() for x in losses])
        rec["grad_norm"].append(norm.item())
        rec["lr"].append(lr)
        if verbose:
            print(f"step {s}: lr {lr:.3e} itc {losses[0].item():.6f} itm {losses[1].item():.6f} "
                  f"mlm {losses[2].item():.6f} total {losses[3].item():.6f} |g| {norm.item():.5f}")
    rec["negatives"] = tuple(np.stack(d).astype(np.int64) for d in drawn)
    for k in ("step_losses", "grad_norm", "lr"):
        rec[k] = np.array(rec[k])
    return rec


def float32_noise(rec, rec64):
    """Largest differences of the float32 run from the float64 one, in the measures
    test_golden.cpp applies to fnvlp."""
    def rel(a, b):
        return float(np.max(np.abs(np.asarray(a) - b) / np.maximum(np.abs(b), 1e-30)))
    out = {"loss": rel(rec["losses"], rec64["losses"])}
    logit_sum, logit_elem = 0.0, 0.0
    for k, (sums, sample, _, n) in rec["logits"].items():
        sums64, sample64, _, _ = rec64["logits"][k]
        logit_sum = max(logit_sum, abs(sums[0] - sums64[0]) / sums64[2],
                        rel(sums[1:], sums64[1:]) / 2)
        logit_elem = max(logit_elem, float(np.max(np.abs(sample - sample64))) / (sums64[2] / n))
    out["logits"] = max(logit_sum, logit_elem)
    out["grad"] = max(float(np.linalg.norm(rec["grads"][n] - g) / np.linalg.norm(g))
                      for n, g in rec64["grads64"].items() if np.linalg.norm(g) > 0)
    out["grad_norm"] = rel(rec["grad_norm"][0], rec64["grad_norm"][0])
    out["step_loss"] = rel(rec["step_losses"], rec64["step_losses"])
    return out


def round_bits(x, bits):
    """float32 x rounded to `bits` significant bits (to nearest, ties away from zero)."""
    drop = 24 - bits
    i = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    i = ((i + (1 << (drop - 1))) >> drop) << drop
    return i.astype(np.uint32).view(np.float32).reshape(np.shape(x))


def write(group, name, data):
    data = np.asarray(data)
    if data.ndim == 0 or data.size == 0:
        group.create_dataset(name, data=data, track_times=False)
    else:  # one chunk per dataset (all are small): least metadata, best compression
        group.create_dataset(name, data=data, chunks=data.shape, compression="gzip",
                             compression_opts=9, shuffle=True, track_times=False)


def create_file(path):
    """An HDF5 file without object timestamps (the same content gives the same bytes), libver
    "latest" (1.10 here: metadata checksums, single-chunk indexes; ARCHITECTURE.md section 12)."""
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    fcpl.set_obj_track_times(False)
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_libver_bounds(h5py.h5f.LIBVER_LATEST, h5py.h5f.LIBVER_LATEST)
    return h5py.File(h5py.h5f.create(path.encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl, fapl=fapl))


def create_group(parent, name):
    gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
    gcpl.set_obj_track_times(False)
    h5py.h5g.create(parent.id, name.encode(), gcpl=gcpl)
    return parent[name]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default=os.path.join(HERE, "golden.yaml"))
    ap.add_argument("--out", default=os.path.join(HERE, "tiny_step.h5"))
    a = ap.parse_args()

    torch.set_num_threads(1)
    cfg = twin.load_config(a.config)
    g = cfg["golden"]
    seed = int(g["seed"])
    cfg["train"]["seed"] = seed
    rng = np.random.RandomState(seed)

    images_u8, ids_np, mask_np, image_id_np = make_batch(cfg, rng)
    masked_np, selected_np = make_mlm_masks(cfg, rng, ids_np, mask_np)
    ids, mask = torch.from_numpy(ids_np), torch.from_numpy(mask_np)
    image_id = torch.from_numpy(image_id_np)

    # The twin's initialisation and AdamW parameter groups, with golden_init's values.
    step = twin.Step(cfg, int(g["total_steps"]))
    golden_init(step.model, seed)
    params0 = {n: p.detach().clone().numpy() for n, p in step.model.named_parameters()}
    batch = (images_u8, ids, mask, image_id, masked_np, selected_np)
    rec = run(step, cfg, batch, None, verbose=True)
    # The same steps in float64 (same weights, masks and negatives): how far float32 alone is
    # from the exact result, the scale the tolerances are set against.
    step64 = twin.Step(cfg, int(g["total_steps"]))
    with torch.no_grad():
        for n, p in step64.model.named_parameters():
            p.copy_(torch.from_numpy(params0[n]))
    step64.model.double()
    rec64 = run(step64, cfg, batch, rec["negatives"])
    noise = float32_noise(rec, rec64)
    for k, v in noise.items():
        print(f"float32 vs float64 ({k}): {v:.2e}")

    tmp = a.out + ".tmp"
    with create_file(tmp) as f:
        f.attrs["fnvlp_golden_schema"] = SCHEMA
        f.attrs["created_by"] = "tests/golden/make_golden.py"
        f.attrs["torch_version"] = str(torch.__version__)
        c = create_group(f, "config")
        for section in ("model", "optim", "loss"):
            for k, v in cfg[section].items():
                c.attrs[f"{section}.{k}"] = v
        for k in ("seed", "batch", "steps", "total_steps"):
            c.attrs[k] = int(g[k])
        t = create_group(f, "tolerances")
        for k, v in TOLERANCES.items():
            t.attrs[k] = v
        t.attrs["why"] = WHY
        for k, v in noise.items():
            t.attrs[f"float32_vs_float64_{k}"] = v
        i = create_group(f, "inputs")
        write(i, "images", images_u8)
        write(i, "ids", ids_np)
        write(i, "mask", mask_np)
        write(i, "image_id", image_id_np)
        write(i, "mlm_input_ids", masked_np)
        write(i, "mlm_selected", selected_np)
        write(i, "itm_neg_image", rec["negatives"][0])
        write(i, "itm_neg_text", rec["negatives"][1])
        p = create_group(f, "params")
        for n, v in params0.items():
            write(p, n, v)
        gr = create_group(f, "grads")
        gr.attrs["significant_bits"] = GRAD_BITS
        for n, v in rec["grads"].items():
            write(gr, n, round_bits(v, GRAD_BITS))
        fw = create_group(f, "forward")
        write(fw, "losses", rec["losses"])
        for k, (sums, sample, index, _) in rec["logits"].items():
            write(fw, f"{k}_checksum", sums)
            write(fw, f"{k}_sample", sample.astype(np.float32))
            write(fw, f"{k}_sample_index", index)
        st = create_group(f, "steps")
        write(st, "losses", rec["step_losses"])
        write(st, "grad_norm", rec["grad_norm"])
        write(st, "lr", rec["lr"])
    os.replace(tmp, a.out)
    print(f"wrote {a.out} ({os.path.getsize(a.out)} bytes, {len(params0)} parameters)")


if __name__ == "__main__":
    main()
