#!/usr/bin/python3
"""analysis/oracle.py on a fabricated campaign whose answers are known by construction: uniform
(seeds 1-5, class_r_mean 50, 52, ..., 58); oracle above it on every seed by 4, 5, 6, 5, 4 (mean
4.8, sample std sqrt(0.7), 95% t-interval 4.8 +- 2.776 sqrt(0.7 / 5): gain); fnc by 2, 2.5, 3,
2.5, 2 (gain, share 2.4 / 4.8 = 0.5); glofnd straddling 0 (not resolved, share 0); falcon below
on every seed (loss); seed 5 of falcon missing (n = 4). FN precision and recall come from the
last epoch that logged them. Without an oracle arm the tool refuses the campaign.
Usage: oracle_check.py SOURCE_DIR
"""
import json
import math
import os
import subprocess
import sys
import tempfile

src = sys.argv[1]
tool = os.path.join(src, "analysis", "oracle.py")


def fail(msg):
    sys.exit(f"FAIL (oracle): {msg}")


def task(camp, method, seed, class_r_mean, prf=None):
    d = os.path.join(camp, "tasks", f"{method}-s{seed}")
    os.makedirs(os.path.join(d, "run"), exist_ok=True)
    with open(os.path.join(d, "task.json"), "w") as f:
        json.dump({"method": method, "seed": seed}, f)
    with open(os.path.join(d, "eval.json"), "w") as f:
        json.dump({"class_r_mean": class_r_mean, "r_mean": 10.0 + seed}, f)
    with open(os.path.join(d, "run", "metrics.jsonl"), "w") as f:
        for epoch in (0, 1):
            rec = {"epoch": epoch, "step": epoch + 1}
            if prf:  # the last epoch's values are prf; epoch 0 logs others
                p, r = prf if epoch == 1 else (0.1, 0.1)
                rec.update(fn_precision=p, fn_recall=r)
            f.write(json.dumps(rec) + "\n")


def run(camp, *extra):
    return subprocess.run(["/usr/bin/python3", tool, "--campaign", camp, *extra],
                          capture_output=True, text=True)


with tempfile.TemporaryDirectory() as tmp:
    camp = os.path.join(tmp, "c")
    base = {s: 48.0 + 2 * s for s in range(1, 6)}
    arms = {"oracle": [4, 5, 6, 5, 4], "fnc": [2, 2.5, 3, 2.5, 2], "glofnd": [-1, 1, -1, 1, 0],
            "falcon": [-3, -3.5, -3, -3.2], "tcl": [1.5]}
    for s, v in base.items():
        task(camp, "uniform", s, v)
    for m, d in arms.items():
        for s, x in enumerate(d, start=1):
            task(camp, m, s, base[s] + x, prf=(1.0, 1.0) if m == "oracle" else
                 (0.6, 0.4) if m == "fnc" else None)
    p = run(camp, "--json", os.path.join(tmp, "o.json"), "--md", os.path.join(tmp, "o.md"))
    if p.returncode != 0:
        fail(f"exit {p.returncode}: {p.stderr}")
    res = json.load(open(os.path.join(tmp, "o.json")))
    row = res["scores"]["class_r_mean"]
    o = row["oracle"]["minus_uniform"]
    half = 2.776 * math.sqrt(0.7) / math.sqrt(5)
    if not (abs(o["mean"] - 4.8) < 1e-9 and abs(o["lo"] - (4.8 - half)) < 1e-9
            and abs(o["hi"] - (4.8 + half)) < 1e-9 and o["verdict"] == "gain" and o["n"] == 5):
        fail(f"oracle's paired gain {o}")
    want = {"fnc": ("gain", 0.5, 5), "glofnd": ("not resolved", 0.0, 5), "falcon": ("loss", None, 4)}
    for m, (verdict, share, n) in want.items():
        d = row[m]["minus_uniform"]
        if d["verdict"] != verdict or d["n"] != n:
            fail(f"{m}: verdict {d['verdict']} n {d['n']}, expected {verdict} n {n}")
        if share is not None and abs(row[m]["share_of_oracle_gain"] - share) > 1e-9:
            fail(f"{m}: share {row[m]['share_of_oracle_gain']}, expected {share}")
    # One paired seed: its difference, no spread, no interval, no verdict.
    t = row["tcl"]["minus_uniform"]
    if not (t["n"] == 1 and abs(t["mean"] - 1.5) < 1e-9 and t["lo"] is None
            and t["verdict"] == "one seed, no interval"):
        fail(f"one paired seed: {t}")
    if abs(row["falcon"]["share_of_oracle_gain"] - (-3.175 / 4.8)) > 1e-9:
        fail(f"falcon's share {row['falcon']['share_of_oracle_gain']}")
    # r_mean is the same for every arm on a seed: no difference, so no share of a gain.
    r = res["scores"]["r_mean"]
    if r["oracle"]["minus_uniform"]["verdict"] != "not resolved" or r["fnc"]["share_of_oracle_gain"] is not None:
        fail(f"image-level r_mean: {r['oracle']}, {r['fnc']}")
    f = res["filters"]
    if f["fnc"]["fn_precision"]["mean"] != 0.6 or f["oracle"]["fn_recall"]["mean"] != 1.0 or "glofnd" in f:
        fail(f"filters {f}")
    md = open(os.path.join(tmp, "o.md")).read()
    if ("| fnc |" not in md or "gain (n=5)" not in md or "loss (n=4)" not in md
            or "| tcl | 51.50 (1 seed) | 1.50 | - | one seed, no interval (n=1) |" not in md):
        fail("the markdown lacks the rows:\n" + md)
    # Without an oracle arm: refused, naming what it has.
    import shutil
    for s in range(1, 6):
        shutil.rmtree(os.path.join(camp, "tasks", f"oracle-s{s}"))
    p = run(camp)
    if p.returncode == 0 or "needs a uniform and an oracle arm" not in p.stderr:
        fail(f"a campaign without an oracle arm: exit {p.returncode}, {p.stderr}")
print("oracle: OK")
