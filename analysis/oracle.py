#!/usr/bin/python3
"""What a false-negative filter can gain at most, and each filter's share of it (issue 64).

Reads one campaign with a `uniform` arm, an `oracle` arm (negatives.method=oracle: exactly the
same-class negatives removed) and any other arms (slurm/campaigns/oracle_synth.yaml). For each
score of fnvlp-eval (class-level and image-level retrieval, the linear probe) and each arm, the
difference to uniform paired by seed (the same data, initialisation and batches up to the arm's
own changes), its mean and a 95% t-interval over the seeds. Verdicts: "gain" when the interval
lies above 0, "loss" below, "not resolved" when it contains 0. An arm's share of the oracle's
gain is mean(arm - uniform) / mean(oracle - uniform), given only where the oracle's own gain is
resolved. Beside them each filter's false-negative precision and recall of its last logged epoch
(metrics.jsonl: fn_precision, fn_recall).

Usage: oracle.py --campaign DIR [--md OUT.md] [--json OUT.json]
"""
import argparse
import json
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import campaign_data as cd  # noqa: E402

# Two-sided 95% quantiles of Student's t by degrees of freedom (standard tables).
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
       9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131}
SCORES = [
    ("class_r_mean", "class-level R@K mean (a hit = same class)"),
    ("class_txt_r1", "class-level text retrieval R@1"),
    ("class_img_r1", "class-level image retrieval R@1"),
    ("r_mean", "image-level R@K mean (ALBEF's)"),
    ("probe_accuracy", "linear probe accuracy on frozen ViT features (%)"),
]


def paired(diffs):
    """Mean, sample std and 95% t-interval of per-seed differences; one seed: the difference
    alone, without spread or interval; None without a paired seed."""
    v = list(diffs.values())
    if not v:
        return None
    if len(v) == 1:
        return {"mean": v[0], "std": None, "lo": None, "hi": None, "n": 1,
                "verdict": "one seed, no interval", "seeds": {str(k): x for k, x in diffs.items()}}
    mu, sd = statistics.fmean(v), statistics.stdev(v)
    half = T95.get(len(v) - 1, 1.96) * sd / math.sqrt(len(v))
    lo, hi = mu - half, mu + half
    verdict = "gain" if lo > 0 else "loss" if hi < 0 else "not resolved"
    return {"mean": mu, "std": sd, "lo": lo, "hi": hi, "n": len(v), "verdict": verdict,
            "seeds": {str(k): x for k, x in sorted(diffs.items())}}


def scores(task):
    return cd.read_json(os.path.join(task, "eval.json"))


def fn_last_epoch(task):
    recs, ep = cd.logged(task, "fn_precision")
    if not ep:
        return None
    return {k: cd.epoch_mean(recs, k, {ep[-1]}) for k in ("fn_precision", "fn_recall")}


def analyse(tasks):
    if "uniform" not in tasks or "oracle" not in tasks:
        sys.exit(f"{cd.PROG}: the campaign needs a uniform and an oracle arm (has {sorted(tasks)})")
    ev = {m: cd.per_seed(tasks, m, scores) for m in tasks}
    arms = ["oracle"] + sorted(m for m in tasks if m not in ("uniform", "oracle"))
    out = {"seeds": {m: sorted(ev[m]) for m in tasks}, "scores": {}, "filters": {}}
    for key, _ in SCORES:
        base = {s: e[key] for s, e in ev["uniform"].items() if key in e}
        if not base:
            continue
        row = {"uniform": cd.spread(base)}
        for m in arms:
            diffs = {s: e[key] - base[s] for s, e in ev[m].items() if key in e and s in base}
            row[m] = {"value": cd.spread({s: e[key] for s, e in ev[m].items() if key in e}),
                      "minus_uniform": paired(diffs)}
        gain = row["oracle"]["minus_uniform"]
        for m in arms[1:]:
            d = row[m]["minus_uniform"]
            row[m]["share_of_oracle_gain"] = (
                d["mean"] / gain["mean"] if d and gain and gain["verdict"] == "gain" else None)
        out["scores"][key] = row
    for m in arms:
        f = cd.per_seed(tasks, m, fn_last_epoch)
        if f:
            out["filters"][m] = {k: cd.spread({s: v[k] for s, v in f.items() if v[k] is not None})
                                 for k in ("fn_precision", "fn_recall")}
    return out, arms


def num(x, d=2):
    return "-" if x is None else f"{x:.{d}f}"


def markdown(name, res, arms):
    md = [f"# {name}: what a false-negative filter can gain at most", "",
          "Each arm minus uniform on the same seed: mean [95% t-interval] over the seeds; "
          "verdict gain / loss when the interval excludes 0; share = the arm's mean gain over the "
          "oracle's, where the oracle's gain is resolved.", ""]
    for key, label in SCORES:
        row = res["scores"].get(key)
        if not row:
            continue
        u = row["uniform"]
        md += [f"## {label} (`{key}`)", "",
               f"uniform: {num(u['mean'])} +- {num(u['std'])} over {len(u['seeds'])} seeds", "",
               "| arm | value (mean +- std) | minus uniform | 95% interval | verdict | share of oracle's gain |",
               "|---|---|---|---|---|---|"]
        for m in arms:
            r = row[m]
            v, d = r["value"], r["minus_uniform"]
            share = r.get("share_of_oracle_gain")
            md.append("| %s | %s | %s | %s | %s | %s |" % (
                m, "-" if not v else f"{num(v['mean'])} (1 seed)" if len(v["seeds"]) < 2
                else f"{num(v['mean'])} +- {num(v['std'])}",
                num(d["mean"]) if d else "-",
                f"[{num(d['lo'])}, {num(d['hi'])}]" if d and d["n"] > 1 else "-",
                f"{d['verdict']} (n={d['n']})" if d else "no paired seed",
                "-" if m == "oracle" else num(share) if share is not None else "undefined"))
        md.append("")
    if res["filters"]:
        md += ["## False-negative precision and recall of the last logged epoch", "",
               "| arm | precision | recall |", "|---|---|---|"]
        for m, f in res["filters"].items():
            cell = {k: f"{num(f[k]['mean'], 3)} +- {num(f[k]['std'], 3)}" if f.get(k) else "-"
                    for k in ("fn_precision", "fn_recall")}
            md.append(f"| {m} | {cell['fn_precision']} | {cell['fn_recall']} |")
        md.append("")
    return "\n".join(md)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--campaign", required=True)
    ap.add_argument("--md")
    ap.add_argument("--json")
    a = ap.parse_args()
    tasks = cd.load_tasks(a.campaign)
    res, arms = analyse(tasks)
    name = os.path.basename(os.path.abspath(a.campaign))
    md = markdown(name, res, arms)
    if a.md:
        with open(a.md, "w") as f:
            f.write(md + "\n")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1, sort_keys=True)
    print(md)


if __name__ == "__main__":
    main()
