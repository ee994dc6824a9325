#!/usr/bin/python3
"""Copies a campaign's small results into a folder that can be committed (issue 31).

Usage: campaign_results.py --campaign CAMPAIGN_DIR --out RESULTS_DIR

Keeps the campaign layout, so that `fnvlp-report --campaign RESULTS_DIR --out REPORT_DIR` rebuilds
the HTML report and its claims page from the copy alone: matrix.yaml, index.tsv, results.csv and
results.md, the report's claims.json and claims.md, and per task task.json, eval.json, stats.json
(simstat's lambda-vs-exact summary), epoch_stats.jsonl (the same per epoch export, where the
campaign ran with FNVLP_EPOCH_STATS=1), run/summary.json and run/metrics.jsonl without the per-phase
timings. The two per-step logs are kept gzipped (byte-stable: no name or time in the header);
analysis/campaign_data.py reads either form. No checkpoints, embeddings or images.
"""
import argparse
import gzip
import json
import os
import shutil
import sys

TOP = ("matrix.yaml", "index.tsv", "results.csv", "results.md", "report/claims.md",
       "report/data/claims.json")
PER_TASK = ("task.json", "eval.json", "stats.json", "run/summary.json")
LOGS = ("epoch_stats.jsonl",)  # copied gzipped


def copy(src, dst):
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    shutil.copyfile(src, dst)


def gzip_text(path, text):
    """PATH.gz holding `text`; mtime 0 and no file name, so equal text gives equal bytes."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".gz", "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw,
                                                       mtime=0) as g:
        g.write(text.encode())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--campaign", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    camp, out = args.campaign, args.out
    if not os.path.exists(os.path.join(camp, "index.tsv")):
        sys.exit(f"campaign_results.py: {camp}/index.tsv: missing (not a campaign directory)")
    for name in TOP:
        if os.path.exists(os.path.join(camp, name)):
            copy(os.path.join(camp, name), os.path.join(out, os.path.basename(name)))
    tasks = os.path.join(camp, "tasks")
    n = 0
    for task in sorted(os.listdir(tasks)):
        for name in PER_TASK:
            p = os.path.join(tasks, task, name)
            if os.path.exists(p):
                copy(p, os.path.join(out, "tasks", task, name))
        for name in LOGS:
            p = os.path.join(tasks, task, name)
            if os.path.exists(p):
                with open(p) as f:
                    gzip_text(os.path.join(out, "tasks", task, name), f.read())
        src = os.path.join(tasks, task, "run", "metrics.jsonl")
        if os.path.exists(src):
            lines = []
            with open(src) as f:
                for lineno, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        rec = json.loads(line)
                    except ValueError as e:
                        sys.exit(f"campaign_results.py: {src}: line {lineno}: not JSON: {e}")
                    rec.pop("phase_ms", None)
                    lines.append(json.dumps(rec, sort_keys=True) + "\n")
            gzip_text(os.path.join(out, "tasks", task, "run", "metrics.jsonl"), "".join(lines))
        n += 1
    print(f"campaign_results.py: {n} tasks of {camp} -> {out}")


if __name__ == "__main__":
    main()
