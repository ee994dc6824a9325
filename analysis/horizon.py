#!/usr/bin/python3
"""Claims (a)-(c) epoch by epoch (issue 52): when, if ever, GloFND's claims start to hold.

Usage: horizon.py --campaign DIR [--campaign DIR ...] --tsv OUT.tsv --md OUT.md
                  [--summary SUMMARY.json --table-link PATH] [--main ARM]

Per task and epoch e (its export RUN/embeddings/epoch-EEE.h5, written at the end of epoch e):
  ff_batch   in-batch fraction of negatives filtered, mean over epoch e's metric records (i2t, t2i)
  ff_export  fraction of all the dataset's negatives above lambda on the export: alpha times
             simstat's glofnd.flagged / exact.flagged (exact flags ceil(alpha n_neg) per anchor,
             within 0.2% of alpha n_neg at these sizes)
  lam_err    mean |lambda - exact (1-alpha)-quantile| on the export (image, text mean)
  fnc_err    the same for FNC's in-batch threshold, simulated by simstat on the same export
  f1_batch   in-batch false-negative F1 against the labels, mean over epoch e's records
  thr_mean   mean exact (1-alpha)-quantile over anchors
from the tasks' run/metrics.jsonl and epoch_stats.jsonl (FNVLP_EPOCH_STATS=1 campaigns).

The claims are judged for the arm --main (default glofnd; a campaign whose GloFND arm has another
name, e.g. glofnd_authors, names it), the other glofnd* arms beside it.
A claim holds at epoch e as claims.py judges it at the last epoch, seed by seed: (a) every seed's
ff_batch within ALPHA_TOLERANCE of alpha; (b) every seed's lam_err below every seed's fnc_err;
(c) every seed's f1_batch above every seed of FNC's. "holds from epoch E" means at E and at every
later epoch: a claim met now and then is not said to hold.
"""
import argparse
import csv
import json
import os
import statistics

import campaign_data as C

COLUMNS = ("ff_batch", "ff_export", "lam_err", "fnc_err", "f1_batch", "thr_mean")


def epoch_stats(task):
    """{epoch: simstat summary} of the task's epoch_stats.jsonl (the epoch its export names)."""
    f = C.open_log(os.path.join(task, "epoch_stats.jsonl"))
    out = {}
    if f is not None:
        with f:
            for line in f:
                if line.strip():
                    d = json.loads(line)
                    out[int(d["export"][len("epoch-"):-len(".h5")])] = d
    return out


def both(d, method, key):
    try:
        return statistics.fmean(d[m][method][key] for m in ("image", "text"))
    except (KeyError, TypeError):
        return None


def task_rows(task, alpha):
    """{epoch: {column: value or None}} of one task. A task without a filter (neither a
    negatives.method override nor a glofnd/fnc/oracle arm name: uniform) has no filtered fraction,
    lambda or F1 of its own: those stay None; FNC's simulated threshold and the exact quantile on
    its exports are kept."""
    recs = C.metrics(task) or []
    stats = epoch_stats(task)
    name = (C.read_json(os.path.join(task, "task.json")) or {}).get("method", "")
    filters = (overrides(task).get("negatives.method", "none") != "none" or
               name.startswith(("glofnd", "fnc", "oracle")))
    epochs = sorted({r["epoch"] for r in recs if "epoch" in r} | set(stats))
    rows = {}
    for e in epochs:
        i2t, t2i = (C.epoch_mean(recs, k, {e}) for k in ("filtered_frac_i2t", "filtered_frac_t2i"))
        s = stats.get(e, {})
        flagged = [s.get(m, {}).get(k, {}).get("flagged") for m in ("image", "text")
                   for k in ("glofnd", "exact")]
        rows[e] = {
            "ff_batch": (i2t + t2i) / 2 if filters and i2t is not None and t2i is not None
            else None,
            "ff_export": alpha * (flagged[0] + flagged[2]) / (flagged[1] + flagged[3])
            if filters and None not in flagged and flagged[1] + flagged[3] > 0 else None,
            "lam_err": both(s, "glofnd", "mean_abs_error") if filters else None,
            "fnc_err": both(s, "fnc", "mean_abs_error"),
            "f1_batch": C.epoch_mean(recs, "fn_f1", {e}) if filters else None,
            "thr_mean": statistics.fmean(s[m]["mean_threshold"] for m in ("image", "text"))
            if "image" in s and "text" in s else None,
        }
    return rows


