#!/usr/bin/env python3
"""The PyTorch baseline of fnvlp-pretrain (issue 3), written as a user would with Debian's
python3-torch 1.13 (no torchvision: the transforms are a few lines of PIL and torch).

Same computation as one step of src/fnvlp/train/trainer.cpp on one rank:
  * model (src/fnvlp/model/albef.cpp): ViT with pre-norm blocks (fused qkv, timm/ALBEF vit.py),
    BERT embeddings + post-norm text layers, fusion layers with cross-attention to the image
    tokens, [CLS] projections to embed_dim, ITM head, MLM head tied to the word embeddings;
    sizes from jobs/configs/{tiny,small}.yaml (the `model:` keys);
  * ITC against the batch with a learnable clamped temperature and GRIT/MAFA pseudo-soft targets
    (target = 0.6 * hard(image_id) + 0.4 * softmax of the partner direction's detached logits);
  * ITM on b positives + 2b hard negatives drawn by multinomial from the ITC similarities (ALBEF),
    never a pair sharing the image_id;
  * MLM with BERT 80/10/10 masking at probability 0.15, vocabulary logits at masked positions only;
  * loss = itc + itm + mlm, AdamW (weight decay 0.02 on >= 2-d parameters), warm-up + cosine
    learning rate, gradient clipping at norm 1.

False-negative methods (--method; fnvlp's negatives.method=glofnd and loss.soft_targets=momentum):
  uniform   the step above (the default; its output is as before).
  glofnd    GloFND (Balmaseda et al., ICML 2025, §3.1-3.3, App. D.2): a threshold lambda per image
            anchor and per text anchor of the dataset (--num-pairs entries each, on the device;
            init 1.0), indexed by the rows' pair ids: in --mode compute the fixed batch's 0..B-1
            every step, in --mode epoch the split's pair indices. Each step, for each anchor, the
            subgradient alpha - (share of its in-batch negatives, other image_id, whose detached
            fp32 cosine exceeds lambda) takes one Adam step (lr 0.05, betas (0.9, 0.98), eps 1e-8,
            bias correction at the anchor's own update count + 1), projected onto [-1, 1]
            (--glofnd-alpha, 0.01); then the negatives above the updated lambda leave the ITC
            denominator and its pseudo-targets and are not drawn as ITM negatives. Image anchors
            threshold text columns, text anchors image columns. Tensor operations on the device,
            no host read; under torch.compile the update is traced with the forward, while the
            batch's rows of the dataset-sized state are gathered before it and written back after
            it, eagerly. Extra FLOPs: one b x b cosine product (negligible).
  momentum  ALBEF momentum distillation (Li et al. 2021 §3.3, model_pretrain.py): a momentum copy
            of the model (eval mode, no gradient, EMA m = loss.momentum, 0.995, after each
            optimizer step) and a queue of its ITC features (--queue-size, loss.queue_size or
            65536; started from random unit vectors with image id -1, as ALBEF starts it).
            ITC keys = [momentum features of the batch ; queue], targets (1 - alpha) hard (image
            ids over every key) + alpha softmax(momentum logits), alpha = loss.soft_weight (0.4,
            no warm-up ramp); MLM = (1 - alpha) CE + alpha soft CE against the momentum model's
            MLM logits on the same masked input; ITM negatives from the online logits against the
            batch's keys. The batch's momentum features are enqueued after the step. model_flops
            counts the momentum model's forward passes and the b x (b + queue) ITC products.

Modes:
  --mode compute  times --steps steps after --warmup steps on one fixed in-memory batch (pairs
                  0..B-1 of a shard directory read with h5py: the very bytes bench_step reads;
                  or --synthetic: random data of the preset's shapes, no files, torch alone);
  --mode epoch    trains through a torch.utils.data.DataLoader over the Flickr8k-128 JPEGs (PIL
                  decode, random resized crop 0.5-1.0 + horizontal flip + normalisation, WordPiece
                  via tests/bench/wordpiece.py): samples/s over --steps steps (0: one epoch),
                  timed after the first --skip steps (DataLoader start-up excluded, as a long
                  epoch amortises it).
Prints one JSON line with the figures ("method" among them, except for a plain uniform run).

GPU (issue 30; PyTorch 2.x): --device cuda, --precision bf16 (torch.autocast around the forward
and losses, fp32 weights and AdamW), --compile (torch.compile of the forward and losses), --tf32,
--attention sdpa (F.scaled_dot_product_attention), --fused-adamw (AdamW(fused=True)), and --best:
sdpa, fused AdamW and compile at once: with --precision bf16, the step an expert PyTorch 2 user
writes, the "twin best" every GPU figure is also quoted against.
On CUDA the clock starts and stops after torch.cuda.synchronize(), per step, warm-up excluded.
With any of these options (or --synthetic, --peak-tflops) the compute JSON adds: ms_per_step,
warmup_s (compilation included), flops_per_sample (analytic: model_flops), tflops_per_s, mfu
against --peak-tflops, flops_per_sample_counted (FlopCounterMode over one extra eager step,
PyTorch >= 2.1) and on CUDA peak_mem_gib (torch.cuda.max_memory_allocated over the timed steps).
Without them the JSON is as before (tests/bench/bench_pretrain.sh reads it).
tests/bench/gpu_twin.sh runs the preset x precision x compile matrix (x method with
FNVLP_TWIN_METHODS); tests/bench/twin_methods_check.py checks the methods on the CPU.
"""
import argparse
import contextlib
import copy
import json
import math
import os
import random
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# --mode compute --synthetic needs torch alone (a GPU machine may have nothing else); --data needs
# numpy and h5py, --mode epoch PIL too.
try:
    import numpy as np
except ImportError:
    np = None
try:
    from PIL import Image
except ImportError:
    Image = None

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wordpiece import WordPiece  # noqa: E402

PAD, CLS, SEP, MASK = 0, 101, 102, 103
MEAN = (0.48145466, 0.4578275, 0.40821073)
STD = (0.26862954, 0.26130258, 0.27577711)

# fnvlp's defaults (src/fnvlp/train/pretrain_config.hpp, data/augment.hpp); a config's own
# optim/loss/train/augment keys override them.
DEFAULTS = {
    "optim": {"lr": 1e-4, "min_lr": 1e-5, "weight_decay": 0.02, "beta1": 0.9, "beta2": 0.999,
              "eps": 1e-8, "grad_clip": 1.0, "warmup_steps": 100},
    "loss": {"itc_weight": 1.0, "itm_weight": 1.0, "mlm_weight": 1.0, "mlm_probability": 0.15,
             "soft_weight": 0.4},
    "train": {"batch_size": 32, "seed": 42},
    "augment": {"crop_scale_min": 0.5, "crop_scale_max": 1.0, "crop_ratio_min": 3.0 / 4.0,
                "crop_ratio_max": 4.0 / 3.0, "flip_prob": 0.5},
}


def yaml_scalar(value):
    """A plain YAML scalar of the configs: int, float, bool or (optionally quoted) string."""
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    return value.strip("'\"")


def load_config(path):
    try:
        import yaml
        with open(path) as f:
            raw = yaml.safe_load(f) or {}
    except ImportError:  # the configs are two-level `key: value` maps
        raw, section = {}, None
        for line in open(path):
            line = line.split("#", 1)[0].rstrip()
            if not line.strip():
                continue
            key, _, value = line.strip().partition(":")
            if not line.startswith(" "):
                section = raw.setdefault(key, {})
            else:
                section[key] = yaml_scalar(value.strip())
    cfg = {k: dict(v) for k, v in DEFAULTS.items()}
    for section, values in raw.items():
        cfg.setdefault(section, {}).update(values or {})
    return cfg


