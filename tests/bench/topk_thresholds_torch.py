#!/usr/bin/env python3
"""What a user would write on one GPU for fnvlp-simstat's exact per-anchor thresholds.

For each image anchor i against all N texts, its own image_id's pairs excluded (its positives):
the k_i-th largest negative similarity, k_i = clamp(ceil(alpha * n_neg_i), 1, n_neg_i) -- the
exact (1 - alpha)-quantile, fnvlp-simstat's threshold_image (simstat.hpp) -- by chunks of anchors:
torch.mm against all candidates, the positives masked to -inf, torch.topk of the largest k, the
k_i-th of each row. Never N x N: one chunk x N block at a time.

  topk_thresholds_torch.py --embeddings FILE --alpha A [--precision fp32|fp64] [--rows R]
                           [--chunk C] [--out thresholds.npy] [--json summary.json] [--device D]
  topk_thresholds_torch.py --floor [--dim D]   the fp32 GEMM rate on this GPU (no TF32)

fp32 is what a user writes (PyTorch's default float32 matmul, no TF32); its products differ from
simstat's (dot_in_double: a double sum rounded to float once) in the last bits. fp64 computes the
products in double and rounds them to float: simstat's similarities up to the order of the double
sum, so the thresholds are simstat's bit for bit but where a double sum lands on a float rounding
boundary. Prints one JSON line.
"""
import argparse
import json
import math
import time

import h5py
import numpy as np
import torch


def gemm_floor(dim):
    """fp32 matmul rate (TFLOP/s) at a streaming shape: (8192 x dim) @ (dim x 65536), median of 10."""
    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(8192, dim, device="cuda")
    c = torch.randn(65536, dim, device="cuda")
    for _ in range(3):
        torch.mm(a, c.T)
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.mm(a, c.T)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    t = sorted(times)[len(times) // 2]
    return 2.0 * a.shape[0] * c.shape[0] * dim / t / 1e12


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def thresholds(path, alpha, precision, rows, chunk, device):
    torch.backends.cuda.matmul.allow_tf32 = False
    dtype = torch.float64 if precision == "fp64" else torch.float32
    with h5py.File(path, "r") as f:
        n = f["image_emb"].shape[0]
        rows = n if rows <= 0 else min(rows, n)
        anchors = torch.from_numpy(f["image_emb"][:rows]).to(device, dtype)
        cands = torch.from_numpy(f["text_emb"][:]).to(device, dtype)
        ids = torch.from_numpy(f["image_id"][:]).to(device)
    sync(device)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    # n_neg and k per anchor: the pairs of another image_id; k in double as simstat's target_rank.
    _, inverse, counts = torch.unique(ids, return_inverse=True, return_counts=True)
    n_neg = n - counts[inverse[:rows]]
    k = torch.ceil(alpha * n_neg.double()).long().clamp(min=1)
    k = torch.minimum(k, n_neg)
    out = torch.empty(rows, dtype=torch.float32, device=device)
    for r0 in range(0, rows, chunk):
        r1 = min(rows, r0 + chunk)
        s = torch.mm(anchors[r0:r1], cands.T).float()
        s.masked_fill_(ids[None, :] == ids[r0:r1, None], -math.inf)
        kk = k[r0:r1]
        top = torch.topk(s, int(kk.max()), dim=1, sorted=True).values
        out[r0:r1] = top.gather(1, (kk - 1)[:, None])[:, 0]
        del s, top
    sync(device)
    seconds = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated() if device.startswith("cuda") else 0
    return out.cpu().numpy(), rows, n, seconds, peak


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--embeddings")
    ap.add_argument("--alpha", type=float, default=0.001)
    ap.add_argument("--precision", choices=["fp32", "fp64"], default="fp32")
    ap.add_argument("--rows", type=int, default=0, help="first R image anchors (0: all)")
    ap.add_argument("--chunk", type=int, default=1024, help="anchors per torch.mm")
    ap.add_argument("--out", help="thresholds as a .npy file")
    ap.add_argument("--json", help="the summary line, also written here")
    ap.add_argument("--floor", action="store_true", help="measure the fp32 GEMM rate only")
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--device", default="cuda", help="cuda, or cpu (small checks)")
    args = ap.parse_args()
    if args.floor:
        summary = {"mode": "floor", "gpu": torch.cuda.get_device_name(), "dim": args.dim,
                   "fp32_tflops": gemm_floor(args.dim)}
    else:
        thr, rows, n, seconds, peak = thresholds(args.embeddings, args.alpha, args.precision,
                                                 args.rows, args.chunk, args.device)
        if args.out:
            np.save(args.out, thr)
        gpu = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
        summary = {"mode": "thresholds", "gpu": gpu,
                   "precision": args.precision, "anchors": rows, "n": n, "alpha": args.alpha,
                   "chunk": args.chunk, "seconds": seconds, "peak_gib": peak / 2**30}
    line = json.dumps(summary)
    print(line)
    if args.json:
        with open(args.json, "w") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
