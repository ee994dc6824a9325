#!/usr/bin/env python3
"""The GPU benchmark's one table (tests/bench/gpu_pretrain.sh): per cell (preset, precision,
batch, fnvlp mode), fnvlp's samples/s, its MFU, its ratio to the PyTorch twin's eager step and to
the twin's best step (SDPA + fused AdamW + torch.compile) of the same cell in the same call, and,
for the profiled cells, kernels and host operators per step and the GPU's busy share.

MFU: the twin's analytic FLOPs per sample of the cell (pytorch_albef.model_flops: 3 x the forward's
matmul FLOPs) times fnvlp's samples/s, against the peak of the precision (H100/H200 SXM: bf16 989,
fp32 67 TFLOP/s without TF32; FNVLP_PEAK_BF16 / FNVLP_PEAK_FP32 for another GPU).

Then, where gpu_pretrain.sh ran METHODS (issue 60), one table of the methods on their cell: fnvlp's
samples/s with each method in CUDA graphs against uniform in CUDA graphs of the same call (goal:
GloFND, FNC, SRCL, GRIT within 5%; momentum and FALCON within their FLOP ratio + 5%, the twin's
FLOP count where it has the method), against the twin doing the same method (eager, best; goal
best >= 1.5x), and with SHARED, 2 ranks sharing the GPU, graphs against eager.

Usage: gpu_table.py OUT_DIR   (reads results.jsonl, gpu_twin.jsonl, profile-fnvlp-*.json; prints
the tables and writes OUT_DIR/table.md)
"""
import json
import os
import sys


def rows(path):
    if not os.path.exists(path):
        return []
    return [json.loads(line) for line in open(path) if line.strip()]


def fmt(v, spec, suffix=""):
    return format(v, spec) + suffix if isinstance(v, (int, float)) else "-"


def main():
    out = sys.argv[1]
    every = rows(os.path.join(out, "results.jsonl"))
    # The uniform step's one-rank cells here; the methods' and the shared GPU's below.
    fnvlp = [r for r in every if r.get("method", "uniform") == "uniform" and r.get("ranks", 1) == 1]
    twin_all = [r for r in rows(os.path.join(out, "gpu_twin.jsonl")) if r.get("status") == "ok"]
    twin = [r for r in twin_all if r.get("method", "uniform") == "uniform"]
    peaks = {"bf16": float(os.environ.get("FNVLP_PEAK_BF16", "989")),
             "fp32": float(os.environ.get("FNVLP_PEAK_FP32", "67"))}

    def twin_cell(r, mode):
        for t in twin:
            if (t["preset"], t["precision"], t["batch"], t.get("mode", "eager")) == (
                    r["preset"], r["precision"], r["batch"], mode):
                return t
        return None

    def flops_per_sample(r):
        for t in twin:  # the same model and batch; precision does not change the count
            if (t["preset"], t["batch"]) == (r["preset"], r["batch"]) and t.get("flops_per_sample"):
                return t["flops_per_sample"]
        return None

    lines = ["| preset | precision | batch | fnvlp | samples/s | MFU | / twin eager | / twin best "
             "| kernels/step | host ops/step | GPU busy |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in fnvlp:
        sps = r.get("samples_per_s")
        flops = flops_per_sample(r)
        mfu = sps * flops / (peaks[r["precision"]] * 1e12) if sps and flops else None
        eager, best = twin_cell(r, "eager"), twin_cell(r, "best")
        prof = os.path.join(out, "profile-fnvlp-%s-%s-%d-%s.json" % (
            r["preset"], r["precision"], r["batch"], r["mode"]))
        p = json.load(open(prof)) if os.path.exists(prof) else {}
        busy = 1 - p["gpu_idle"] if "gpu_idle" in p else None
        lines.append("| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["preset"], r["precision"], r["batch"], r["mode"], fmt(sps, ".1f"),
            fmt(100 * mfu if mfu else None, ".1f", "%"),
            fmt(sps / eager["samples_per_s"] if sps and eager else None, ".2f", "x"),
            fmt(sps / best["samples_per_s"] if sps and best else None, ".2f", "x"),
            fmt(p.get("kernels_per_step"), ".0f"), fmt(p.get("ops_per_step"), ".0f"),
            fmt(100 * busy if busy is not None else None, ".0f", "%")))
    for t in sorted(twin, key=lambda t: (t["preset"], t["precision"], t["batch"])):
        lines.append("| %s | %s | %d | twin %s | %.1f | %s | | | | | |" % (
            t["preset"], t["precision"], t["batch"], t.get("mode", "eager"), t["samples_per_s"],
            fmt(100 * t["mfu"] if t.get("mfu") else None, ".1f", "%")))
    lines += methods_table(every, twin_all)
    table = "\n".join(lines)
    print(table)
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(table + "\n")


def methods_table(every, twin_all):
    """The methods' rows (see the docstring); [] without method cells."""
    methods = [r for r in every if r.get("method", "uniform") != "uniform" or r.get("ranks", 1) > 1]
    if not methods:
        return []
    cell = lambda r: (r["preset"], r["precision"], r["batch"])
    def find(rows_, **want):
        for r in rows_:
            if all(r.get(k, {"method": "uniform", "ranks": 1, "mode": "eager"}.get(k)) == v
                   for k, v in want.items()):
                return r
        return None
    out = ["", "| cell | method | ranks | fnvlp mode | samples/s | / uniform, same mode | FLOPs / uniform "
           "| / twin eager | / twin best | / own eager |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in methods:
        p, pr, b = cell(r)
        m, ranks = r.get("method", "uniform"), r.get("ranks", 1)
        sps = r["samples_per_s"]
        base = find(every, preset=p, precision=pr, batch=b, method="uniform", ranks=ranks,
                    mode=r["mode"]) if m != "uniform" else None
        tu = find(twin_all, preset=p, precision=pr, batch=b, method="uniform", mode="eager")
        tm = find(twin_all, preset=p, precision=pr, batch=b, method=m, mode="eager")
        tb = find(twin_all, preset=p, precision=pr, batch=b, method=m, mode="best")
        flops = (tm["flops_per_sample"] / tu["flops_per_sample"]
                 if tm and tu and tm.get("flops_per_sample") and tu.get("flops_per_sample") else None)
        eager = find(every, preset=p, precision=pr, batch=b, method=m, ranks=ranks, mode="eager") \
            if r["mode"] != "eager" else None
        out.append("| %s %s b%d | %s | %d | %s | %.1f | %s | %s | %s | %s | %s |" % (
            p, pr, b, m, ranks, r["mode"], sps,
            fmt(sps / base["samples_per_s"] if base else None, ".3f"),
            fmt(flops, ".3f"),
            fmt(sps / tm["samples_per_s"] if tm and ranks == 1 else None, ".2f", "x"),
            fmt(sps / tb["samples_per_s"] if tb and ranks == 1 else None, ".2f", "x"),
            fmt(sps / eager["samples_per_s"] if eager else None, ".2f", "x")))
    return out


if __name__ == "__main__":
    main()
