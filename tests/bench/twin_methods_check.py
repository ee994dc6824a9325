#!/usr/bin/env python3
"""ctest bench.twin_methods: the false-negative methods of the PyTorch twin
(tests/bench/pytorch_albef.py --method uniform|glofnd|momentum) on the CPU, with Debian's
python3-torch 1.13, the tiny preset (jobs/configs/tiny.yaml) and synthetic batches.

  1. CLI: each method runs 1 + 2 steps of --mode compute --synthetic and prints its method and
     finite losses; glofnd, its thresholds still above every cosine, gives uniform's losses.
  2. FLOPs: model_flops of each method equals a count of the matmul and convolution FLOPs one step
     dispatches (TorchDispatchMode), with that step's ITM rows and masked tokens.
  3. itc_loss with given exclusions against a loop over the formula on 4 pairs (an excluded
     column leaves the denominator and the pseudo-targets; a positive is never excluded), and
     sample_negatives never drawing an excluded column.
  4. GloFND over 24 steps on 10 pairs (pairs 7 and 8 share an image), pair ids 0..9: every
     anchor's lambda, both sides, equals a re-computation of the Adam recurrence in plain Python
     floats (stored as float32, as the step stores it) from cosines this script computes; lambda
     moves from 1.0 toward the in-batch (1 - alpha)-quantile; each step's ITC loss equals a
     direct computation with the negatives above the updated lambda removed, and on the steps
     that removed some it differs from the unfiltered loss; the ITM draws are given the same
     exclusions and draw none of them.
  5. Momentum over 3 steps, batch 8, queue 20 (a wrap): the momentum model starts as a copy, then
     follows theta_m <- 0.995 theta_m + 0.005 theta after each step; the queue starts as unit
     vectors with image id -1, its pointer advances by 8 modulo 20, the rows written are the
     batch's momentum features (computed here with the pre-step momentum model) and the others
     are untouched; each step's ITC loss equals a direct computation against [momentum
     features ; queue before the step].
Exit status 0 when every check passes; each check prints its largest deviation.
"""
import json
import math
import os
import struct
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(HERE, "pytorch_albef.py")
CONFIG = os.path.join(ROOT, "jobs", "configs", "tiny.yaml")
sys.path.insert(0, HERE)
import pytorch_albef as twin  # noqa: E402

failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what, flush=True)
    if not ok:
        failures.append(what)


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def embeddings(model, images, ids, mask):
    """The ITC embeddings as Step.losses computes them (dropout is 0 in tiny)."""
    with torch.no_grad():
        img = F.normalize(model.vision_proj(model.encode_image(images)[:, 0]), dim=-1)
        txt = F.normalize(model.text_proj(model.encode_text(ids, mask)[:, 0]), dim=-1)
    return img, txt


def temperature(step):
    m = step.cfg["model"]
    return min(max(step.model.temp.item(), m["temp_min"]), m["temp_max"])


def itc_direct(cos_i2t, cos_t2i, temp, image_id, allowed_i2t, allowed_t2i, alpha):
    """The ITC loss from lists of floats: per anchor i, -sum_j y_ij log p_ij over the allowed
    columns, p the softmax over the allowed columns of cos / temp, y = (1 - alpha) hard + alpha
    soft, soft the partner direction's softmax over the same allowed columns."""
    def direction(own, partner, allowed):
        total = 0.0
        for i in range(len(own)):
            cols = [j for j in range(len(own[i])) if allowed[i][j]]
            log_z = math.log(sum(math.exp(own[i][j] / temp) for j in cols))
            z_soft = sum(math.exp(partner[i][j] / temp) for j in cols)
            npos = sum(1 for j in range(len(own[i])) if image_id[j] == image_id[i])
            for j in cols:
                hard = (1.0 if image_id[j] == image_id[i] else 0.0) / npos
                soft = math.exp(partner[i][j] / temp) / z_soft
                total -= ((1 - alpha) * hard + alpha * soft) * (own[i][j] / temp - log_z)
        return total / len(own)
    return (direction(cos_i2t, cos_t2i, allowed_i2t) + direction(cos_t2i, cos_i2t, allowed_t2i)) / 2


