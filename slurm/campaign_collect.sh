#!/usr/bin/env bash
# Final job of a campaign (afterany on the whole array: it runs whatever the tasks' outcome):
# CAMPAIGN/results.csv and results.md (one row per cell of CAMPAIGN/index.tsv, i.e. of every
# submission into the campaign: method, seed, txt_r1 .. r_mean, where present class_txt_r1,
# class_img_r1, class_r_mean (labelled data) and probe_accuracy (FNVLP_EVAL_PROBE), status;
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
# Each array task's state, "SUBMISSION TASKS STATE" per line, for every submission's array
# (SUBMISSION "-": CAMPAIGN/jobs.tsv of a campaign submitted before submissions/ existed); TASKS is
# an index or, for tasks still queued together, SLURM's range ("0-3%1", "1,3").
states=""
add_states() {  # add_states SUBMISSION JOBS_TSV
  local array st=""
  array=$(awk -F'\t' '$1 == "array" {print $2}' "$2" 2>/dev/null || true)
  [ -n "$array" ] || return 0
  if [ "$(scontrol show config 2>/dev/null | sed -n 's/^AccountingStorageType *= *//p')" != accounting_storage/none ] &&
    st=$(sacct -n -X -P -j "$array" -o JobID,State 2>/dev/null) && [ -n "$st" ]; then
    st=$(sed -nE 's/^[0-9]+_\[?([0-9,%-]+)\]?\|([A-Z_]+).*/\1 \2/p' <<<"$st")
  else
    st=$(scontrol show job -o "$array" 2>/dev/null |
      sed -nE 's/.*ArrayTaskId=([0-9,%-]+) .*JobState=([A-Z_]+).*/\1 \2/p' || true)
  fi
  local line
  while IFS= read -r line; do
    [ -z "$line" ] || states+="$1 $line"$'\n'
  done <<<"$st"
}
if [ -d "$camp/submissions" ]; then
  for sub in "$camp"/submissions/*/; do add_states "$(basename "$sub")" "$sub/jobs.tsv"; done
else
  add_states - "$camp/jobs.tsv"
fi
/usr/bin/python3 - "$camp" "$states" <<'PY'
import csv, json, math, os, sys
camp = sys.argv[1]
def tasks(spec):  # "2", "0-3%1", "1,3-4" -> the indices, as strings
    for part in spec.split("%")[0].split(","):
        a, _, b = part.partition("-")
        yield from (str(i) for i in range(int(a), int(b or a) + 1))
state = {(w[0], i): w[2] for w in map(str.split, sys.argv[2].splitlines()) if len(w) == 3
         for i in tasks(w[1])}
# A cell whose task is still queued or running (another submission's, while this one collects)
# is not failed: it has no results yet.
ACTIVE = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD",
          "RESIZING", "SUSPENDED", "REQUEUE_FED"}
# Each submission's array index of a cell: (submission, method, seed) -> index.
sub_index = {}
subs = os.path.join(camp, "submissions")
for sub in os.listdir(subs) if os.path.isdir(subs) else []:
    if os.path.exists(os.path.join(subs, sub, "index.tsv")):
        with open(os.path.join(subs, sub, "index.tsv")) as f:
            for r in csv.DictReader(f, delimiter="\t"):
                sub_index[(sub, r["method"], r["seed"])] = r["index"]
def job_state(rec):
    sub = rec.get("submission") or "-"
    idx = rec["index"] if sub == "-" else sub_index.get((sub, rec["method"], rec["seed"]))
    return state.get((sub, idx), "no job state")
keys = ["txt_r1", "txt_r5", "txt_r10", "img_r1", "img_r5", "img_r10", "txt_r_mean", "img_r_mean", "r_mean"]
# Columns a cell has where its data allow: class-level retrieval (labelled data) and the probe.
extra_keys = ["class_txt_r1", "class_img_r1", "class_r_mean", "probe_accuracy"]
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
            row.update({k: float(e[k]) for k in extra_keys if k in e})
        except (OSError, ValueError) as err:
            # A failed cell: marked with the task's job state, never dropped.
            st = job_state(rec)
            if st in ACTIVE:
                row.update({k: "" for k in keys}, status=f"not run yet ({st})", source="")
                rows.append(row)
                continue
            row.update({k: "" for k in keys}, status=f"failed ({st})", source="")
            failed.append(f"task {rec['index']} ({rec['method']}, seed {rec['seed']}): {st}; "
                          f"{path}: {err}")
        rows.append(row)
present = [k for k in extra_keys if any(k in r for r in rows)]
for r in rows:
    r.update({k: "" for k in present if k not in r})
keys = keys + present
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
        v = [r[k] for r in g if r[k] != ""]
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