# ----------------------------------------------------------------------------------------- model
def split_heads(x, n, heads):
    b, length, width = x.shape[0], x.shape[1], x.shape[2] // n
    return x.view(b, length, n, heads, width // heads).permute(2, 0, 3, 1, 4).unbind(0)


def merge_heads(ctx):
    return ctx.transpose(1, 2).reshape(ctx.shape[0], ctx.shape[2], ctx.shape[1] * ctx.shape[3])


# The attention kernel: "math" materialises the scores (fnvlp's formulation, and PyTorch 1.x's
# only one); "sdpa" is F.scaled_dot_product_attention (PyTorch >= 2.0: flash, memory-efficient or
# cuDNN kernels on CUDA), what a user of PyTorch 2 writes. Set by Step from --attention.
ATTENTION = "math"


def attention(q, k, v, mask, p, training):
    if ATTENTION == "sdpa":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                              dropout_p=p if training else 0.0)
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = torch.matmul(q, k.transpose(-2, -1))
    scores = torch.add(mask, scores, alpha=scale) if mask is not None else scores.mul_(scale)
    probs = torch.softmax(scores, -1)
    if p > 0 and training:
        probs = F.dropout(probs, p, True)
    return torch.matmul(probs, v)


def drop(x, p, training):
    return F.dropout(x, p, True) if p > 0 and training else x


class VitBlock(nn.Module):
    def __init__(self, width, heads, mlp_ratio):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width, eps=1e-6)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width, eps=1e-6)
        self.fc1 = nn.Linear(width, mlp_ratio * width)
        self.fc2 = nn.Linear(mlp_ratio * width, width)

    def forward(self, x):
        q, k, v = split_heads(self.qkv(self.norm1(x)), 3, self.heads)
        h = x + self.proj(merge_heads(attention(q, k, v, None, 0.0, False)))
        return h + self.fc2(F.gelu(self.fc1(self.norm2(h))))


class VisionTransformer(nn.Module):
    def __init__(self, m):
        super().__init__()
        w, patches = m["vision_width"], (m["image_size"] // m["patch_size"]) ** 2
        self.patch_embed = nn.Conv2d(3, w, m["patch_size"], stride=m["patch_size"])
        self.cls_token = nn.Parameter(torch.zeros(1, 1, w))
        self.pos_embed = nn.Parameter(torch.zeros(1, 1 + patches, w))
        self.blocks = nn.ModuleList(
            VitBlock(w, m["vision_heads"], m["mlp_ratio"]) for _ in range(m["vision_layers"]))
        self.norm = nn.LayerNorm(w, eps=1e-6)

    def forward(self, images):
        x = self.patch_embed(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], 1) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        return self.norm(x)


class BertEmbeddings(nn.Module):
    def __init__(self, m):
        super().__init__()
        w = m["text_width"]
        self.word_embeddings = nn.Parameter(torch.empty(m["vocab_size"], w))
        self.position_embeddings = nn.Parameter(torch.empty(m["max_len"], w))
        self.token_type_embeddings = nn.Parameter(torch.empty(2, w))
        self.LayerNorm = nn.LayerNorm(w, eps=1e-12)
        self.dropout = m["dropout"]

    def forward(self, ids):
        pos = self.position_embeddings[: ids.shape[1]] + self.token_type_embeddings[0]
        x = F.embedding(ids, self.word_embeddings) + pos
        return drop(self.LayerNorm(x), self.dropout, self.training)


class BertLayer(nn.Module):
    def __init__(self, width, heads, mlp_ratio, dropout, cross_width=0):
        super().__init__()
        self.heads, self.dropout, self.cross = heads, dropout, cross_width > 0
        self.self_qkv = nn.Linear(width, 3 * width)
        self.self_output = nn.Linear(width, width)
        self.self_norm = nn.LayerNorm(width, eps=1e-12)
        if self.cross:
            self.cross_q = nn.Linear(width, width)
            self.cross_kv = nn.Linear(cross_width, 2 * width)
            self.cross_output = nn.Linear(width, width)
            self.cross_norm = nn.LayerNorm(width, eps=1e-12)
        self.intermediate = nn.Linear(width, mlp_ratio * width)
        self.output = nn.Linear(mlp_ratio * width, width)
        self.output_norm = nn.LayerNorm(width, eps=1e-12)

    def forward(self, x, mask, image_tokens=None):
        p, t = self.dropout, self.training
        q, k, v = split_heads(self.self_qkv(x), 3, self.heads)
        ctx = merge_heads(attention(q, k, v, mask, p, t))
        h = self.self_norm(x + drop(self.self_output(ctx), p, t))
        if self.cross:
            q = split_heads(self.cross_q(h), 1, self.heads)[0]
            k, v = split_heads(self.cross_kv(image_tokens), 2, self.heads)
            ctx = merge_heads(attention(q, k, v, None, p, t))
            h = self.cross_norm(h + drop(self.cross_output(ctx), p, t))
        return self.output_norm(h + drop(self.output(F.gelu(self.intermediate(h))), p, t))


def additive_mask(mask, dtype):
    return mask.eq(0).to(dtype).mul_(-1e4).view(mask.shape[0], 1, 1, mask.shape[1])