# ------------------------------------------------------------------------------------------ 1
def check_cli():
    runs = {}
    for method in ("uniform", "glofnd", "momentum"):
        cmd = [sys.executable, SCRIPT, "--config", CONFIG, "--mode", "compute", "--synthetic",
               "--batch-size", "8", "--steps", "2", "--warmup", "1", "--method", method,
               "--queue-size", "16"]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            check(False, "cli %s: exit %d: %s" % (method, p.returncode, p.stderr.strip()[-500:]))
            continue
        r = json.loads(p.stdout.strip().splitlines()[-1])
        runs[method] = r
        losses = r["last_losses"]
        check(r.get("method") == method and len(losses) == 4
              and all(math.isfinite(x) for x in losses),
              "cli %s: method in the JSON, finite losses %s, %.1f samples/s"
              % (method, ["%.4f" % x for x in losses], r["samples_per_s"]))
    if "glofnd" in runs:
        g = runs["glofnd"]
        check(g.get("num_pairs") == 8 and 0.8 < g["glofnd_lambda_image_mean"] < 1.0,
              "cli glofnd: lambda moved from 1.0 (image mean %.4f after 3 steps)"
              % g["glofnd_lambda_image_mean"])
        if "uniform" in runs:
            u = runs["uniform"]["last_losses"]
            dev = max(abs(a - b) / abs(b) for a, b in zip(g["last_losses"], u))
            check(dev < 1e-6, "cli glofnd with nothing above lambda gives uniform's losses "
                              "(largest relative difference %.1e)" % dev)
    if "momentum" in runs:
        check(runs["momentum"].get("queue_ptr") == 3 * 8 % 16,
              "cli momentum: queue pointer %s after 3 steps of 8 into 16"
              % runs["momentum"].get("queue_ptr"))


# ------------------------------------------------------------------------------------------ 2
class MatmulFlops(TorchDispatchMode):
    """2 FLOPs per multiply-add of every mm, addmm, bmm, baddbmm and convolution (forward and
    backward) dispatched; also the rows of the first product into the vocabulary (the masked
    tokens) and into the ITM head's 2 outputs (the ITM pairs)."""

    def __init__(self, vocab):
        super().__init__()
        self.flops, self.vocab, self.mlm_rows, self.itm_rows = 0, vocab, None, None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        aten, op = torch.ops.aten, func.overloadpacket
        if op in (aten.mm, aten.addmm):
            a, b = (args[1], args[2]) if op is aten.addmm else (args[0], args[1])
            self.flops += 2 * a.shape[0] * a.shape[1] * b.shape[1]
            if b.shape[1] == self.vocab and self.mlm_rows is None:
                self.mlm_rows = a.shape[0]
            if b.shape[1] == 2 and self.itm_rows is None:
                self.itm_rows = a.shape[0]
        elif op in (aten.bmm, aten.baddbmm):
            a, b = (args[1], args[2]) if op is aten.baddbmm else (args[0], args[1])
            self.flops += 2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]
        elif op is aten.convolution:
            self.flops += 2 * out.numel() * args[1][0].numel()
        elif op is aten.convolution_backward:  # grad_output, input, weight, ..., output_mask
            mask = args[-1]
            self.flops += 2 * args[0].numel() * args[2][0].numel() * (int(mask[0]) + int(mask[1]))
        return out


def check_flops(cfg):
    m, b, q = cfg["model"], 8, 24
    batch = twin.synthetic_batch(b, m, 7)
    for method in ("uniform", "glofnd", "momentum"):
        step = twin.Step(cfg, 10, method=method, num_pairs=b, queue_size=q)
        with MatmulFlops(m["vocab_size"]) as counter:
            step(*batch)
        model = twin.model_flops(m, b, batch[1].shape[1], counter.itm_rows, counter.mlm_rows,
                                 method, q)
        check(model == counter.flops, "model_flops %s: %d, dispatched %d (ITM rows %s, masked "
              "tokens %s)" % (method, model, counter.flops, counter.itm_rows, counter.mlm_rows))