def table(tasks, alpha):
    """{method: {seed: {epoch: row}}} over every task."""
    return {m: {s: task_rows(t, alpha) for s, t in sorted(seeds.items())}
            for m, seeds in sorted(tasks.items())}


def held_epochs(per_seed, test):
    """Epochs (sorted) present for every seed, and whether `test` holds at each: [(e, bool)]."""
    if not per_seed:
        return []
    common = set.intersection(*(set(r) for r in per_seed.values()))
    out = []
    for e in sorted(common):
        vals = {s: r[e] for s, r in per_seed.items()}
        ok = test(vals, e)
        if ok is not None:
            out.append((e, ok))
    return out


def from_epoch(series):
    """First epoch from which the claim holds to the end (None if it does not at the last)."""
    if not series or not series[-1][1]:
        return None
    e = series[-1][0]
    for ep, ok in reversed(series):
        if not ok:
            break
        e = ep
    return e


def tests(data, alpha):
    """Per claim, a test(vals, epoch) -> bool/None over {seed: row} of a GloFND-like arm."""
    fnc = data.get("fnc", {})

    def a(vals, e):
        v = [r["ff_batch"] for r in vals.values()]
        if None in v:
            return None
        return all(abs(x - alpha) / alpha <= C.ALPHA_TOLERANCE for x in v)

    def b(vals, e):
        g = [r["lam_err"] for r in vals.values()]
        f = [r["fnc_err"] for r in vals.values()]
        if None in g or None in f:
            return None
        return max(g) < min(f)

    def c(vals, e):
        g = [r["f1_batch"] for r in vals.values()]
        f = [r.get(e, {}).get("f1_batch") for r in fnc.values()]
        if not f or None in g or None in f:
            return None
        return min(g) > max(f)

    return {"a": a, "b": b, "c": c}


def overrides(task):
    """{key: value} of a task's config overrides (task.json), the last one of a key winning."""
    t = C.read_json(os.path.join(task, "task.json")) or {}
    out = {}
    for o in t.get("overrides", []):
        k, _, v = str(o).partition("=")
        out[k] = v
    return out


def arm_label(o):
    """A GloFND arm in words from its overrides, for readers who do not know the campaign's names."""
    g = "negatives.glofnd."
    if g + "lr" in o and float(o[g + "lr"]) < 1e-6 and o.get(g + "exact_init") == "true":
        return "lambda held at the exact quantile of each epoch's export"
    words = [f"lambda_0 {o.get(g + 'init', '1.0')} from epoch {o.get('negatives.start_epoch', '0')}"]
    if o.get(g + "exact_init") == "true":
        every = o.get(g + "reanchor_every", "0")
        words.append("restarted from the exact quantiles" +
                     (f" every {every} epochs" if every not in ("0", "1") else
                      " every epoch" if every == "1" else " once"))
    if o.get(g + "bias_correction") == "epoch":
        words.append("Adam's bias correction by epoch (the authors' rule)")
    if g + "lr" in o:
        words.append(f"lambda lr {o[g + 'lr']}")
    return "GloFND with " + ", ".join(words)


def protocol(o, alpha, epochs=None, label_rate=None):
    """The GloFND arm's protocol against the paper's, in one clause. epochs: the run's length;
    label_rate: the in-batch share of same-label negatives (the true false-negative rate)."""
    g = "negatives.glofnd."
    if o.get(g + "bias_correction") == "epoch":
        bias = "by epoch, as the authors' code"
    else:
        bias = "by each anchor's visit count (the authors' code counts epochs)"
    init, start = o.get(g + "init", "1.0"), int(o.get("negatives.start_epoch", "0"))
    rate = f" (same-label share of a batch's negatives {label_rate:.3f})" if label_rate else ""
    # The paper's bimodal runs: lambda_0 = 1 from epochs 15-20 of 37 (about 40-55%).
    paper = float(init) == 1.0 and epochs and 0.3 <= start / epochs <= 0.6
    tail = ("the paper's protocol" if paper else
            "the paper starts from lambda_0 = 1 after about 40% of training with alpha matched to "
            "its data")
    return (f"lambda_0 {init} from epoch {start}, alpha {alpha}{rate}, Adam's bias correction "
            f"{bias}; {tail}")