class Albef(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m
        tw, vw = m["text_width"], m["vision_width"]
        self.visual_encoder = VisionTransformer(m)
        self.text_embeddings = BertEmbeddings(m)
        self.text_layers = nn.ModuleList(
            BertLayer(tw, m["text_heads"], m["mlp_ratio"], m["dropout"])
            for _ in range(m["text_layers"]))
        self.fusion_layers = nn.ModuleList(
            BertLayer(tw, m["text_heads"], m["mlp_ratio"], m["dropout"], vw)
            for _ in range(m["fusion_layers"]))
        self.vision_proj = nn.Linear(vw, m["embed_dim"])
        self.text_proj = nn.Linear(tw, m["embed_dim"])
        self.itm_head = nn.Linear(tw, 2)
        self.mlm_dense = nn.Linear(tw, tw)
        self.mlm_norm = nn.LayerNorm(tw, eps=1e-12)
        self.mlm_bias = nn.Parameter(torch.zeros(m["vocab_size"]))
        self.temp = nn.Parameter(torch.tensor(float(m["temp"])))
        self._init_weights()

    def _init_weights(self):
        for mod in self.modules():
            if isinstance(mod, nn.Linear):
                nn.init.trunc_normal_(mod.weight, std=0.02, a=-0.04, b=0.04)
                nn.init.zeros_(mod.bias)
            elif isinstance(mod, BertEmbeddings):
                for p in mod.parameters(recurse=False):
                    nn.init.trunc_normal_(p, std=0.02, a=-0.04, b=0.04)
        nn.init.trunc_normal_(self.visual_encoder.cls_token, std=0.02, a=-0.04, b=0.04)
        nn.init.trunc_normal_(self.visual_encoder.pos_embed, std=0.02, a=-0.04, b=0.04)

    def encode_image(self, images):
        return self.visual_encoder(images)

    def encode_text(self, ids, mask):
        x = self.text_embeddings(ids)
        am = additive_mask(mask, x.dtype)
        for layer in self.text_layers:
            x = layer(x, am)
        return x

    def fuse(self, text_hidden, mask, image_tokens):
        x, am = text_hidden, additive_mask(mask, text_hidden.dtype)
        for layer in self.fusion_layers:
            x = layer(x, am, image_tokens)
        return x

    def mlm_logits(self, hidden):
        # In the norm's dtype: a no-op in fp32 (or the golden generator's fp64 check) and under
        # CUDA autocast (layer norm in fp32); CPU autocast of PyTorch 1.13 would hand the norm
        # bf16 with fp32 weights, which it refuses.
        h = F.gelu(self.mlm_dense(hidden))
        h = self.mlm_norm(h.to(self.mlm_norm.weight.dtype))
        return F.linear(h, self.text_embeddings.word_embeddings, self.mlm_bias)

    def clamped_temp(self):
        with torch.no_grad():
            self.temp.clamp_(self.m["temp_min"], self.m["temp_max"])
        return self.temp


# ---------------------------------------------------------------------------------------- losses
def itc_loss(img, txt, temp, image_id, alpha, exclude_i2t=None, exclude_t2i=None):
    """exclude_i2t / exclude_t2i (bool [b, b], optional): negatives removed from the softmax
    denominator (GloFND); never applied to a positive (same image_id) column."""
    logits_i2t = img @ txt.t() / temp
    logits_t2i = txt @ img.t() / temp
    pos = image_id.unsqueeze(1).eq(image_id.unsqueeze(0)).float()
    hard = pos / pos.sum(1, keepdim=True)
    if exclude_i2t is not None:
        return filtered_itc(logits_i2t, logits_t2i, hard, pos.bool(), exclude_i2t, exclude_t2i,
                            alpha)
    # GRIT/MAFA pseudo-targets: the partner direction's detached similarities.
    with torch.no_grad():
        soft_i2t = F.softmax(logits_t2i.detach(), 1)
        soft_t2i = F.softmax(logits_i2t.detach(), 1)
    loss_i2t = -(((1 - alpha) * hard + alpha * soft_i2t) * F.log_softmax(logits_i2t, 1)).sum(1)
    loss_t2i = -(((1 - alpha) * hard + alpha * soft_t2i) * F.log_softmax(logits_t2i, 1)).sum(1)
    return (loss_i2t.mean() + loss_t2i.mean()) / 2, logits_i2t.detach(), logits_t2i.detach()


def filtered_itc(logits_i2t, logits_t2i, hard, positive, exclude_i2t, exclude_t2i, alpha):
    """itc_loss with excluded negatives, as fnvlp's loss/itc.cpp one_direction: an excluded column
    is -inf in the log-softmax (out of the denominator) and the pseudo-target softmax is taken
    over the columns left, so no target mass sits on a removed column. The logits returned (ITM
    sampling) are the unmasked ones."""
    def direction(logits, partner, exclude):
        allowed = ~(exclude & ~positive)
        logp = F.log_softmax(logits.masked_fill(~allowed, float("-inf")), 1)
        # 0 * -inf would be NaN: removed columns carry target 0 and log-probability 0.
        logp = logp.masked_fill(~allowed, 0.0)
        with torch.no_grad():
            soft = F.softmax(partner.detach().masked_fill(~allowed, float("-inf")), 1)
        return -(((1 - alpha) * hard + alpha * soft) * logp).sum(1).mean()
    # GRIT/MAFA pseudo-targets: the i2t target of image i is text i's t2i row, and vice versa.
    loss = (direction(logits_i2t, logits_t2i, exclude_i2t)
            + direction(logits_t2i, logits_i2t, exclude_t2i)) / 2
    return loss, logits_i2t.detach(), logits_t2i.detach()


def momentum_itc_loss(img, txt, img_m, txt_m, queue, temp, image_id, alpha):
    """ALBEF momentum distillation (Li et al. 2021 §3.3; model_pretrain.py), as fnvlp's
    loss/itc.cpp momentum_itc_inputs: keys = [momentum features of the batch ; queue] (constants,
    N = b + Q columns), targets = (1 - alpha) * hard + alpha * softmax(momentum logits), the
    momentum logits with the online temperature detached. hard comes from image ids over every
    column, queue included (ALBEF model_retrieval.py idx_queue): an earlier feature of the anchor's
    image is a positive; the queue's random start rows have id -1, never a positive.
    Returns the loss and the online logits [b, N] (detached)."""
    queue_img, queue_txt, queue_id = queue
    keys_img = torch.cat([img_m, queue_img.to(img_m.dtype)])
    keys_txt = torch.cat([txt_m, queue_txt.to(txt_m.dtype)])
    logits_i2t = img @ keys_txt.t() / temp
    logits_t2i = txt @ keys_img.t() / temp
    with torch.no_grad():
        t = temp.detach()
        soft_i2t = F.softmax(img_m @ keys_txt.t() / t, 1)
        soft_t2i = F.softmax(txt_m @ keys_img.t() / t, 1)
    pos = image_id.unsqueeze(1).eq(torch.cat([image_id, queue_id]).unsqueeze(0)).float()
    hard = pos / pos.sum(1, keepdim=True)
    loss_i2t = -(((1 - alpha) * hard + alpha * soft_i2t) * F.log_softmax(logits_i2t, 1)).sum(1)
    loss_t2i = -(((1 - alpha) * hard + alpha * soft_t2i) * F.log_softmax(logits_t2i, 1)).sum(1)
    return (loss_i2t.mean() + loss_t2i.mean()) / 2, logits_i2t.detach(), logits_t2i.detach()


def sample_negatives(sim, same_image, exclude=None):
    """One hard negative per row (ALBEF: softmax weights + multinomial); -1 where none exists.
    exclude (bool, optional): negatives a method removed, never drawn (fnvlp's
    negatives.filter_itm: their weight is 0)."""
    blocked = same_image if exclude is None else same_image | exclude
    weights = F.softmax(sim, 1) + 1e-5
    weights.masked_fill_(blocked, 0)
    has = (~blocked).any(1)
    weights[~has] = 1.0
    idx = torch.multinomial(weights, 1).squeeze(1)
    return torch.where(has, idx, torch.full_like(idx, -1))


# --------------------------------------------------------------------------------------- GloFND
GLOFND = {"lr": 0.05, "beta1": 0.9, "beta2": 0.98, "eps": 1e-8, "init": 1.0}  # App. D.2, fnvlp's


class GlofndThresholds:
    """GloFND's state for one side (image or text anchors) of the whole dataset, on the device:
    lambda (init 1.0), Adam's moments and each anchor's update count, indexed by pair id (as the
    authors' LambdaThreshold buffers). rows()/store() gather and scatter a batch's rows; the update
    itself is glofnd_update, a pure function (it runs inside the compiled forward; the in-place
    writes into the dataset-sized state stay outside it, in Step.__call__). A batch's pair ids are
    distinct (index_copy_ with repeated ids keeps an arbitrary one)."""

    def __init__(self, num_pairs, device):
        f = dict(dtype=torch.float32, device=device)
        self.lam = torch.full((num_pairs,), GLOFND["init"], **f)
        self.m = torch.zeros(num_pairs, **f)
        self.v = torch.zeros(num_pairs, **f)
        self.count = torch.zeros(num_pairs, dtype=torch.int32, device=device)

    def rows(self, pair_id):
        return tuple(t.index_select(0, pair_id) for t in (self.lam, self.m, self.v, self.count))

    def store(self, pair_id, rows):
        for t, r in zip((self.lam, self.m, self.v, self.count), rows):
            t.index_copy_(0, pair_id, r)


def glofnd_update(cos, negative, rows, alpha):
    """One GloFND step for b anchors (Balmaseda et al. 2025, eq. 4 with Adam; fnvlp's
    negatives/glofnd.cpp update_and_filter): cos [b, N] detached cosines, negative bool [b, N],
    rows (lambda, m, v, count) [b] each. The subgradient
        g_i = alpha - (1 / |B_i-|) sum_{x in B_i-} 1[cos(z_i, x) > lambda_i]
    moves lambda_i by one Adam step with bias correction at t = count_i + 1, projected onto
    [-1, 1], in float64 as fnvlp's; an anchor without a negative in the batch is left as it is.
    Returns the new rows and the exclusion mask negative & (cos > updated lambda)."""
    lam, m, v, count = rows
    o = GLOFND
    n = negative.sum(1)
    above = (negative & (cos > lam.unsqueeze(1))).sum(1)
    g = alpha - above.double() / n.double().clamp(min=1)
    m_new = m.double() * o["beta1"] + g * (1 - o["beta1"])
    v_new = v.double() * o["beta2"] + g * (1 - o["beta2"]) * g
    t = (count + 1).double()
    m_hat = m_new / (1 - torch.pow(o["beta1"], t))
    v_hat = v_new / (1 - torch.pow(o["beta2"], t))
    step = (lam.double() - m_hat * o["lr"] / (v_hat.sqrt() + o["eps"])).clamp(-1.0, 1.0)
    ok = n > 0
    lam_new = torch.where(ok, step.float(), lam)
    new_rows = (lam_new, torch.where(ok, m_new.float(), m), torch.where(ok, v_new.float(), v),
                torch.where(ok, count + 1, count))
    return new_rows, negative & (cos > lam_new.unsqueeze(1))


def mask_tokens(ids, attn, prob, vocab_size):
    """BERT 80/10/10 masking: the masked copy and the selected positions as a boolean mask (their
    indices are taken after the encoder, where a compiled step breaks its graph anyway)."""
    dev = ids.device
    maskable = attn.ne(0) & ids.ne(PAD) & ids.ne(CLS) & ids.ne(SEP)
    selected = (torch.rand(ids.shape, device=dev) < prob) & maskable
    u = torch.rand(ids.shape, device=dev)
    masked = ids.masked_fill(selected & (u < 0.8), MASK)
    to_random = selected & (u >= 0.8) & (u < 0.9)
    masked = torch.where(to_random, torch.randint(vocab_size, ids.shape, device=dev), masked)
    return masked, selected


def model_flops(m, b, seq_len, itm_rows, mlm_tokens, method="uniform", queue_size=0):
    """Matmul FLOPs of one training step from the config, 2 per multiply-add: 3 x the forward's
    (the backward's two products per matmul; the patch embedding's one, the images need no
    gradient), the attention products included; embeddings, norms, softmax, GELU, the loss
    reductions and the optimizer left out (no matmuls). Equal to FlopCounterMode's count of
    the step given the same masked positions (checked for tiny, small and base, PyTorch 2.15).
    b pairs of seq_len tokens, itm_rows fused ITM pairs (3b when every pair has negatives),
    mlm_tokens masked positions (the MLM head's rows).
    method "glofnd" adds the detached cosine product (2 b^2 E, under 1e-4 of the step at tiny;
    the threshold update is elementwise on b values); the ITM pairs it takes away (rows whose
    every negative was filtered) are not subtracted: itm_rows is the caller's. method "momentum"
    adds the momentum model's forward passes (no backward): image encoder, text encoder on the
    captions and on the masked captions, fusion of the masked captions (the MLM soft labels),
    its MLM head and [CLS] projections; and ITC against b + queue_size keys: the online logits'
    forward and backward for the anchors only (the keys are constants) and the momentum logits,
    12 b (b + Q) E in all where uniform has 3 x 4 b^2 E."""
    r, L, V, e = m["mlp_ratio"], seq_len, m["vocab_size"], m["embed_dim"]
    vw, tw, p = m["vision_width"], m["text_width"], m["patch_size"]
    n = (m["image_size"] // p) ** 2
    T = n + 1
    patch = 2 * n * 3 * p * p * vw
    vit = patch + m["vision_layers"] * (2 * T * vw * vw * (4 + 2 * r) + 4 * T * T * vw)
    text = m["text_layers"] * (2 * L * tw * tw * (4 + 2 * r) + 4 * L * L * tw)
    # fusion: self qkv + output (4), cross q + output (2), FFN (2r); cross k/v on the T image
    # tokens; self and cross attention products
    fusion = m["fusion_layers"] * (2 * L * tw * tw * (6 + 2 * r) + 2 * T * vw * 2 * tw
                                   + 4 * L * L * tw + 4 * L * T * tw)
    forward = (b * (vit + 2 * vw * e + 2 * tw * e) + 4 * b * b * e  # encoders' [CLS], ITC logits
               + 2 * b * text                                  # captions, masked captions
               + (itm_rows + b) * fusion + itm_rows * 2 * tw * 2  # ITM pairs, MLM pairs
               + mlm_tokens * (2 * tw * tw + 2 * tw * V))      # MLM head
    total = 3 * forward - b * patch
    if method == "glofnd":
        total += 2 * b * b * e
    elif method == "momentum":
        momentum_forward = (b * (vit + 2 * vw * e + 2 * tw * e) + 2 * b * text + b * fusion
                            + mlm_tokens * (2 * tw * tw + 2 * tw * V))
        total += momentum_forward + 12 * b * (b + queue_size) * e - 12 * b * b * e
    return total


class Step:
    """One optimizer step of fnvlp-pretrain (trainer.cpp train_step, one rank).

    device: where the model, the batch and the random draws live (the weights are drawn on the
    CPU first: the same initial model on any device). precision "bf16": the forward and the
    losses under torch.autocast(bfloat16), which keeps softmax, log-softmax, layer norm and the
    losses in fp32; weights, gradients and AdamW's state stay fp32. compile_backend: the forward
    and losses (self.losses) through torch.compile (PyTorch >= 2.0), the backward compiled with
    it by AOTAutograd; learning rate, temperature clamp, clipping and AdamW stay eager.
    attention_kind "sdpa": F.scaled_dot_product_attention; fused_adamw: AdamW(fused=True), one
    multi-tensor kernel per group (PyTorch >= 2.0 on CUDA, >= 2.4 on the CPU). The step
    waits for the device three times (nonzero: the ITM negatives that exist in either direction,
    the MLM positions), where a compiled step also breaks its graph; the losses come back as a
    tensor, read by the caller. The methods add no wait.

    method "glofnd": thresholds for num_pairs image and num_pairs text anchors (self.glofnd),
    glofnd_alpha their quantile level. method "momentum": the momentum model (self.model_m, EMA
    coefficient `momentum`, default the config's loss.momentum or 0.995) and the queue of
    queue_size momentum features (self.queue: image, text, image ids; default loss.queue_size or
    65536), written at self.queue_ptr. Their state moves in __call__, outside self.losses (which
    torch.compile traces): the compiled graph reads the state as inputs and returns what changes,
    and the in-place writes (lambda rows, EMA, enqueue) stay eager."""

    def __init__(self, cfg, total_steps, device="cpu", precision="fp32", compile_backend=None,
                 compile_mode=None, attention_kind="math", fused_adamw=False, method="uniform",
                 glofnd_alpha=0.01, num_pairs=None, queue_size=None, momentum=None):
        global ATTENTION
        ATTENTION = attention_kind
        self.cfg, self.total = cfg, total_steps
        torch.manual_seed(cfg["train"]["seed"])
        self.model = Albef(cfg["model"]).to(device)
        self.model.train()
        o = cfg["optim"]
        decay = [p for p in self.model.parameters() if p.dim() >= 2]
        no_decay = [p for p in self.model.parameters() if p.dim() < 2]
        self.params = list(self.model.parameters())
        self.opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": o["weight_decay"]},
             {"params": no_decay, "weight_decay": 0.0}],
            lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"],
            **({"fused": True} if fused_adamw else {}))
        self.step_no = 0
        dev_type = torch.device(device).type
        self.dev_type = dev_type
        self.autocast = contextlib.nullcontext
        if precision == "bf16":
            self.autocast = lambda: torch.autocast(dev_type, dtype=torch.bfloat16)
        self.method = method
        self.batch_index = None  # arange(b) on the device, made once
        if method == "glofnd":
            n = num_pairs or cfg["train"]["batch_size"]
            self.glofnd_alpha = glofnd_alpha
            self.glofnd = {side: GlofndThresholds(n, device) for side in ("image", "text")}
        elif method == "momentum":
            lc = cfg["loss"]
            self.momentum = lc.get("momentum", 0.995) if momentum is None else momentum
            q = lc.get("queue_size", 65536) if queue_size is None else queue_size
            # A copy of the online model, never trained; in eval mode, as fnvlp's (its features
            # and soft labels draw no dropout masks; ALBEF leaves it in train mode).
            self.model_m = copy.deepcopy(self.model).eval().requires_grad_(False)
            self.params_m = list(self.model_m.parameters())
            # ALBEF starts the queue from random unit vectors (torch.randn + normalize); drawn
            # on the CPU from a generator of their own: the same queue on any device, the global
            # stream left as uniform's. They belong to no pair: image id -1, never a positive.
            # (fnvlp starts its queue empty instead, negatives/momentum.hpp.)
            g = torch.Generator().manual_seed(cfg["train"]["seed"] + 1)
            e = cfg["model"]["embed_dim"]
            self.queue = tuple(t.to(device) for t in (
                F.normalize(torch.randn(q, e, generator=g), dim=1),
                F.normalize(torch.randn(q, e, generator=g), dim=1),
                torch.full((q,), -1, dtype=torch.long)))
            self.queue_ptr = 0
        elif method != "uniform":
            raise ValueError("method: uniform, glofnd or momentum, not %r" % method)
        self.forward = self.losses
        if compile_backend:
            self.forward = torch.compile(self.losses, backend=compile_backend, mode=compile_mode)

    def lr(self):
        o, s = self.cfg["optim"], self.step_no
        if o["warmup_steps"] > 0 and s < o["warmup_steps"]:
            return o["lr"] * (s + 1) / o["warmup_steps"]
        span = self.total - o["warmup_steps"]
        if span <= 0:
            return o["lr"]
        progress = min(1.0, (s - o["warmup_steps"]) / span)
        return o["min_lr"] + (o["lr"] - o["min_lr"]) * 0.5 * (1 + math.cos(math.pi * progress))

    def fp32_cosine(self, a, b):
        """a @ b.t() of detached unit rows in float32 under any autocast: GloFND compares these
        with lambda, which bf16's 3 significant digits would blur."""
        with torch.autocast(self.dev_type, enabled=False):
            return a.detach().float() @ b.detach().float().t()

    def losses(self, images, ids, mask, image_id, state=()):
        """The forward and the weighted loss: (total, detached [itc, itm, mlm, total], out), with
        the method's state in and its results out: glofnd: the batch's (lambda, m, v, count)
        rows of the image and the text side in, their updated rows out; momentum: the queue in,
        the batch's momentum features (image, text) out; uniform: () and ()."""
        model, lc, dev = self.model, self.cfg["loss"], ids.device
        alpha = lc["soft_weight"]
        image_tokens = model.encode_image(images)
        text_hidden = model.encode_text(ids, mask)
        img = F.normalize(model.vision_proj(image_tokens[:, 0]), dim=-1)
        txt = F.normalize(model.text_proj(text_hidden[:, 0]), dim=-1)
        b = ids.shape[0]
        same = image_id.unsqueeze(1).eq(image_id.unsqueeze(0))
        out, exclude_i2t, exclude_t2i = (), None, None
        if self.method == "glofnd":
            # GloFND (Balmaseda et al. 2025 §3.2-3.3): lambda of each image anchor against the
            # text columns, of each text anchor against the image columns, updated first; then
            # the negatives above the updated lambda leave the ITC denominator and the ITM draw.
            with torch.no_grad():
                cos = self.fp32_cosine(img, txt)  # [image, text]; single rank: t2i is cos.t()
                rows_i, exclude_i2t = glofnd_update(cos, ~same, state[0], self.glofnd_alpha)
                rows_t, exclude_t2i = glofnd_update(cos.t(), ~same, state[1], self.glofnd_alpha)
            out = (rows_i, rows_t)
            itc, sim_i2t, sim_t2i = itc_loss(img, txt, model.temp, image_id, alpha, exclude_i2t,
                                             exclude_t2i)
        elif self.method == "momentum":
            mm = self.model_m
            with torch.no_grad():
                image_tokens_m = mm.encode_image(images)
                img_m = F.normalize(mm.vision_proj(image_tokens_m[:, 0]), dim=-1)
                txt_m = F.normalize(mm.text_proj(mm.encode_text(ids, mask)[:, 0]), dim=-1)
            itc, sim_i2t, sim_t2i = momentum_itc_loss(img, txt, img_m, txt_m, state, model.temp,
                                                      image_id, alpha)
            sim_i2t, sim_t2i = sim_i2t[:, :b], sim_t2i[:, :b]  # ITM: the batch's keys (ALBEF)
            out = (img_m, txt_m)
        else:
            itc, sim_i2t, sim_t2i = itc_loss(img, txt, model.temp, image_id, alpha)

        # ITM: b positives, a hard negative image per text and a hard negative text per image.
        with torch.no_grad():
            neg_image = sample_negatives(sim_t2i, same, exclude_t2i)
            neg_text = sample_negatives(sim_i2t, same, exclude_i2t)
            has_image = neg_image.ge(0).nonzero().view(-1)  # texts that got a negative image
            has_text = neg_text.ge(0).nonzero().view(-1)
        ar = torch.arange(b, device=dev)
        image_index = torch.cat([ar, neg_image[has_image], has_text])
        text_index = torch.cat([ar, has_image, neg_text[has_text]])
        labels = torch.cat([torch.ones(b, dtype=torch.long, device=dev),
                            torch.zeros(image_index.shape[0] - b, dtype=torch.long, device=dev)])
        fused = model.fuse(text_hidden[text_index], mask[text_index], image_tokens[image_index])
        itm = F.cross_entropy(model.itm_head(fused[:, 0]), labels)

        # MLM on a masked copy of the captions, conditioned on the image; masked positions only.
        masked_ids, selected = mask_tokens(ids, mask, lc["mlm_probability"],
                                           self.cfg["model"]["vocab_size"])
        masked_fused = model.fuse(model.encode_text(masked_ids, mask), mask, image_tokens)
        positions = selected.view(-1).nonzero().view(-1)
        hidden = masked_fused.reshape(-1, masked_fused.shape[2]).index_select(0, positions)
        mlm_logits = model.mlm_logits(hidden)
        mlm = F.cross_entropy(mlm_logits, ids.view(-1).index_select(0, positions))
        if self.method == "momentum":
            # ALBEF's distilled MLM: soft labels from the momentum model on the same masked
            # input, fused with its own image tokens; (1 - alpha) * CE + alpha * soft CE.
            with torch.no_grad():
                fused_m = mm.fuse(mm.encode_text(masked_ids, mask), mask, image_tokens_m)
                hidden_m = fused_m.reshape(-1, fused_m.shape[2]).index_select(0, positions)
                soft = F.softmax(mm.mlm_logits(hidden_m), -1)
            distill = -(soft * F.log_softmax(mlm_logits, -1)).sum(1).mean()
            mlm = (1 - alpha) * mlm + alpha * distill

        total = lc["itc_weight"] * itc + lc["itm_weight"] * itm + lc["mlm_weight"] * mlm
        return total, torch.stack([itc, itm, mlm, total]).detach(), out

    def method_state(self, b, pair_id, device):
        """self.losses' `state` for this batch (pair_id: the rows' pair ids, default 0..b-1)."""
        if self.method == "uniform":
            return ()
        if self.batch_index is None or self.batch_index.shape[0] != b:
            self.batch_index = torch.arange(b, device=device)
        if self.method == "momentum":
            return self.queue
        self.pair_id = self.batch_index if pair_id is None else pair_id
        return self.glofnd["image"].rows(self.pair_id), self.glofnd["text"].rows(self.pair_id)

    @torch.no_grad()
    def method_update(self, out, image_id):
        """The state writes of the step taken: glofnd's updated rows; momentum's EMA of the new
        online weights (ALBEF _momentum_update), then the batch's momentum features enqueued at
        queue_ptr (ALBEF _dequeue_and_enqueue, wrapping where the size is no multiple of b)."""
        if self.method == "glofnd":
            self.glofnd["image"].store(self.pair_id, out[0])
            self.glofnd["text"].store(self.pair_id, out[1])
        elif self.method == "momentum":
            torch._foreach_mul_(self.params_m, self.momentum)
            torch._foreach_add_(self.params_m, self.params, alpha=1 - self.momentum)
            q, b = self.queue[0].shape[0], image_id.shape[0]
            if q > 0:
                index = (self.batch_index + self.queue_ptr) % q
                for buf, x in zip(self.queue, out + (image_id,)):
                    buf.index_copy_(0, index, x.to(buf.dtype))
                self.queue_ptr = (self.queue_ptr + b) % q

    def __call__(self, images, ids, mask, image_id, pair_id=None):
        """One step; returns the detached losses [itc, itm, mlm, total] (reading them is the
        caller's: a device tensor read every step would wait for the device). pair_id: the
        rows' dataset indices (GloFND's anchors), default 0..b-1."""
        for g in self.opt.param_groups:
            g["lr"] = self.lr()
        self.model.clamped_temp()
        state = self.method_state(ids.shape[0], pair_id, ids.device)
        with self.autocast():
            total, losses, out = self.forward(images, ids, mask, image_id, state)
        self.opt.zero_grad()
        total.backward()
        if self.cfg["optim"]["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(self.params, self.cfg["optim"]["grad_clip"])
        self.opt.step()
        self.step_no += 1
        self.method_update(out, image_id)
        return losses

    def method_summary(self):
        """The method's state after the run, for the JSON (reads the device once)."""
        if self.method == "glofnd":
            lam = {k: s.lam.index_select(0, self.pair_id).double() for k, s in self.glofnd.items()}
            return {"glofnd_lambda_image_mean": lam["image"].mean().item(),
                    "glofnd_lambda_text_mean": lam["text"].mean().item(),
                    "glofnd_lambda_image_min": lam["image"].min().item(),
                    "glofnd_lambda_text_min": lam["text"].min().item()}
        if self.method == "momentum":
            return {"queue_ptr": self.queue_ptr}
        return {}

    def count_flops(self, *batch):
        """FLOPs of one more step, run eagerly under torch.utils.flop_counter.FlopCounterMode
        (PyTorch >= 2.1: matmuls and convolutions, forward and backward); None without it."""
        try:
            from torch.utils.flop_counter import FlopCounterMode
        except ImportError:
            return None
        compiled, self.forward = self.forward, self.losses
        try:
            with FlopCounterMode(display=False) as counter:
                self(*batch)
            return counter.get_total_flops()
        except Exception as e:  # a check only: its failure must not cost the timed figures
            print("count_flops: %s: %s" % (type(e).__name__, e), file=sys.stderr)
            return None
        finally:
            self.forward = compiled


# ------------------------------------------------------------------------------------------ data
class FlickrPairs(torch.utils.data.Dataset):
    """(image, caption) pairs of one split: JPEG decode + random resized crop + flip + normalise,
    WordPiece ids padded to max_len, a dense image index (pairs of one image are positives) and
    the pair's index in the split."""

    def __init__(self, root, split, vocab, image_size, max_len, aug):
        with open(os.path.join(root, "captions.json"), encoding="utf-8") as f:
            records = json.load(f)
        keep = set(json.load(open(os.path.join(root, "splits.json")))[split])
        self.records = [r for r in records if r["image_id"] in keep]
        dense = {}
        self.image_index = [dense.setdefault(r["image_id"], len(dense)) for r in self.records]
        self.root, self.size, self.max_len, self.aug = root, image_size, max_len, aug
        self.tok = WordPiece(vocab)
        self.mean = torch.tensor(MEAN).view(3, 1, 1)
        self.std = torch.tensor(STD).view(3, 1, 1)

    def __len__(self):
        return len(self.records)

    def crop_box(self, width, height):
        """torchvision's RandomResizedCrop.get_params: (top, left, h, w)."""
        a, area = self.aug, width * height
        log_ratio = (math.log(a["crop_ratio_min"]), math.log(a["crop_ratio_max"]))
        for _ in range(10):
            target = area * random.uniform(a["crop_scale_min"], a["crop_scale_max"])
            ratio = math.exp(random.uniform(*log_ratio))
            w = int(round(math.sqrt(target * ratio)))
            h = int(round(math.sqrt(target / ratio)))
            if 0 < w <= width and 0 < h <= height:
                return random.randint(0, height - h), random.randint(0, width - w), h, w
        in_ratio = width / height
        w, h = width, height
        if in_ratio < a["crop_ratio_min"]:
            h = int(round(w / a["crop_ratio_min"]))
        elif in_ratio > a["crop_ratio_max"]:
            w = int(round(h * a["crop_ratio_max"]))
        return (height - h) // 2, (width - w) // 2, h, w

    def __getitem__(self, i):
        r = self.records[i]
        img = Image.open(os.path.join(self.root, r["image"])).convert("RGB")
        top, left, h, w = self.crop_box(*img.size)
        img = img.crop((left, top, left + w, top + h)).resize((self.size, self.size),
                                                             Image.BILINEAR)
        if random.random() < self.aug["flip_prob"]:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        x = torch.from_numpy(np.array(img, np.uint8, copy=True)).permute(2, 0, 1).float()
        x = x.div_(255).sub_(self.mean).div_(self.std)
        ids = self.tok.encode(r["caption"], self.max_len)
        tokens = torch.zeros(self.max_len, dtype=torch.long)
        tokens[: len(ids)] = torch.tensor(ids)
        attn = torch.zeros(self.max_len, dtype=torch.long)
        attn[: len(ids)] = 1
        return x, tokens, attn, self.image_index[i], i  # i: the pair id (GloFND's anchor)


def shard_batch(shard_dir, b, image_size):
    """Pairs 0..b-1 of a fnvlp shard directory, normalised (bilinear resize if the shard's image
    size differs, as fnvlp's Augmenter::eval): the fixed batch of --mode compute."""
    import h5py
    with h5py.File(os.path.join(shard_dir, "shard-00000.h5"), "r") as f:
        rows = f["pair_image"][:b]
        images = torch.from_numpy(f["images"][int(rows.min()): int(rows.max()) + 1])
        images = images[torch.from_numpy(rows - rows.min())]
        tokens = torch.from_numpy(f["tokens"][:b].astype(np.int64))
        lengths = torch.from_numpy(f["lengths"][:b].astype(np.int64))
        image_id = torch.from_numpy(f["image_id"][:b].astype(np.int64))
    x = images.permute(0, 3, 1, 2).float()
    if x.shape[-1] != image_size:
        x = F.interpolate(x, size=(image_size, image_size), mode="bilinear", align_corners=False)
    x = (x / 255 - torch.tensor(MEAN).view(1, 3, 1, 1)) / torch.tensor(STD).view(1, 3, 1, 1)
    mask = (torch.arange(tokens.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)).long()
    return x.contiguous(), tokens, mask, image_id


def synthetic_batch(b, m, seed):
    """A batch of the preset's shapes from random numbers, no files (--synthetic): uint8 images
    normalised as shard_batch's, captions of 8-20 tokens [CLS] ... [SEP] (two dice: mean 14;
    Flickr8k's WordPiece captions: mean 14.2, 5-95% 9-21) of random ordinary word pieces, padded
    to max_len; every 8th pair shares its predecessor's image and image_id (a few multi-positive
    ITC rows and excluded ITM negatives, as Flickr's five captions per image give)."""
    g = torch.Generator().manual_seed(seed)
    size, length = m["image_size"], m["max_len"]
    pixels = torch.randint(0, 256, (b, 3, size, size), generator=g, dtype=torch.uint8)
    image_id = torch.arange(b)
    for i in range(8, b, 8):
        pixels[i], image_id[i] = pixels[i - 1], image_id[i - 1]
    lengths = (8 + torch.randint(0, 7, (b,), generator=g)
               + torch.randint(0, 7, (b,), generator=g)).clamp_(max=length)
    # 1996: bert-base-uncased's first ordinary word piece ("the"), after [unused]/punctuation.
    tokens = torch.randint(1996, m["vocab_size"], (b, length), generator=g)
    mask = (torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)).long()
    tokens = tokens.masked_fill(mask.eq(0), PAD)
    tokens[:, 0] = CLS
    tokens.scatter_(1, (lengths - 1).unsqueeze(1), SEP)
    x = (pixels.float() / 255 - torch.tensor(MEAN).view(1, 3, 1, 1)) / torch.tensor(STD).view(
        1, 3, 1, 1)
    return x.contiguous(), tokens, mask, image_id


