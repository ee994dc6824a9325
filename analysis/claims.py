#!/usr/bin/python3
"""The papers' false-negative claims (issue 31) measured on fnvlp campaigns, with verdicts.

Usage: claims.py --campaign DIR [--campaign DIR ...] --out claims.json [--md claims.md]
                 [--plots DATA_DIR]

--plots writes one CSV per claim into DATA_DIR and lists their plot specs (analysis/plots.py's
format) in claims.json under each claim's "plot"; fnvlp-report --campaign draws and shows them.

Reads what slurm/ablation_campaign.sh leaves in each campaign directory: index.tsv, and per task
tasks/METHOD-sSEED/{task.json, run/metrics.jsonl, eval.json, stats.json}; stats.json is
fnvlp-simstat's --json summary of the task's last epoch export with --lambda-from the run (only
GloFND tasks need it). Methods are found by their campaign names (slurm/methods.sh): uniform,
fnc, glofnd, grit_q1, grit_q05, falcon; every other method named glofnd_* (glofnd_exact, a
campaign's custom GloFND arms) is reported beside GloFND in (a)-(c), which judge the paper's
glofnd. A claim whose data is missing is reported as such, never guessed.

Every comparison is made per seed and judged on the spread over seeds: "held" when every seed's
value lies on the claimed side of every seed's value of the other method, "not held" when every
seed's lies on the other side, otherwise "inconclusive at this spread".
"""
import argparse
import csv
import json
import os
import statistics

from campaign_data import (ALPHA_TOLERANCE, CLAIMS, alpha_of, combine, compare, epoch_mean,
                           load_tasks, logged, per_seed, read_json, spread)
import horizon  # analysis/horizon.py: the claims epoch by epoch

F_METHODS = ("uniform", "grit_q1", "falcon")
# Claim (d): the samplers by the hardness quantile they draw at (uniform: none).
D_METHODS = (("uniform", "uniform"), ("grit_q05", "q = 0.5"), ("grit_q1", "q = 1"))


def glofnd_variants(tasks):
    """The GloFND arms beyond the paper's (glofnd_exact, custom glofnd_* arms), sorted."""
    return sorted(m for m in tasks if m.startswith("glofnd_"))


def filtered_fraction(task):
    recs, ep = logged(task, "filtered_frac_i2t")
    if not ep:
        return None
    i2t = epoch_mean(recs, "filtered_frac_i2t", {ep[-1]})
    t2i = epoch_mean(recs, "filtered_frac_t2i", {ep[-1]})
    first = (epoch_mean(recs, "filtered_frac_i2t", {ep[0]}) +
             epoch_mean(recs, "filtered_frac_t2i", {ep[0]})) / 2
    return {"last": (i2t + t2i) / 2, "first": first, "epochs": [ep[0], ep[-1]]}


def claim_a(tasks, alpha):
    out = {}
    for method in ["glofnd"] + glofnd_variants(tasks):
        fr = per_seed(tasks, method, filtered_fraction)
        if not fr:
            continue
        rel = {s: abs(v["last"] - alpha) / alpha for s, v in fr.items()}
        if all(r <= ALPHA_TOLERANCE for r in rel.values()):
            verdict = "held"
        elif all(r > ALPHA_TOLERANCE for r in rel.values()):
            verdict = "not held"
        else:
            verdict = "inconclusive at this spread"
        out[method] = {"filtered_fraction_last_epoch": spread({s: v["last"] for s, v in fr.items()}),
                       "filtered_fraction_first_epoch": spread({s: v["first"] for s, v in fr.items()}),
                       "alpha": alpha, "tolerance": ALPHA_TOLERANCE, "verdict": verdict}
    verdict = out["glofnd"]["verdict"] if "glofnd" in out else "missing data"
    return verdict, out


def lambda_errors(task):
    s = read_json(os.path.join(task, "stats.json"))
    if not s:
        return None
    try:
        g = statistics.fmean(s[m]["glofnd"]["mean_abs_error"] for m in ("image", "text"))
        f = statistics.fmean(s[m]["fnc"]["mean_abs_error"] for m in ("image", "text"))
    except (KeyError, TypeError):
        return None
    return {"glofnd": g, "fnc": f}


