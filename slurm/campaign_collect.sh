#!/usr/bin/env bash
# Final job of a campaign (afterok on the whole array): CAMPAIGN/results.csv and results.md (one
# row per task: method, seed, txt_r1 .. r_mean; then mean +- std over seeds per method), then
# fnvlp-report --campaign CAMPAIGN --out CAMPAIGN/report.
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
/usr/bin/python3 - "$camp" <<'PY'
import csv, json, math, os, sys
camp = sys.argv[1]
keys = ["txt_r1", "txt_r5", "txt_r10", "img_r1", "img_r5", "img_r10", "txt_r_mean", "img_r_mean", "r_mean"]
rows = []
with open(os.path.join(camp, "index.tsv")) as f:
    for rec in csv.DictReader(f, delimiter="\t"):
        path = os.path.join(camp, "tasks", f"{rec['method']}-s{rec['seed']}", "eval.json")
        try:
            e = json.load(open(path))
        except (OSError, ValueError) as err:
            sys.exit(f"collect: task {rec['index']} ({rec['method']}, seed {rec['seed']}): {path}: {err}")
        missing = [k for k in keys if k not in e]
        if missing:
            sys.exit(f"collect: {path} lacks {missing}")
        rows.append(dict(index=int(rec["index"]), method=rec["method"], seed=int(rec["seed"]),
                         **{k: float(e[k]) for k in keys},
                         source="fnvlp-eval" if e.get("reranked", True) else "pretrain-val-itc"))
with open(os.path.join(camp, "results.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=["method", "seed"] + keys + ["source"], extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
def fmt(v): return f"{v:.2f}"
try:
    import yaml
    name = yaml.safe_load(open(os.path.join(camp, "matrix.yaml")))["name"]
except Exception:  # the table matters more than its title
    name = os.path.basename(os.path.abspath(camp))
md = [f"# Campaign {name}", "",
      "| method | seed | " + " | ".join(keys) + " | source |",
      "|---|---|" + "---|" * len(keys) + "---|"]
md += ["| %s | %d | %s | %s |" % (r["method"], r["seed"], " | ".join(fmt(r[k]) for k in keys), r["source"])
       for r in rows]
md += ["", "Mean +- std over seeds (sample std; n = seeds):", "",
       "| method | n | " + " | ".join(keys) + " |", "|---|---|" + "---|" * len(keys)]
for m in dict.fromkeys(r["method"] for r in rows):
    g = [r for r in rows if r["method"] == m]
    cells = []
    for k in keys:
        v = [r[k] for r in g]
        mu = sum(v) / len(v)
        sd = math.sqrt(sum((x - mu) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else 0.0
        cells.append(f"{mu:.2f} +- {sd:.2f}")
    md.append(f"| {m} | {len(g)} | " + " | ".join(cells) + " |")
if any(r["source"] != "fnvlp-eval" for r in rows):
    md += ["", "source pretrain-val-itc: fnvlp-eval was not built; the numbers are the run's last "
           "zero-shot validation record (ITC only, no ITM re-ranking)."]
open(os.path.join(camp, "results.md"), "w").write("\n".join(md) + "\n")
print(f"collect: {len(rows)} tasks -> {camp}/results.csv, results.md")
PY
if fnvlp_have_or_skip fnvlp-report; then
  "$(fnvlp_bin fnvlp-report)" --campaign "$camp" --out "$camp/report"
  fnvlp_log "campaign report: $camp/report/report.html"
fi