# ------------------------------------------------------------------------------------------ 3
def check_itc_small():
    g = torch.Generator().manual_seed(3)
    img = F.normalize(torch.randn(4, 3, generator=g, dtype=torch.float64), dim=1)
    txt = F.normalize(torch.randn(4, 3, generator=g, dtype=torch.float64), dim=1)
    image_id = torch.tensor([0, 1, 1, 2])  # pairs 1 and 2: one image, positives of each other
    temp, alpha = torch.tensor(0.1, dtype=torch.float64), 0.4
    excl_i2t = torch.zeros(4, 4, dtype=torch.bool)
    excl_t2i = torch.zeros(4, 4, dtype=torch.bool)
    excl_i2t[0, 3] = excl_i2t[3, 1] = True
    excl_i2t[1, 2] = True  # a positive: must stay
    excl_t2i[2, 0] = True
    loss, sim_i2t, _ = twin.itc_loss(img, txt, temp, image_id, alpha, excl_i2t, excl_t2i)
    same = image_id[:, None].eq(image_id[None])
    cos_i2t, cos_t2i = (img @ txt.t()).tolist(), (txt @ img.t()).tolist()
    allowed_i2t = (~(excl_i2t & ~same)).tolist()
    allowed_t2i = (~(excl_t2i & ~same)).tolist()
    direct = itc_direct(cos_i2t, cos_t2i, 0.1, image_id.tolist(), allowed_i2t, allowed_t2i, alpha)
    everything = [[True] * 4 for _ in range(4)]
    unfiltered = itc_direct(cos_i2t, cos_t2i, 0.1, image_id.tolist(), everything, everything,
                            alpha)
    # 1e-7: the twin builds the hard targets in float32 (0.6 * 0.5 is rounded there).
    check(abs(loss.item() - direct) < 1e-7 * direct and abs(direct - unfiltered) > 1e-3,
          "itc_loss with exclusions: %.12f, direct %.12f (unfiltered %.6f)"
          % (loss.item(), direct, unfiltered))
    plain = twin.itc_loss(img, txt, temp, image_id, alpha)[0]
    none = twin.itc_loss(img, txt, temp, image_id, alpha, excl_i2t & False, excl_t2i & False)[0]
    check(plain.item() == none.item() and abs(plain.item() - unfiltered) < 1e-7 * unfiltered,
          "itc_loss with empty exclusions = without: %.12f, %.12f" % (none.item(), plain.item()))
    check(torch.allclose(sim_i2t, img @ txt.t() / temp), "itc_loss returns unmasked logits")

    # ITM: the excluded column carries nearly all the softmax weight, and is never drawn.
    torch.manual_seed(5)
    sim = torch.zeros(4, 4)
    sim[:, 3] = 20.0
    exclude = torch.zeros(4, 4, dtype=torch.bool)
    exclude[0, 3] = exclude[1, 3] = True
    exclude[2, [0, 3]] = True  # row 2: its negatives 0 and 3 excluded, 1 is a positive
    draws = torch.stack([twin.sample_negatives(sim, same, exclude) for _ in range(300)])
    rows_ok = ((draws[:, 0] != 3).all() and (draws[:, 1] != 3).all()
               and (draws[:, 2] == -1).all() and (draws[:, 3] != 3).all())
    check(bool(rows_ok) and bool((draws[:, 0] >= 0).all()),
          "sample_negatives: 300 draws, no excluded column, -1 for the row left without "
          "negatives (row 0 drew %s)" % sorted(set(draws[:, 0].tolist())))


# ------------------------------------------------------------------------------------------ 4
class ScalarLambda:
    """One anchor's GloFND state, the recurrence written out with Python floats."""
    LR, B1, B2, EPS = 0.05, 0.9, 0.98, 1e-8

    def __init__(self):
        self.lam, self.m, self.v, self.count = 1.0, 0.0, 0.0, 0

    def update(self, cos, negative, alpha):
        n = sum(negative)
        if n == 0:
            return
        above = sum(1 for c, neg in zip(cos, negative) if neg and c > self.lam)
        g = alpha - above / n
        m = self.m * self.B1 + g * (1 - self.B1)
        v = self.v * self.B2 + g * (1 - self.B2) * g
        t = self.count + 1
        m_hat, v_hat = m / (1 - self.B1 ** t), v / (1 - self.B2 ** t)
        lam = min(1.0, max(-1.0, self.lam - m_hat * self.LR / (math.sqrt(v_hat) + self.EPS)))
        self.lam, self.m, self.v, self.count = f32(lam), f32(m), f32(v), t