def claim_b(tasks):
    err = per_seed(tasks, "glofnd", lambda_errors)
    g = {s: v["glofnd"] for s, v in err.items()}
    f = {s: v["fnc"] for s, v in err.items()}
    data = {"glofnd_lambda_abs_error": spread(g), "fnc_threshold_abs_error": spread(f)}
    for method in glofnd_variants(tasks):
        err_v = per_seed(tasks, method, lambda_errors)
        if err_v:
            data[f"{method}_lambda_abs_error"] = spread({s: v["glofnd"] for s, v in err_v.items()})
    return compare(f, g), data


def prf_last_epoch(task):
    recs, ep = logged(task, "fn_f1")
    if not ep:
        return None
    return {k: epoch_mean(recs, k, {ep[-1]}) for k in ("fn_precision", "fn_recall", "fn_f1")}


def claim_c(tasks):
    g = per_seed(tasks, "glofnd", prf_last_epoch)
    f = per_seed(tasks, "fnc", prf_last_epoch)
    arms = [("glofnd", g), ("fnc", f)] + [(m, per_seed(tasks, m, prf_last_epoch))
                                          for m in glofnd_variants(tasks)]
    data = {m: {k: spread({s: v[k] for s, v in d.items()}) for k in ("fn_precision", "fn_recall", "fn_f1")}
            for m, d in arms if d}
    return compare({s: v["fn_f1"] for s, v in g.items()}, {s: v["fn_f1"] for s, v in f.items()}), data


def grouped_fn_rate(task):
    recs, ep = logged(task, "batch_fn_rate_label")
    ep = [e for e in ep if e >= 1]
    return epoch_mean(recs, "batch_fn_rate_label", set(ep)) if ep else None


def claim_d(tasks):
    rate = {m: per_seed(tasks, m, grouped_fn_rate) for m, _ in D_METHODS}
    verdict = combine([compare(rate["grit_q1"], rate["grit_q05"]),
                       compare(rate["grit_q1"], rate["uniform"])])
    return verdict, {m + "_batch_fn_rate": spread(v) for m, v in rate.items()}


def q_trend(task):
    recs, ep = logged(task, "q_mean")
    if len(ep) < 2:
        return None
    return {"first": epoch_mean(recs, "q_mean", {ep[0]}), "last": epoch_mean(recs, "q_mean", {ep[-1]}),
            "epochs": [ep[0], ep[-1]]}


def claim_e(tasks):
    q = per_seed(tasks, "falcon", q_trend)
    drop = {s: v["first"] - v["last"] for s, v in q.items()}
    if not drop:
        verdict = "missing data"
    elif all(d > 0 for d in drop.values()):
        verdict = "held"
    elif all(d <= 0 for d in drop.values()):
        verdict = "not held"
    else:
        verdict = "inconclusive at this spread"
    return verdict, {"q_mean_first_epoch": spread({s: v["first"] for s, v in q.items()}),
                     "q_mean_last_epoch": spread({s: v["last"] for s, v in q.items()})}


def recall_at(k):
    """R@k of a task's eval.json, the mean of text and image retrieval."""
    def read(task):
        e = read_json(os.path.join(task, "eval.json"))
        if not e or f"txt_r{k}" not in e or f"img_r{k}" not in e:
            return None
        return (float(e[f"txt_r{k}"]) + float(e[f"img_r{k}"])) / 2
    return read


def claim_f(tasks):
    r = {m: per_seed(tasks, m, recall_at(1)) for m in F_METHODS}
    verdict = combine([compare(r["falcon"], r["grit_q1"], strict=False),
                       compare(r["grit_q1"], r["uniform"], strict=False)])
    data = {m + "_r1": spread(v) for m, v in r.items()}
    for k in (5, 10):
        data.update({f"{m}_r{k}": spread(per_seed(tasks, m, recall_at(k))) for m in F_METHODS})
    return verdict, data


def write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def lines_csv(path, x, series):
    xs = sorted({k for pts in series.values() for k in pts})
    write_csv(path, [x] + list(series),
              [[k] + [series[n].get(k, float("nan")) for n in series] for k in xs])