# ------------------------------------------------------------------------------------------ main
def setup_device(a, ap):
    """Checks --device/--precision/--compile against this PyTorch; returns the compile backend."""
    if a.device == "cuda":
        if not torch.cuda.is_available():
            ap.error("--device cuda: torch.cuda.is_available() is False (PyTorch %s, CUDA build %s)"
                     % (torch.__version__, torch.version.cuda))
        if a.precision == "bf16" and not torch.cuda.is_bf16_supported():
            ap.error("--precision bf16: this GPU has no bfloat16 support")
        # PyTorch's defaults (fp32 matmuls in full fp32, cuDNN convolutions in TF32) unless --tf32.
        if a.tf32:
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
    elif a.tf32:
        ap.error("--tf32 is for --device cuda")
    if a.best:  # what an expert PyTorch 2 user writes for this model (with --precision bf16)
        a.attention, a.fused_adamw, a.compile = "sdpa", True, True
    if a.attention == "sdpa" and not hasattr(F, "scaled_dot_product_attention"):
        ap.error("--attention sdpa needs PyTorch >= 2.0; this is PyTorch %s" % torch.__version__)
    if a.compile and not hasattr(torch, "compile"):
        ap.error("--compile needs PyTorch >= 2.0 (torch.compile); this is PyTorch %s"
                 % torch.__version__)
    if a.mode == "epoch" and a.synthetic:
        ap.error("--synthetic is for --mode compute")
    return a.compile_backend if a.compile else None


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="jobs/configs/{tiny,small,base}.yaml")
    ap.add_argument("--mode", choices=["compute", "epoch"], required=True)
    ap.add_argument("--data", help="compute: fnvlp shard directory (the fixed batch)")
    ap.add_argument("--synthetic", action="store_true",
                    help="compute: a random batch of the preset's shapes instead of --data")
    ap.add_argument("--flickr", help="epoch: the flickr8k-128 folder (captions/splits/images)")
    ap.add_argument("--vocab", help="epoch: bert-base-uncased vocabulary")
    ap.add_argument("--split", default="train")
    ap.add_argument("--batch-size", type=int, help="default: the config's train.batch_size (32)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps (epoch: 0 = one epoch)")
    ap.add_argument("--warmup", type=int, default=3, help="compute: untimed steps first")
    ap.add_argument("--skip", type=int, default=10, help="epoch: untimed steps first")
    ap.add_argument("--num-workers", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: torch.autocast around the forward and losses (fp32 weights)")
    ap.add_argument("--tf32", action="store_true",
                    help="cuda: TF32 tensor cores for fp32 matmuls and convolutions")
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile the forward and losses (PyTorch >= 2.0)")
    ap.add_argument("--compile-backend", default="inductor",
                    help="with --compile (aot_eager: a cheap check of the graph capture on CPU)")
    ap.add_argument("--compile-mode", help="with --compile: torch.compile's mode")
    ap.add_argument("--attention", choices=["math", "sdpa"], default="math",
                    help="math: the scores materialised (fnvlp's formulation); sdpa: "
                         "F.scaled_dot_product_attention (PyTorch >= 2.0)")
    ap.add_argument("--fused-adamw", action="store_true",
                    help="torch.optim.AdamW(fused=True): one multi-tensor kernel per group")
    ap.add_argument("--best", action="store_true",
                    help="the best PyTorch step: --attention sdpa --fused-adamw --compile "
                         "(with --precision bf16 on CUDA)")
    ap.add_argument("--peak-tflops", type=float,
                    help="compute: the device's peak TFLOP/s for the precision; adds mfu")
    ap.add_argument("--flop-count", choices=["auto", "off"], default="auto",
                    help="compute: auto = one extra eager step under FlopCounterMode after the "
                         "timed ones, where PyTorch has it (>= 2.1)")
    ap.add_argument("--profile", metavar="TRACE",
                    help="compute: after the timed steps, --profile-steps more under "
                         "torch.profiler, saved as a Chrome trace (tests/bench/trace_summary.py)")
    ap.add_argument("--profile-steps", type=int, default=3)
    ap.add_argument("--method", choices=["uniform", "glofnd", "momentum"], default="uniform",
                    help="uniform: the step above; glofnd: GloFND's learned per-anchor thresholds "
                         "filter ITC and ITM negatives; momentum: ALBEF momentum distillation")
    ap.add_argument("--glofnd-alpha", type=float, default=0.01,
                    help="glofnd: the fraction of each anchor's negatives taken as false")
    ap.add_argument("--num-pairs", type=int,
                    help="glofnd: lambda entries per side (default: compute: the batch size, the "
                         "fixed batch being pairs 0..B-1; epoch: the split's pairs)")
    ap.add_argument("--queue-size", type=int,
                    help="momentum: queued momentum features (default: the config's "
                         "loss.queue_size, else 65536; 0: none)")
    a = ap.parse_args()
    backend = setup_device(a, ap)
    # New keys in the JSON only where a new option is in use: the existing modes print as before.
    extended = (a.device != "cpu" or a.precision != "fp32" or a.compile or a.synthetic
                or a.tf32 or a.peak_tflops is not None or a.attention != "math" or a.fused_adamw)
    if a.mode == "compute" and not (a.synthetic or a.data):
        ap.error("--mode compute needs --data SHARD_DIR or --synthetic")
    if not 0 <= a.glofnd_alpha <= 1:
        ap.error("--glofnd-alpha must lie in [0, 1]")

    torch.set_num_threads(a.threads)
    cfg = load_config(a.config)
    b = a.batch_size or cfg["train"]["batch_size"]
    m = cfg["model"]
    dev = a.device
    out = {"impl": "pytorch", "torch": torch.__version__, "mode": a.mode, "batch": b,
           "config": os.path.basename(a.config), "image_size": m["image_size"],
           "threads": torch.get_num_threads()}
    queue_size = a.queue_size
    if queue_size is None:
        queue_size = cfg["loss"].get("queue_size", 65536)
    if a.method == "momentum" and (queue_size < 0 or 0 < queue_size < b):
        ap.error("--queue-size: 0 or at least the batch size (%d), not %d" % (b, queue_size))
    # "method" joins the plain JSON only off the default: uniform's prints as before.
    if extended or a.method != "uniform":
        out.update(method=a.method)
    if a.method == "glofnd":
        out.update(glofnd_alpha=a.glofnd_alpha)
    elif a.method == "momentum":
        out.update(queue_size=queue_size, momentum=cfg["loss"].get("momentum", 0.995),
                   soft_weight=cfg["loss"]["soft_weight"])
    method_args = dict(method=a.method, glofnd_alpha=a.glofnd_alpha, queue_size=queue_size)
    if extended:
        out.update(device=dev, precision=a.precision, compile=bool(a.compile),
                   attention=a.attention, fused_adamw=a.fused_adamw, best=a.best,
                   data="synthetic" if a.synthetic else "shards")
        if backend:
            out.update(compile_backend=backend, compile_mode=a.compile_mode)
        if dev == "cuda":
            out.update(device_name=torch.cuda.get_device_name(),
                       matmul_tf32=torch.backends.cuda.matmul.allow_tf32,
                       cudnn_tf32=torch.backends.cudnn.allow_tf32)

    if a.mode == "compute":
        if a.synthetic:
            batch = synthetic_batch(b, m, cfg["train"]["seed"])
        else:
            batch = shard_batch(a.data, b, m["image_size"])
        batch = tuple(t.to(dev, non_blocking=True) for t in batch)
        if a.method == "glofnd":  # the fixed batch is pairs 0..B-1: the same anchors each step
            if a.num_pairs is not None and a.num_pairs < b:
                ap.error("--num-pairs %d: the batch holds pairs 0..%d" % (a.num_pairs, b - 1))
            out.update(num_pairs=a.num_pairs or b, glofnd_pair_ids="0..B-1 every step")
        step = Step(cfg, a.warmup + a.steps, dev, a.precision, backend, a.compile_mode,
                    a.attention, a.fused_adamw, num_pairs=a.num_pairs or b, **method_args)
        t0 = time.perf_counter()
        for _ in range(a.warmup):
            step(*batch)
        sync(dev)
        warmup_s = time.perf_counter() - t0
        if dev == "cuda":
            torch.cuda.reset_peak_memory_stats()
        times, cpu = [], []  # wall and process CPU seconds (the latter ignores other jobs)
        for _ in range(a.steps):
            sync(dev)  # the device is idle when the clock starts, done when it stops
            t0, c0 = time.perf_counter(), time.process_time()
            losses = step(*batch)
            sync(dev)
            cpu.append(time.process_time() - c0)
            times.append(time.perf_counter() - t0)
        mean = sum(times) / len(times)
        out.update(steps=a.steps, step_s_mean=mean, step_s_median=sorted(times)[len(times) // 2],
                   step_s_min=min(times), step_cpu_s_mean=sum(cpu) / len(cpu),
                   samples_per_s=b / mean, last_losses=losses.tolist())
        if extended:
            images, ids, mask, image_id = batch
            same = image_id.unsqueeze(1).eq(image_id.unsqueeze(0))
            itm_rows = b + 2 * int((~same).any(1).sum())
            maskable = mask.ne(0) & ids.ne(PAD) & ids.ne(CLS) & ids.ne(SEP)
            mlm_tokens = cfg["loss"]["mlm_probability"] * int(maskable.sum())  # expected
            flops = model_flops(m, b, ids.shape[1], itm_rows, mlm_tokens, a.method, queue_size)
            out.update(warmup=a.warmup, warmup_s=warmup_s, ms_per_step=mean * 1e3,
                       flops_per_sample=flops / b,
                       flops_source="analytic: 3 x forward matmul FLOPs from the config, "
                                    "expected masked tokens",
                       tflops_per_s=flops / mean / 1e12)
            if dev == "cuda":
                out.update(peak_mem_gib=torch.cuda.max_memory_allocated() / 2**30,
                           peak_mem_reserved_gib=torch.cuda.max_memory_reserved() / 2**30)
            if a.peak_tflops:
                out.update(peak_tflops=a.peak_tflops, mfu=flops / mean / (a.peak_tflops * 1e12))
            if a.flop_count == "auto":
                counted = step.count_flops(*batch)
                out.update(flops_per_sample_counted=counted / b if counted else None)
        if a.profile:  # after the timed steps: the profiler's overhead stays out of them
            from torch.profiler import ProfilerActivity, profile
            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev == "cuda" else [])
            sync(dev)
            with profile(activities=acts, record_shapes=True) as prof:
                for _ in range(a.profile_steps):
                    step(*batch)
                sync(dev)
            prof.export_chrome_trace(a.profile)
            out.update(profile=a.profile, profile_steps=a.profile_steps)
        out.update(step.method_summary())
    else:
        if Image is None:
            ap.error("--mode epoch needs numpy and PIL")
        ds = FlickrPairs(a.flickr, a.split, a.vocab, m["image_size"], m["max_len"],
                         cfg["augment"])
        loader = torch.utils.data.DataLoader(ds, batch_size=b, shuffle=True, drop_last=True,
                                             num_workers=a.num_workers,
                                             pin_memory=dev == "cuda")
        total = a.steps + a.skip if a.steps > 0 else len(loader)
        if a.method == "glofnd":
            if a.num_pairs is not None and a.num_pairs < len(ds):
                ap.error("--num-pairs %d: the split has %d pairs" % (a.num_pairs, len(ds)))
            out.update(num_pairs=a.num_pairs or len(ds), glofnd_pair_ids="the split's indices")
        step = Step(cfg, total, dev, a.precision, backend, a.compile_mode, a.attention,
                    a.fused_adamw, num_pairs=a.num_pairs or len(ds), **method_args)
        t_start = time.perf_counter()
        wait = 0.0
        it = iter(loader)
        t_timed = None
        for s in range(total):
            if s == a.skip:
                sync(dev)
                t_timed, wait = time.perf_counter(), 0.0
            t0 = time.perf_counter()
            images, ids, mask, image_id, pair_id = next(it)
            wait += time.perf_counter() - t0
            losses = step(*(t.to(dev, non_blocking=True)
                            for t in (images, ids, mask, image_id, pair_id)))
        sync(dev)
        t_end = time.perf_counter()
        timed = total - a.skip
        out.update(pairs=len(ds), steps=total, timed_steps=timed, num_workers=a.num_workers,
                   samples_per_s=timed * b / (t_end - t_timed),
                   samples_per_s_whole=total * b / (t_end - t_start),
                   data_wait=wait / (t_end - t_timed), last_losses=losses.tolist())
        out.update(step.method_summary())
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