def check_glofnd(cfg):
    b, steps, alpha = 10, 24, 0.25
    images, ids, mask, image_id = twin.synthetic_batch(b, cfg["model"], 11)
    step = twin.Step(cfg, 40, method="glofnd", glofnd_alpha=alpha, num_pairs=b)
    soft_weight = cfg["loss"]["soft_weight"]
    ids_list = image_id.tolist()
    negative = [[ids_list[i] != ids_list[j] for j in range(b)] for i in range(b)]
    scalar = {side: [ScalarLambda() for _ in range(b)] for side in ("image", "text")}
    lam_dev, loss_dev, distances, filtered_steps, itm_ok = 0.0, 0.0, [], 0, True
    draws, sample = [], twin.sample_negatives  # a step's ITM draws: (exclude given, drawn)

    def recorded(sim, same, exclude=None):
        draws.append((exclude, sample(sim, same, exclude)))
        return draws[-1][1]
    twin.sample_negatives = recorded  # Step.losses looks the name up in the module
    for s in range(steps):
        draws.clear()
        img, txt = embeddings(step.model, images, ids, mask)
        temp = temperature(step)
        cos = {"image": (img @ txt.t()).tolist(), "text": (txt @ img.t()).tolist()}
        losses = step(images, ids, mask, image_id)
        if s == 0:
            first = torch.cat([step.glofnd[k].lam for k in ("image", "text")]).tolist()
        allowed, dist = {}, 0.0
        for side in ("image", "text"):
            lam = step.glofnd[side].lam.tolist()
            allowed[side] = []
            for i in range(b):
                a = scalar[side][i]
                a.update(cos[side][i], negative[i], alpha)
                lam_dev = max(lam_dev, abs(lam[i] - a.lam))
                allowed[side].append([not (negative[i][j] and cos[side][i][j] > a.lam)
                                      for j in range(b)])
                # Lemma 3.1: the minimiser lies between the k-th and (k+1)-th largest negative.
                negs = sorted((c for c, n in zip(cos[side][i], negative[i]) if n), reverse=True)
                k = math.ceil(alpha * len(negs))
                dist += abs(a.lam - (negs[k - 1] + negs[min(k, len(negs) - 1)]) / 2) / (2 * b)
        distances.append(dist)
        direct = itc_direct(cos["image"], cos["text"], temp, ids_list, allowed["image"],
                            allowed["text"], soft_weight)
        loss_dev = max(loss_dev, abs(losses[0].item() - direct) / abs(direct))
        removed = sum(not x for side in allowed.values() for row in side for x in row)
        # ITM: a negative image per text (text anchors' exclusions), then a negative text per
        # image; what the threshold removed is not drawn.
        for (exclude, drawn), side in zip(draws, ("text", "image")):
            expect = [[not x for x in row] for row in allowed[side]]
            itm_ok &= exclude is not None and exclude.tolist() == expect and all(
                j < 0 or not expect[i][j] for i, j in enumerate(drawn.tolist()))
        if removed:
            full = [[True] * b for _ in range(b)]
            unfiltered = itc_direct(cos["image"], cos["text"], temp, ids_list, full, full,
                                    soft_weight)
            filtered_steps += abs(unfiltered - direct) / abs(direct) > 1e-4
    counts = torch.cat([step.glofnd[s].count for s in ("image", "text")])
    check(lam_dev <= 1e-7 and bool((counts == steps).all()),
          "glofnd: lambda of 2 x %d anchors over %d steps = the scalar Adam recurrence (largest "
          "difference %.1e; every count %d)" % (b, steps, lam_dev, steps))
    # Step 1: every cosine lies below 1.0, g = alpha and Adam moves lambda by lr.
    check(max(abs(x - 0.95) for x in first) < 1e-6 and all(
        distances[s + 1] < distances[s] for s in range(14)) and min(distances) < 0.06
          and distances[-1] < 0.25 * distances[0],
          "glofnd: lambda moves from 1.0 toward the in-batch %.2f-quantile: mean distance %s"
          % (1 - alpha, " ".join("%.3f" % d for d in distances[::3] + distances[-1:])))
    twin.sample_negatives = sample
    check(itm_ok and len(draws) == 2, "glofnd: the ITM draws get the exclusions of the updated "
          "lambda (text anchors for the negative images, image anchors for the negative texts) "
          "and draw none of them")
    check(loss_dev < 2e-5 and filtered_steps > 0,
          "glofnd: each step's ITC loss = the direct one with the negatives above lambda removed "
          "(largest relative difference %.1e; %d steps where the removal changed it)"
          % (loss_dev, filtered_steps))