def bars_csv(path, groups, series):
    """groups: [(label, {series: spread})]: one row per group, mean_S and std_S per series."""
    write_csv(path, [c for s in series for c in (f"mean_{s}", f"std_{s}")],
              [[(v.get(s) or {}).get(k, float("nan")) for s in series for k in ("mean", "std")]
               for _, v in groups])


def bars(cid, title, ylabel, groups, series, data_dir):
    bars_csv(os.path.join(data_dir, f"claim_{cid}.csv"), groups, series)
    return {"file": f"claim_{cid}.png", "kind": "bars", "csv": f"claim_{cid}.csv",
            "groups": [g for g, _ in groups], "series": list(series), "title": title,
            "ylabel": ylabel}


def plots(tasks, results, alpha, data_dir):
    """{claim id: plots.py spec} of the claims that have data; CSVs written into data_dir."""
    out = {}
    per_epoch = horizon.table({m: tasks[m] for m in ["glofnd", "fnc"] + glofnd_variants(tasks)
                               if m in tasks}, alpha)

    def epoch_series(methods, col, label=""):
        return {f"{m} s{s}{label}": {e: r[col] for e, r in rows.items() if r[col] is not None}
                for m in methods for s, rows in per_epoch.get(m, {}).items()
                if any(r[col] is not None for r in rows.values())}

    a = epoch_series(["glofnd"] + glofnd_variants(tasks), "ff_batch")
    if a:
        lines_csv(os.path.join(data_dir, "claim_a.csv"), "epoch", a)
        out["a"] = {"file": "claim_a.png", "kind": "lines", "csv": "claim_a.csv", "x": "epoch",
                    "y": list(a), "hline": {"y": alpha, "label": "alpha"},
                    "title": "(a) fraction of negatives filtered per anchor, per epoch",
                    "xlabel": "epoch", "ylabel": "filtered fraction (i2t, t2i mean)"}
    # (b) per epoch where the campaign ran simstat on every export (FNVLP_EPOCH_STATS=1): lambda's
    # and FNC's distance to the exact quantile on each GloFND arm's exports; else bars of the last.
    lam = epoch_series(["glofnd"] + glofnd_variants(tasks), "lam_err", " lambda")
    fnc = epoch_series(["glofnd"] + glofnd_variants(tasks), "fnc_err", " FNC")
    if len({e for pts in lam.values() for e in pts}) > 1:
        lines_csv(os.path.join(data_dir, "claim_b.csv"), "epoch", {**lam, **fnc})
        out["b"] = {"file": "claim_b.png", "kind": "lines", "csv": "claim_b.csv", "x": "epoch",
                    "y": list(lam) + list(fnc),
                    "title": "(b) mean |threshold - exact (1-alpha)-quantile| per epoch export",
                    "xlabel": "epoch", "ylabel": "mean |error| (FNC: simulated on the same export)"}
    b = results["b"]["data"]
    names = ([("glofnd_lambda_abs_error", "GloFND lambda")] +
             [(f"{m}_lambda_abs_error", "GloFND exact-init lambda" if m == "glofnd_exact"
               else f"{m} lambda") for m in glofnd_variants(tasks)] +
             [("fnc_threshold_abs_error", "FNC in-batch threshold")])
    groups = [(label, {"error": b[k]}) for k, label in names if b.get(k)]
    if groups and "b" not in out:
        out["b"] = bars("b", "(b) mean |threshold - exact (1-alpha)-quantile|", "mean |error|",
                        groups, ["error"], data_dir)
    c = results["c"]["data"]
    if c:
        out["c"] = bars("c", "(c) false-negative identification, last epoch", "value",
                        [(label, {m: c[m][k] for m in c}) for k, label in
                         (("fn_precision", "precision"), ("fn_recall", "recall"), ("fn_f1", "F1"))],
                        list(c), data_dir)
    d = results["d"]["data"]
    groups = [(label, {"rate": d[m + "_batch_fn_rate"]}) for m, label in D_METHODS
              if d.get(m + "_batch_fn_rate")]
    if groups:
        out["d"] = bars("d", "(d) in-batch rate of known false negatives by sampler",
                        "rate (epochs >= 1)", groups, ["rate"], data_dir)
    e = {}
    for seed, task in sorted(tasks.get("falcon", {}).items()):
        recs, ep = logged(task, "q_mean")
        for key in ("q_mean", "q_p5", "q_p95"):
            pts = {x: epoch_mean(recs, key, {x}) for x in ep}
            pts = {x: v for x, v in pts.items() if v is not None}
            if pts:
                e[f"{key} s{seed}"] = pts
    if e:
        lines_csv(os.path.join(data_dir, "claim_e.csv"), "epoch", e)
        out["e"] = {"file": "claim_e.png", "kind": "lines", "csv": "claim_e.csv", "x": "epoch",
                    "y": list(e), "title": "(e) FALCON's sampled q per epoch (mean, p5, p95)",
                    "xlabel": "epoch", "ylabel": "q"}
    f = results["f"]["data"]
    if any(f.get(f"{m}_r1") for m in F_METHODS):
        out["f"] = bars("f", "(f) zero-shot retrieval (text and image mean)", "recall (%)",
                        [(f"R@{k}", {m: f.get(f"{m}_r{k}") for m in F_METHODS}) for k in (1, 5, 10)],
                        list(F_METHODS), data_dir)
    return out


