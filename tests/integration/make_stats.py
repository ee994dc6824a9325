#!/usr/bin/python3
"""A synthetic fnvlp-simstat output of any size, for the report's memory check and benchmark.

  make_stats.py N RUN_DIR STATS_H5 [--quantiles M] [--dim D] [--seed S]

Writes RUN_DIR/embeddings/epoch-000.h5 (an export of N pairs in the schema fnvlp-pretrain writes:
random unit vectors of dimension D, 8 labels, GloFND's lambda), RUN_DIR/metrics.jsonl (two
records) and STATS_H5 in fnvlp-simstat's layout and chunking (datasets of N rows, the quantiles
N x M), with per-anchor values drawn at random, piece by piece: the tool never holds more than a
piece of either file. Prints the sums fnvlp-report must find (the FN table, mean errors) as JSON.
"""
import argparse
import json
import os

import h5py
import numpy as np

PIECE = 1 << 18

ap = argparse.ArgumentParser()
ap.add_argument("n", type=int)
ap.add_argument("run")
ap.add_argument("stats")
ap.add_argument("--quantiles", type=int, default=100)
ap.add_argument("--dim", type=int, default=8)
ap.add_argument("--seed", type=int, default=0)
a = ap.parse_args()
n, m, d = a.n, a.quantiles, a.dim
rng = np.random.default_rng(a.seed)
os.makedirs(os.path.join(a.run, "embeddings"), exist_ok=True)
with open(os.path.join(a.run, "metrics.jsonl"), "w") as f:
    for step in (1, 2):
        f.write(json.dumps({"epoch": 0, "step": step, "loss": 5.0 - step}) + "\n")

rows = max(1, min(n, 4096))
qrows = max(1, min(rows, (1 << 20) // (4 * m)))
emb = h5py.File(os.path.join(a.run, "embeddings", "epoch-000.h5"), "w")
emb.attrs["fnvlp_schema"] = 1
emb.attrs["epoch"] = 0
emb.attrs["step"] = 2
stats = h5py.File(a.stats, "w")
for k, v in (("fnvlp_schema", 1), ("n", n), ("quantiles", m), ("bins", 4096), ("fnc_batch", 256),
             ("fnc_seed", 0)):
    stats.attrs[k] = np.int64(v)
stats.attrs["alpha"] = 0.01
stats.attrs["quantile_error_bound"] = 2.0 / 4096


def make(f, name, dtype, shape, chunk):
    return f.create_dataset(name, shape=shape, dtype=dtype, chunks=chunk)


E = {k: make(emb, k, "f4", (n, d), (rows, d)) for k in ("image_emb", "text_emb")}
for k, t in (("pair_id", "i8"), ("image_id", "i8"), ("label", "i4")):
    E[k] = make(emb, k, t, (n,), (rows,))
S = {"pair_id": make(stats, "pair_id", "i8", (n,), (rows,))}
COUNTS = ("n_neg_", "n_label_", "count_exact_", "count_exact_label_", "count_fnc_",
          "count_fnc_label_", "n_batch_label_", "count_lambda_", "count_lambda_label_")
for s in ("image", "text"):
    E["glofnd_lambda_" + s] = make(emb, "glofnd_lambda_" + s, "f4", (n,), (rows,))
    S["threshold_" + s] = make(stats, "threshold_" + s, "f4", (n,), (rows,))
    S["fnc_threshold_" + s] = make(stats, "fnc_threshold_" + s, "f4", (n,), (rows,))
    S["quantiles_" + s] = make(stats, "quantiles_" + s, "f4", (n, m), (qrows, m))
    for c in COUNTS:
        S[c + s] = make(stats, c + s, "i8", (n,), (rows,))

want = {s: {"sums": dict.fromkeys(("n_label", "exact", "exact_label", "fnc", "fnc_label",
                                   "lambda", "lambda_label"), 0),
            "fnc_err": 0.0, "fnc_cnt": 0, "lam_err": 0.0, "lam_cnt": 0}
        for s in ("image", "text")}
for r0 in range(0, n, PIECE):
    rn = min(PIECE, n - r0)
    sl = slice(r0, r0 + rn)
    ids = np.arange(r0, r0 + rn, dtype=np.int64)
    label = rng.integers(-1, 8, rn).astype(np.int32)  # -1: unlabelled, left out of P/R
    for k in ("image_emb", "text_emb"):
        v = rng.standard_normal((rn, d)).astype(np.float32)
        E[k][sl] = v / np.linalg.norm(v, axis=1, keepdims=True)
    E["pair_id"][sl], E["image_id"][sl], E["label"][sl] = ids, ids // 5, label
    S["pair_id"][sl] = ids
    keep = label >= 0
    for s in ("image", "text"):
        thr = rng.uniform(0.2, 0.6, rn).astype(np.float32)
        thr[rng.random(rn) < 0.001] = np.nan  # anchors without negatives
        fnc = (thr + rng.normal(0, 0.03, rn)).astype(np.float32)
        lam = (thr + rng.normal(0, 0.02, rn)).astype(np.float32)
        S["threshold_" + s][sl], S["fnc_threshold_" + s][sl] = thr, fnc
        E["glofnd_lambda_" + s][sl] = lam
        q = np.linspace(-0.3, 0.9, m, dtype=np.float32)
        S["quantiles_" + s][sl] = np.broadcast_to(q, (rn, m))
        n_neg = np.full(rn, n - 5, dtype=np.int64)
        n_label = rng.integers(0, 2000, rn)
        counts = {"n_neg_": n_neg, "n_label_": n_label, "n_batch_label_": n_label // 100}
        for c in ("exact", "fnc", "lambda"):
            flagged = rng.integers(1, 3000, rn)
            counts["count_%s_" % c] = flagged
            counts["count_%s_label_" % c] = np.minimum(flagged, n_label) // 2
        for c in COUNTS:
            S[c + s][sl] = counts[c]
        w = want[s]
        w["sums"]["n_label"] += int(n_label[keep].sum())
        for c in ("exact", "fnc", "lambda"):
            w["sums"][c] += int(counts["count_%s_" % c][keep].sum())
            w["sums"][c + "_label"] += int(counts["count_%s_label_" % c][keep].sum())
        ok = np.isfinite(thr) & np.isfinite(fnc)
        w["fnc_err"] += float(np.abs(fnc[ok].astype(np.float64) - thr[ok]).sum())
        w["fnc_cnt"] += int(ok.sum())
        ok = np.isfinite(thr) & np.isfinite(lam)
        w["lam_err"] += float(np.abs(lam[ok].astype(np.float64) - thr[ok]).sum())
        w["lam_cnt"] += int(ok.sum())
emb.close()
stats.close()
out = {}
for s, w in want.items():
    out[s] = dict(w["sums"], fnc_mean_abs_error=w["fnc_err"] / w["fnc_cnt"],
                  lambda_mean_abs_error=w["lam_err"] / w["lam_cnt"], anchors=w["lam_cnt"])
print(json.dumps(out))