def per_seed_values(rows, key):
    """'seed 1 x, seed 2 y' of one arm's rows at an epoch ({seed: row})."""
    v = [(s, r.get(key)) for s, r in sorted(rows.items())]
    return ", ".join(f"seed {s} {fmt(x)}" for s, x in v) if v else "-"


def verdicts(data, alpha, labels=None, main="glofnd"):
    """{claim: {"arms": {method: {...}}, "verdict": str}} for (a)-(c) over the GloFND arms, the
    verdict that of `main`; other arms are named by labels[method] where given."""
    labels = labels or {}
    arms = [m for m in data if m in ("glofnd", main) or m.startswith("glofnd_")]
    out = {}
    for cid, test in tests(data, alpha).items():
        per = {}
        for m in arms:
            series = held_epochs(data[m], test)
            if series:
                per[m] = {"from_epoch": from_epoch(series), "last_epoch": series[-1][0],
                          "epochs_held": sum(ok for _, ok in series), "epochs": len(series)}
        g = per.get(main)
        if not g:
            verdict = ("not judged (no FNC arm beside it)" if cid == "c" and "fnc" not in data
                       and main in data else "missing data")
        elif g["from_epoch"] is not None:
            verdict = f"holds from epoch {g['from_epoch']}"
        else:
            others = sorted((v["from_epoch"], m) for m, v in per.items()
                            if m != main and v["from_epoch"] is not None)
            verdict = f"does not hold by epoch {g['last_epoch']}"
            if others:
                verdict += "; holds only for " + ", ".join(
                    f"{labels.get(m, m)} (from epoch {e})" for e, m in others)
        out[cid] = {"arms": per, "verdict": verdict}
    return out


def summary_sentence(tasks, data, alpha, main, last):
    """fnvlp-report's sentence and the verdicts in it. For the report's readers: no campaign arm
    names, values per seed, the protocol stated; beside the GloFND arm, where the campaign has
    them, the drift of the quantile it tracks (an arm held at each epoch's exact quantile: its
    error on the next export) and retrieval against the same training without a filter."""
    first_task = {m: next(iter(sorted(seeds.items())))[1] for m, seeds in tasks.items() if seeds}
    labels = {m: arm_label(overrides(t)) for m, t in first_task.items()}
    o = overrides(first_task[main]) if main in first_task else {}
    g = {cid: r["verdict"] for cid, r in verdicts(data, alpha, labels, main).items()}
    at_last = {s: rows.get(last, {}) for s, rows in data.get(main, {}).items()}
    rates = [C.epoch_mean(C.metrics(t) or [], "batch_fn_rate_label", set(range(last + 1)))
             for t in tasks.get(main, {}).values()]
    rates = [r for r in rates if r is not None]
    rate = statistics.fmean(rates) if rates else None
    parts = [f"On the labelled synthetic set run for {last + 1} epochs (the GloFND paper trains "
             f"for 37), GloFND ({protocol(o, alpha, last + 1, rate)}) filtered "
             f"{per_seed_values(at_last, 'ff_batch')} of the in-batch negatives in the last epoch "
             f"against alpha {alpha}; its lambda was {per_seed_values(at_last, 'lam_err')} from "
             f"the exact quantile on average (FNC's in-batch threshold "
             f"{per_seed_values(at_last, 'fnc_err')})"]
    held = [m for m, lab in labels.items() if lab.startswith("lambda held at") and m in data]
    h = {s: rows.get(last, {}) for s, rows in data[held[0]].items()} if held else {}
    if any(r.get("lam_err") is not None for r in h.values()):
        parts.append(f"; a lambda held at each epoch's exact quantile was "
                     f"{per_seed_values(h, 'lam_err')} from the next epoch's, the quantile's "
                     f"own drift")
    if "uniform" in tasks and main in tasks:
        pairs = []
        for s in sorted(tasks[main]):
            e = C.read_json(os.path.join(tasks[main][s], "eval.json")) or {}
            u = C.read_json(os.path.join(tasks["uniform"].get(s, ""), "eval.json")) or {}
            if "r_mean" in e and "r_mean" in u:
                pairs.append(f"seed {s} {e['r_mean']:.2f} against {u['r_mean']:.2f}")
        if pairs:
            parts.append("; retrieval r_mean with the filter against the same training without "
                         "it: " + ", ".join(pairs))
    parts.append(f": claim (a) {g['a']}, (b) {g['b']}, (c) {g['c']}.")
    return "".join(parts), g