def table(data, prefix=""):
    """The claim's measured numbers as rows (quantity, mean, std, per-seed values)."""
    rows = []
    for key, val in data.items():
        if isinstance(val, dict) and "mean" in val:
            rows.append({"quantity": prefix + key, "mean": val["mean"], "std": val["std"],
                         "seeds": val["seeds"]})
        elif isinstance(val, dict):
            rows += table(val, prefix + key + ".")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--campaign", action="append", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--md")
    ap.add_argument("--alpha", type=float, help="default: negatives.alpha of the GloFND tasks")
    ap.add_argument("--plots", metavar="DATA_DIR", help="write the claims' plot CSVs here")
    args = ap.parse_args()
    tasks = {}
    for c in args.campaign:
        for method, seeds in load_tasks(c).items():
            tasks.setdefault(method, {}).update(seeds)
    alpha = args.alpha if args.alpha is not None else alpha_of(tasks, 0.01)
    results = {}
    for cid, fn in (("a", lambda: claim_a(tasks, alpha)), ("b", lambda: claim_b(tasks)),
                    ("c", lambda: claim_c(tasks)), ("d", lambda: claim_d(tasks)),
                    ("e", lambda: claim_e(tasks)), ("f", lambda: claim_f(tasks))):
        verdict, data = fn()
        results[cid] = {"claim": CLAIMS[cid], "verdict": verdict, "data": data}
    for r in results.values():
        r["table"] = table(r["data"])
    # Claims (a)-(c) judged at every epoch, not only the last: from which epoch on they hold.
    for cid, h in horizon.verdicts(horizon.table(tasks, alpha), alpha).items():
        if h["verdict"] != "missing data":
            results[cid]["horizon"] = h
    if args.plots:
        os.makedirs(args.plots, exist_ok=True)
        for cid, spec in plots(tasks, results, alpha, args.plots).items():
            results[cid]["plot"] = spec
    doc = {"campaigns": args.campaign, "alpha": alpha,
           "seeds": {m: sorted(s) for m, s in sorted(tasks.items())}, "claims": results}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    if args.md:
        with open(args.md, "w") as f:
            f.write("| claim | verdict | measured (mean +- std over seeds) |\n|---|---|---|\n")
            for cid, r in results.items():
                parts = [f"{t['quantity']} {t['mean']:.4g} +- {t['std']:.2g}" for t in r["table"]]
                verdict = r["verdict"]
                if "horizon" in r:
                    verdict += f" (over epochs: {r['horizon']['verdict']})"
                f.write(f"| ({cid}) {r['claim'].replace('|', chr(92) + '|')} | {verdict} | {'; '.join(parts) or '-'} |\n")
    for cid, r in results.items():
        print(f"({cid}) {r['verdict']}: {r['claim']}")


if __name__ == "__main__":
    main()