# ------------------------------------------------------------------------------------------ 5
def check_momentum(cfg):
    b, q, steps, m = 8, 20, 3, 0.995
    images, ids, mask, image_id = twin.synthetic_batch(b, cfg["model"], 13)
    step = twin.Step(cfg, 10, method="momentum", queue_size=q)
    alpha = cfg["loss"]["soft_weight"]
    start_copy = all(torch.equal(a, c) for a, c in zip(step.params_m, step.params))
    frozen = not step.model_m.training and not any(p.requires_grad for p in step.params_m)
    qi, qt, qid = step.queue
    unit = max((qi.norm(dim=1) - 1).abs().max().item(), (qt.norm(dim=1) - 1).abs().max().item())
    check(start_copy and frozen and unit < 1e-6 and bool((qid == -1).all()) and step.queue_ptr == 0
          and step.momentum == m,
          "momentum: starts as a frozen copy, queue of %d unit vectors (|norm - 1| <= %.1e) "
          "with image id -1, pointer 0" % (q, unit))
    ema_dev, row_dev, loss_dev, ptr_ok, rest_ok = 0.0, 0.0, 0.0, True, True
    for s in range(steps):
        before = [p.detach().clone() for p in step.params_m]
        queue_before = [t.clone() for t in step.queue]
        ptr = step.queue_ptr
        img_m, txt_m = embeddings(step.model_m, images, ids, mask)
        img, txt = embeddings(step.model, images, ids, mask)
        temp = temperature(step)
        losses = step(images, ids, mask, image_id)
        for p_m, p0, p in zip(step.params_m, before, step.params):
            ema_dev = max(ema_dev, (p_m - (m * p0 + (1 - m) * p.detach())).abs().max().item())
        ptr_ok &= step.queue_ptr == (ptr + b) % q
        written = torch.tensor([(ptr + r) % q for r in range(b)])
        kept = torch.tensor([r for r in range(q) if r not in written.tolist()])
        for t, t0, x in zip(step.queue, queue_before, (img_m, txt_m, image_id)):
            row_dev = max(row_dev, (t[written].double() - x.double()).abs().max().item())
            rest_ok &= len(kept) == 0 or torch.equal(t[kept], t0[kept])
        # ITC against [momentum features ; queue before the step], in float64.
        keys_img = torch.cat([img_m, queue_before[0]]).double()
        keys_txt = torch.cat([txt_m, queue_before[1]]).double()
        pos = image_id[:, None].eq(torch.cat([image_id, queue_before[2]])[None]).double()
        hard = pos / pos.sum(1, keepdim=True)

        def direction(anchor, anchor_m, keys, temp=temp):
            soft = torch.softmax(anchor_m.double() @ keys.t() / temp, 1)
            logp = torch.log_softmax(anchor.double() @ keys.t() / temp, 1)
            return -(((1 - alpha) * hard + alpha * soft) * logp).sum(1).mean()
        direct = ((direction(img, img_m, keys_txt) + direction(txt, txt_m, keys_img)) / 2).item()
        loss_dev = max(loss_dev, abs(losses[0].item() - direct) / abs(direct))
    check(ema_dev < 1e-6, "momentum: theta_m = %.3f theta_m + %.3f theta after each of %d steps "
          "(largest difference %.1e)" % (m, 1 - m, steps, ema_dev))
    check(ptr_ok and step.queue_ptr == steps * b % q and row_dev < 1e-6 and rest_ok,
          "momentum: pointer +%d mod %d per step (now %d), written rows = the batch's momentum "
          "features and image ids (largest difference %.1e), other rows untouched"
          % (b, q, step.queue_ptr, row_dev))
    check(loss_dev < 2e-5, "momentum: each step's ITC loss = the direct one against [momentum "
          "features ; queue] (largest relative difference %.1e)" % loss_dev)


def main():
    t0 = time.perf_counter()
    torch.set_num_threads(1)
    cfg = twin.load_config(CONFIG)
    check_cli()
    check_flops(cfg)
    check_itc_small()
    check_glofnd(cfg)
    check_momentum(cfg)
    print("%d checks failed, %.1f s" % (len(failures), time.perf_counter() - t0))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
