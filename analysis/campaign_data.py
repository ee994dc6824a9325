"""What the campaign analyses share (claims.py, horizon.py, filter_sweep.py): the claims' wording,
the readers of a campaign directory (slurm/ablation_campaign.sh's index.tsv and tasks/) and the
per-seed verdict rules: "held" when every seed's value lies on the claimed side of every seed's
value of the other method, "not held" when every seed's lies on the other side, otherwise
"inconclusive at this spread".
"""
import csv
import gzip
import json
import math
import os
import statistics
import sys

PROG = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "campaign_data"

CLAIMS = {
    "a": "GloFND's filtered fraction of negatives per anchor converges to alpha (GloFND Fig. pred_fn)",
    "b": "GloFND's lambda is closer to the exact per-anchor (1-alpha)-quantile than FNC's in-batch "
         "threshold (mean |error|, fnvlp-simstat on the same export; GloFND 4.3)",
    "c": "On labelled data GloFND's false-negative F1 beats FNC's (GloFND Table 1: 53.1 vs 36.4)",
    "d": "The in-batch rate of known false negatives rises with the sampling quantile q: GRIT q=1 "
         "above q=0.5 and uniform (FALCON Fig. 2)",
    "e": "FALCON's mean sampled q falls over training (FALCON's key finding)",
    "f": "Zero-shot retrieval R@1 orders FALCON >= GRIT >= uniform (FALCON Table 1)",
}
# Claim (a): the filtered fraction counts as at alpha within this relative tolerance.
ALPHA_TOLERANCE = 0.25


def load_tasks(campaign):
    """{method: {seed: task_dir}} of one campaign directory: from index.tsv, or without one from
    the tasks' task.json files (as fnvlp-report's campaign table reads them)."""
    out = {}
    path = os.path.join(campaign, "index.tsv")
    if not os.path.exists(path) and os.path.isdir(os.path.join(campaign, "tasks")):
        for name in sorted(os.listdir(os.path.join(campaign, "tasks"))):
            d = os.path.join(campaign, "tasks", name)
            t = read_json(os.path.join(d, "task.json"))
            if not t or "method" not in t or "seed" not in t:
                sys.exit(f"{PROG}: {d}/task.json: missing, not JSON or without method and seed")
            out.setdefault(t["method"], {})[int(t["seed"])] = d
        return out
    try:
        with open(path) as f:
            for rec in csv.DictReader(f, delimiter="\t"):
                d = os.path.join(campaign, "tasks", f"{rec['method']}-s{rec['seed']}")
                out.setdefault(rec["method"], {})[int(rec["seed"])] = d
    except OSError as e:
        sys.exit(f"{PROG}: {path}: {e}")
    return out


def open_log(path):
    """A per-step log of a task: PATH as a campaign writes it, or PATH.gz as analysis/results keeps
    it (campaign_results.py); None when neither exists."""
    if os.path.exists(path):
        return open(path)
    if os.path.exists(path + ".gz"):
        return gzip.open(path + ".gz", "rt")
    return None


def metrics(task):
    f = open_log(os.path.join(task, "run", "metrics.jsonl"))
    if f is None:
        return None
    with f:
        return [json.loads(line) for line in f if line.strip()]


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def epoch_mean(recs, key, epochs):
    vals = [r[key] for r in recs if key in r and r.get("epoch") in epochs and
            isinstance(r[key], (int, float)) and math.isfinite(r[key])]
    return statistics.fmean(vals) if vals else None


def epochs_with(recs, key):
    return sorted({r["epoch"] for r in recs if key in r and "epoch" in r})


def logged(task, key):
    """The task's metric records and the epochs in which `key` was logged (None, [] if none)."""
    recs = metrics(task)
    return (recs, epochs_with(recs, key)) if recs else (None, [])


def per_seed(tasks, method, fn):
    """{seed: fn(task)} over the method's seeds where fn gives a value."""
    out = {}
    for seed, task in sorted(tasks.get(method, {}).items()):
        v = fn(task)
        if v is not None:
            out[seed] = v
    return out


def compare(hi, lo, strict=True):
    """Verdict that every value of `hi` lies above (strict) or not below every value of `lo`
    (dicts seed -> value)."""
    if not hi or not lo:
        return "missing data"
    top, bottom = min(hi.values()), max(lo.values())
    if top > bottom or (not strict and top == bottom):
        return "held"
    if max(hi.values()) < min(lo.values()):
        return "not held"
    return "inconclusive at this spread"


def combine(verdicts):
    if any(v == "missing data" for v in verdicts):
        return "missing data"
    if all(v == "held" for v in verdicts):
        return "held"
    if any(v == "not held" for v in verdicts):
        return "not held"
    return "inconclusive at this spread"


def spread(values):
    v = list(values.values())
    if not v:
        return None
    return {"mean": statistics.fmean(v), "std": statistics.stdev(v) if len(v) > 1 else 0.0,
            "seeds": {str(k): x for k, x in values.items()}}


def alpha_of(tasks, default):
    """negatives.alpha of the GloFND tasks (the last override wins, as in fnvlp-pretrain): glofnd,
    fnc, then the glofnd_* arms (a campaign of one such arm has neither of the first two)."""
    arms = ["glofnd", "fnc"] + [m for m in sorted(tasks) if m.startswith("glofnd_")]
    for seed_tasks in (tasks.get(m, {}) for m in arms):
        for task in seed_tasks.values():
            t = read_json(os.path.join(task, "task.json")) or {}
            vals = [o.split("=", 1)[1] for o in t.get("overrides", [])
                    if o.startswith("negatives.alpha=")]
            if vals:
                return float(vals[-1])
    return default