def fmt(v, prec=4):
    return "-" if v is None else f"{v:.{prec}f}"


def spread(vals):
    v = [x for x in vals if x is not None]
    if not v:
        return "-"
    if len(v) == 1:
        return fmt(v[0])
    return f"{fmt(statistics.fmean(v))} +- {statistics.stdev(v):.2g}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--campaign", action="append", required=True)
    ap.add_argument("--tsv", required=True)
    ap.add_argument("--md", required=True)
    ap.add_argument("--summary", help="JSON with one sentence for fnvlp-report")
    ap.add_argument("--table-link", help="the --md path as the report links it, relative to the "
                    "--summary file's folder (default: computed from the two paths)")
    ap.add_argument("--every", type=int, default=5, help="epochs between rows of the md table")
    ap.add_argument("--main", default="glofnd", help="the GloFND arm the claims are judged for")
    args = ap.parse_args()
    tasks = {}
    for c in args.campaign:
        for method, seeds in C.load_tasks(c).items():
            tasks.setdefault(method, {}).update(seeds)
    alpha = C.alpha_of(tasks, 0.01)
    data = table(tasks, alpha)
    with open(args.tsv, "w", newline="") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerow(("method", "seed", "epoch") + COLUMNS)
        for m, seeds in data.items():
            for s, rows in seeds.items():
                for e, r in sorted(rows.items()):
                    if all(r[k] is None for k in COLUMNS):
                        continue
                    w.writerow([m, s, e] + ["" if r[k] is None else f"{r[k]:.6g}" for k in COLUMNS])
    v = verdicts(data, alpha, main=args.main)
    epochs = sorted({e for seeds in data.values() for rows in seeds.values() for e in rows})
    last = epochs[-1] if epochs else 0
    shown = [e for e in epochs if e % args.every == 0 or e in (1, last)]
    md = [f"# Claims (a)-(c) epoch by epoch (alpha {alpha})", "",
          f"Campaigns: {', '.join(args.campaign)}. Per epoch e: mean +- std over seeds of the "
          "quantities of analysis/horizon.py (its docstring defines them; the TSV beside this file "
          "has every epoch and seed).", "",
          "| claim | verdict over epochs | per arm: from epoch (epochs held / epochs judged) |",
          "|---|---|---|"]
    for cid, r in v.items():
        arms = "; ".join(f"{m}: {'-' if a['from_epoch'] is None else a['from_epoch']} "
                         f"({a['epochs_held']}/{a['epochs']})" for m, a in r["arms"].items())
        md.append(f"| ({cid}) {C.CLAIMS[cid].replace('|', chr(92) + '|')} | {r['verdict']} | {arms or '-'} |")
    for col, title in (("ff_batch", "in-batch filtered fraction"),
                       ("ff_export", "fraction of all negatives above lambda on the export"),
                       ("lam_err", "mean |lambda - exact quantile| on the export"),
                       ("fnc_err", "mean |FNC in-batch threshold - exact quantile| (simulated on "
                                   "the arm's export)"),
                       ("f1_batch", "in-batch false-negative F1"),
                       ("thr_mean", "mean exact (1-alpha)-quantile")):
        methods = [m for m in data if any(r.get(e, {}).get(col) is not None
                                          for rows in data[m].values() for r in [rows] for e in shown)]
        if not methods:
            continue
        md += ["", f"## {title}", "", "| epoch | " + " | ".join(methods) + " |",
               "|---|" + "---|" * len(methods)]
        for e in shown:
            md.append(f"| {e} | " + " | ".join(
                spread([rows.get(e, {}).get(col) for rows in data[m].values()]) for m in methods) + " |")
    with open(args.md, "w") as f:
        f.write("\n".join(md) + "\n")
    if args.summary:
        sentence, g = summary_sentence(tasks, data, alpha, args.main, last)
        json.dump({"sentence": sentence, "table": args.table_link or os.path.relpath(
                       args.md, os.path.dirname(os.path.abspath(args.summary))), "alpha": alpha,
                   "epochs": last + 1, "verdicts": g}, open(args.summary, "w"), indent=1)
    for cid, r in v.items():
        print(f"({cid}) {r['verdict']}")


if __name__ == "__main__":
    main()
