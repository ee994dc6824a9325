#!/usr/bin/python3
"""analysis/filter_sweep.py on two fabricated campaigns whose table is known by construction:
uniform (seeds 1-3, r_mean 4.0 / 5.0 / 6.0) in the first with an FNC arm at alpha 0.05 above it on
every seed (unpaired and paired: held); the second holds a GloFND arm re-anchored every epoch at
alpha 0.01 below every uniform seed (not held / not held), one with lambda frozen that straddles
it (paired: inconclusive), and an arm without filtering telemetry, which is not a filtering arm.
Checks each row's setting, per-seed differences to uniform on the same seed, verdicts, last-epoch
filtered fraction (mean of i2t and t2i) and final temperature.
Usage: filter_sweep_check.py SOURCE_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

src = sys.argv[1]
tool = os.path.join(src, "analysis", "filter_sweep.py")


def fail(msg):
    sys.exit(f"FAIL (filter_sweep): {msg}")


def task(camp, method, seed, overrides, r_mean, frac=None, temp=0.15):
    d = os.path.join(camp, "tasks", f"{method}-s{seed}")
    os.makedirs(os.path.join(d, "run"), exist_ok=True)
    with open(os.path.join(d, "task.json"), "w") as f:
        json.dump({"method": method, "seed": seed, "overrides": [f"train.seed={seed}"] + overrides}, f)
    with open(os.path.join(d, "eval.json"), "w") as f:
        json.dump({"r_mean": r_mean}, f)
    with open(os.path.join(d, "run", "metrics.jsonl"), "w") as f:
        for epoch in (0, 1, 2):
            rec = {"epoch": epoch, "step": 10 * (epoch + 1), "temp": temp + 0.01 * (2 - epoch)}
            if frac is not None and epoch >= 1:
                # the last epoch's filtered fraction is frac (i2t frac - 0.002, t2i frac + 0.002)
                scale = 1.0 if epoch == 2 else 3.0
                rec.update(filtered_frac_i2t=scale * frac - 0.002, filtered_frac_t2i=scale * frac + 0.002)
            f.write(json.dumps(rec) + "\n")


with tempfile.TemporaryDirectory() as tmp:
    a, b = os.path.join(tmp, "a"), os.path.join(tmp, "b")
    for s, r in ((1, 4.0), (2, 5.0), (3, 6.0)):
        task(a, "uniform", s, [], r, temp=0.158)
    fnc = ["negatives.method=fnc", "negatives.alpha=0.05", "negatives.start_epoch=1"]
    for s, r in ((1, 6.5), (2, 7.0)):
        task(a, "fnc", s, fnc, r, frac=0.064, temp=0.108)
    ga = ["negatives.method=glofnd", "negatives.alpha=0.01", "negatives.start_epoch=1",
          "negatives.glofnd.exact_init=true", "negatives.glofnd.reanchor_every=1"]
    for s, r in ((1, 3.5), (2, 3.8)):
        task(b, "glofnd_reanchor_a01", s, ga + ["negatives.glofnd.init=0.5"], r, frac=0.026)
    for s, r in ((1, 4.2), (2, 4.8)):
        task(b, "glofnd_frozen_a01", s, ga + ["negatives.glofnd.lr=1.0e-9", "negatives.glofnd.init=0.5"],
             r, frac=0.061)
    task(b, "grit_q1", 1, ["sampler.kind=grit"], 9.0)  # no filtered_frac_*: not a filtering arm
    out = os.path.join(tmp, "sweep.md")
    p = subprocess.run(["/usr/bin/python3", tool, "--campaign", a, "--campaign", b, "--md", out],
                       capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"exit {p.returncode}: {p.stderr}")
    md = open(out).read()
    rows = {line.split(" | ")[0].lstrip("| "): [c.strip() for c in line.strip("|\n").split(" | ")]
            for line in md.splitlines() if line.startswith("| ") and not line.startswith("| arm ")}
    if set(rows) != {"uniform", "fnc", "glofnd_reanchor_a01", "glofnd_frozen_a01"}:
        fail(f"rows {sorted(rows)}: expected uniform and the three filtering arms only\n{md}")
    if "uniform: s1 4.00, s2 5.00, s3 6.00 (mean 5.00 +- 1.00)" not in md:
        fail(f"the baseline line\n{md}")
    want = {
        "uniform": ["uniform", "uniform", "s1 4.00, s2 5.00, s3 6.00", "5.00 +- 1.00", "-", "-", "-", "0.158"],
        "fnc": ["fnc", "fnc, alpha 0.05, from epoch 1", "s1 6.50, s2 7.00", "6.75 +- 0.35",
                "s1 +2.50, s2 +2.00", "held / held", "0.064", "0.108"],
        "glofnd_reanchor_a01": ["glofnd_reanchor_a01",
                                "glofnd, alpha 0.01, from epoch 1, re-anchored every 1, lambda_0 0.5",
                                "s1 3.50, s2 3.80", "3.65 +- 0.21", "s1 -0.50, s2 -1.20",
                                "not held / not held", "0.026", "0.150"],
        "glofnd_frozen_a01": ["glofnd_frozen_a01",
                              "glofnd, alpha 0.01, from epoch 1, re-anchored every 1, lambda frozen, lambda_0 0.5",
                              "s1 4.20, s2 4.80", "4.50 +- 0.42", "s1 +0.20, s2 -0.20",
                              "inconclusive at this spread / inconclusive at this spread", "0.061", "0.150"],
    }
    for arm, cells in want.items():
        if rows[arm] != cells:
            fail(f"{arm}: {rows[arm]}\n  expected {cells}")
    print(md)
    print("PASS")
