#!/usr/bin/python3
"""Issue 52 (3): does a false-negative filter beat uniform sampling on retrieval? One table.

Usage: filter_sweep.py --campaign DIR [--campaign DIR ...] --md OUT.md [--baseline uniform]
                       [--arms a,b,...]

Per arm (a campaign method; default: every method whose tasks filter negatives, i.e. log
filtered_frac_*): its overrides (alpha, start epoch, GloFND options), r_mean of fnvlp-eval per seed,
mean +- sample std, the difference to the baseline's r_mean on the same seed (same seed: same
initialisation and data order, and the same first epochs where the filter starts later), the
in-batch filtered fraction of the last epoch and the learned ITC temperature at the end.
Verdicts, as analysis/claims.py judges: "beats" when every seed's r_mean lies above every seed of
the baseline (unpaired) and, paired, when the arm is above the baseline on every seed it shares.
"""
import argparse
import os
import statistics

import campaign_data as C


def overrides(task):
    t = C.read_json(os.path.join(task, "task.json")) or {}
    keep = {}
    for o in t.get("overrides", []):
        k, _, v = o.partition("=")
        keep[k] = v  # the last one wins, as in fnvlp-pretrain
    return keep


def setting(task):
    o = overrides(task)
    method = o.get("negatives.method", "none")
    if method == "none":
        return "uniform" if o.get("sampler.kind", "uniform") == "uniform" else o.get("sampler.kind")
    parts = [method, "alpha " + o.get("negatives.alpha", "?"),
             "from epoch " + o.get("negatives.start_epoch", "0")]
    if method == "glofnd":
        if o.get("negatives.glofnd.exact_init") == "true":
            parts.append("re-anchored every %s" % o.get("negatives.glofnd.reanchor_every", "0")
                         if o.get("negatives.glofnd.reanchor_every", "0") != "0" else "exact init")
        lr = o.get("negatives.glofnd.lr")
        if lr is not None:
            parts.append("lambda frozen" if float(lr) < 1e-6 else "lr " + lr)
        parts.append("lambda_0 " + o.get("negatives.glofnd.init", "1.0"))
    return ", ".join(parts)


def last_epoch(task, key):
    recs, ep = C.logged(task, key)
    return C.epoch_mean(recs, key, {ep[-1]}) if ep else None


def final(task, key):
    recs = C.metrics(task) or []
    vals = [r[key] for r in recs if key in r]
    return vals[-1] if vals else None


def fmt(v, p=2):
    return "-" if v is None else f"{v:.{p}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--campaign", action="append", required=True)
    ap.add_argument("--md", required=True)
    ap.add_argument("--baseline", default="uniform")
    ap.add_argument("--arms", help="comma-separated methods (default: every filtering method)")
    args = ap.parse_args()
    tasks = {}
    for c in args.campaign:
        for m, seeds in C.load_tasks(c).items():
            tasks.setdefault(m, {}).update(seeds)

    def rm(task):
        e = C.read_json(os.path.join(task, "eval.json"))
        return float(e["r_mean"]) if e and "r_mean" in e else None

    base = C.per_seed(tasks, args.baseline, rm)
    arms = args.arms.split(",") if args.arms else [
        m for m in tasks if m != args.baseline and any(
            last_epoch(t, "filtered_frac_i2t") is not None for t in tasks[m].values())]
    md = [f"# Filters against {args.baseline} on retrieval (fnvlp-eval r_mean, ITM re-ranked)", "",
          f"Campaigns: {', '.join(args.campaign)}. {args.baseline}: "
          + ", ".join(f"s{s} {v:.2f}" for s, v in base.items())
          + (f" (mean {statistics.fmean(base.values()):.2f} +- "
             f"{statistics.stdev(base.values()):.2f})" if len(base) > 1 else ""), "",
          "| arm | setting | r_mean per seed | mean +- std | minus " + args.baseline +
          " (same seed) | beats it: unpaired / paired | filtered, last epoch | temperature, end |",
          "|---|---|---|---|---|---|---|---|"]
    for m in [args.baseline] + arms:
        seeds = tasks.get(m, {})
        vals = C.per_seed(tasks, m, rm)
        if not vals:
            continue
        any_task = next(iter(seeds.values()))
        diff = {s: v - base[s] for s, v in vals.items() if s in base}
        if m == args.baseline:
            verdict = "-"
        else:
            unpaired = C.compare(vals, base)
            paired = ("missing data" if not diff else "held" if all(d > 0 for d in diff.values())
                      else "not held" if all(d < 0 for d in diff.values())
                      else "inconclusive at this spread")
            verdict = f"{unpaired} / {paired}"
        ff = [last_epoch(t, "filtered_frac_i2t") for t in seeds.values()]
        ff2 = [last_epoch(t, "filtered_frac_t2i") for t in seeds.values()]
        ffm = [(a + b) / 2 for a, b in zip(ff, ff2) if a is not None and b is not None]
        temps = [final(t, "temp") for t in seeds.values()]
        temps = [t for t in temps if t is not None]
        sp = C.spread(vals)
        md.append(
            f"| {m} | {setting(any_task)} | " + ", ".join(f"s{s} {v:.2f}" for s, v in vals.items())
            + f" | {sp['mean']:.2f} +- {sp['std']:.2f} | "
            + (", ".join(f"s{s} {d:+.2f}" for s, d in diff.items()) if m != args.baseline else "-")
            + f" | {verdict} | " + (fmt(statistics.fmean(ffm), 3) if ffm else "-") + " | "
            + (fmt(statistics.fmean(temps), 3) if temps else "-") + " |")
    with open(args.md, "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
