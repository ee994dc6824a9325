#!/usr/bin/env bash
# Final job of a campaign (afterany on the whole array: it runs whatever the tasks' outcome):
# CAMPAIGN/results.csv and results.md (one row per task: method, seed, txt_r1 .. r_mean, status;
# a task without eval.json is a failed cell, marked with its job state; then mean +- std per
# method over the seeds that succeeded), then fnvlp-report --campaign CAMPAIGN --out
# CAMPAIGN/report (with the claims page of analysis/claims.py: report/claims.md). Job states come
# from sacct where accounting exists, else from scontrol.
#SBATCH --job-name=fnvlp-collect
#SBATCH --output=logs/%x-%j.out
set -euo pipefail
# sbatch runs a spool copy of this script: the checkout is found from the submitted command's path.
[ -n "${FNVLP_ROOT:-}" ] || [ -z "${SLURM_JOB_ID:-}" ] ||
  job_cmd=$(scontrol show job "$SLURM_JOB_ID" | sed -n 's/^ *Command=\([^ ]*\).*/\1/p')
FNVLP_ROOT=${FNVLP_ROOT:-$(cd "$(dirname "${job_cmd:-${BASH_SOURCE[0]}}")/.." && pwd)}
# shellcheck source=slurm/common.sh
source "$FNVLP_ROOT/slurm/common.sh"

camp=${1:?usage: slurm/campaign_collect.sh CAMPAIGN_DIR}
fnvlp_log_header "campaign collect $camp"
# Each array task's final state, "INDEX STATE" per line (empty when the array id is unknown).
array=$(awk -F'\t' '$1 == "array" {print $2}' "$camp/jobs.tsv" 2>/dev/null || true)
states=""
if [ -n "$array" ]; then
  if [ "$(scontrol show config 2>/dev/null | sed -n 's/^AccountingStorageType *= *//p')" != accounting_storage/none ] &&
    states=$(sacct -n -X -P -j "$array" -o JobID,State 2>/dev/null) && [ -n "$states" ]; then
    states=$(sed -nE 's/^[0-9]+_([0-9]+)\|([A-Z_]+).*/\1 \2/p' <<<"$states")
  else
    states=$(scontrol show job -o "$array" 2>/dev/null |
      sed -nE 's/.*ArrayTaskId=([0-9]+) .*JobState=([A-Z_]+).*/\1 \2/p' || true)
  fi
fi
/usr/bin/python3 - "$camp" "$states" <<'PY'
import csv, json, math, os, sys
camp = sys.argv[1]
state = dict(l.split() for l in sys.argv[2].splitlines() if len(l.split()) == 2)
keys = ["txt_r1", "txt_r5", "txt_r10", "img_r1", "img_r5", "img_r10", "txt_r_mean", "img_r_mean", "r_mean"]
rows, failed = [], []
with open(os.path.join(camp, "index.tsv")) as f:
    for rec in csv.DictReader(f, delimiter="\t"):
        path = os.path.join(camp, "tasks", f"{rec['method']}-s{rec['seed']}", "eval.json")
        row = dict(index=int(rec["index"]), method=rec["method"], seed=int(rec["seed"]))
        try:
            e = json.load(open(path))
            missing = [k for k in keys if k not in e]
            if missing:
                raise ValueError(f"lacks {missing}")
            row.update({k: float(e[k]) for k in keys}, status="ok",
                       source="fnvlp-eval" if e.get("reranked", True) else "pretrain-val-itc")
        except (OSError, ValueError) as err:
            # A failed cell: marked with the task's job state, never dropped.
            st = state.get(rec["index"], "no job state")
            row.update({k: "" for k in keys}, status=f"failed ({st})", source="")
            failed.append(f"task {rec['index']} ({rec['method']}, seed {rec['seed']}): {st}; "
                          f"{path}: {err}")
        rows.append(row)
with open(os.path.join(camp, "results.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=["method", "seed"] + keys + ["status", "source"],
                       extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
def fmt(v): return "-" if v == "" else f"{v:.2f}"
try:
    import yaml
    name = yaml.safe_load(open(os.path.join(camp, "matrix.yaml")))["name"]
except Exception:  # the table matters more than its title
    name = os.path.basename(os.path.abspath(camp))
md = [f"# Campaign {name}", "",
      "| method | seed | " + " | ".join(keys) + " | status | source |",
      "|---|---|" + "---|" * len(keys) + "---|---|"]
md += ["| %s | %d | %s | %s | %s |" % (r["method"], r["seed"], " | ".join(fmt(r[k]) for k in keys),
                                       r["status"], r["source"]) for r in rows]
md += ["", "Mean +- std over the seeds that succeeded (sample std; n = those seeds):", "",
       "| method | n | " + " | ".join(keys) + " |", "|---|---|" + "---|" * len(keys)]
for m in dict.fromkeys(r["method"] for r in rows):
    g = [r for r in rows if r["method"] == m and r["status"] == "ok"]
    cells = []
    for k in keys:
        v = [r[k] for r in g]
        if not v:
            cells.append("-")
            continue
        mu = sum(v) / len(v)
        sd = math.sqrt(sum((x - mu) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else 0.0
        cells.append(f"{mu:.2f} +- {sd:.2f}")
    md.append(f"| {m} | {len(g)} | " + " | ".join(cells) + " |")
if failed:
    md += ["", f"{len(failed)} failed cell(s), marked in the table:", ""] + [f"- {x}" for x in failed]
if any(r["source"] == "pretrain-val-itc" for r in rows):
    md += ["", "source pretrain-val-itc: fnvlp-eval was not built; the numbers are the run's last "
           "zero-shot validation record (ITC only, no ITM re-ranking)."]
open(os.path.join(camp, "results.md"), "w").write("\n".join(md) + "\n")
print(f"collect: {len(rows)} tasks ({len(failed)} failed) -> {camp}/results.csv, results.md")
for x in failed:
    print(f"collect: failed cell: {x}")
PY
if fnvlp_have_or_skip fnvlp-report; then
  "$(fnvlp_bin fnvlp-report)" --campaign "$camp" --out "$camp/report"
  fnvlp_log "campaign report: $camp/report/report.html; the papers' claims (issue 31):"
  cat "$camp/report/claims.md"
fi
