#!/usr/bin/env bash
# Two submissions into one campaign directory: the first held in the queue, the second (another
# method) submitted and run meanwhile. Each array task must train the cell of its own submission
# (before submissions/K/index.tsv, the second submission rewrote the index the first one's tasks
# read, so the first ran the second's cell again and its own never), a third submission naming a
# cell still queued is refused, and CAMPAIGN/index.tsv and the results table list the cells of
# both submissions (a queued cell as not run yet, not failed).
set -euo pipefail
# shellcheck source=tests/integration/slurm/lib.sh
source "$(dirname "$0")/lib.sh" "$1" "$2" campaign_resubmit
cd "$FNVLP_ROOT"
matrix=$FNVLP_WORK/matrix.yaml
cat >"$matrix" <<'YAML'
name: resubmit
methods: [uniform, lr_low]
seeds: [1]
concurrency: 1
set: [train.max_steps=8]
custom:
  lr_low: [optim.lr=2.0e-4]
YAML
camp=$FNVLP_WORK/campaign
export FNVLP_SKIP_MISSING="fnvlp-eval fnvlp-report"
FNVLP_SBATCH_CAMPAIGN=--hold bash slurm/ablation_campaign.sh "$matrix" --out "$camp" --methods uniform \
  >"$FNVLP_WORK/sub1.log" 2>&1 || { cat "$FNVLP_WORK/sub1.log"; fail "first submission"; }
# The shards first: both submissions' shard jobs would otherwise build the shared set at once.
read -r shard1 < <(awk -F'\t' '$1 == "shard" {print $2}' "$camp/submissions/1/jobs.tsv")
fnvlp_wait_jobs "$shard1" || fail "the first submission's shard job"
read -r array1 < <(awk -F'\t' '$1 == "array" {print $2}' "$camp/submissions/1/jobs.tsv")
read -r collect1 < <(awk -F'\t' '$1 == "collect" {print $2}' "$camp/submissions/1/jobs.tsv")
cleanup() { scancel "$array1" "$collect1" 2>/dev/null || true; }
trap cleanup EXIT

bash slurm/ablation_campaign.sh "$matrix" --out "$camp" --methods lr_low --wait \
  >"$FNVLP_WORK/sub2.log" 2>&1 || { cat "$FNVLP_WORK/sub2.log"; fail "second submission"; }
fnvlp_jobs_active "$array1" || fail "the held array $array1 is no longer queued"
# The second collect tabulates both submissions' cells: the queued one as not run, not failed.
grep -q '^| uniform | 1 | .* | not run yet (PENDING) |' "$camp/results.md" ||
  { cat "$camp/results.md"; fail "the queued cell is not in the table as not run yet"; }
if bash slurm/ablation_campaign.sh "$matrix" --out "$camp" --methods uniform >"$FNVLP_WORK/sub3.log" 2>&1; then
  fail "a submission of a cell still queued (uniform-s1 in array $array1) was accepted"
fi
grep -q "cells still queued or running: uniform-s1 (array $array1)" "$FNVLP_WORK/sub3.log" ||
  { cat "$FNVLP_WORK/sub3.log"; fail "the refusal does not name the queued cell and its array"; }
[ ! -d "$camp/submissions/3" ] || fail "the refused submission wrote submissions/3"

scontrol release "$array1" "$collect1"
fnvlp_wait_jobs "$collect1" || fail "the first submission's jobs"
trap - EXIT
for cell in uniform-s1 lr_low-s1; do
  [ -s "$camp/tasks/$cell/run/summary.json" ] || fail "$cell was not trained (no run/summary.json)"
done
/usr/bin/python3 -c 'import sys, yaml; sys.exit(yaml.safe_load(open(sys.argv[1]))["optim"]["lr"] != 2e-4)' \
  "$camp/tasks/lr_low-s1/run/config.yaml" || fail "lr_low-s1's run does not have its learning rate"
# Each array task trained its own submission's cell (the task log names it).
grep -q "campaign task 0: uniform seed 1" "$FNVLP_LOGS"/fnvlp-camp-resubmit-"${array1}"_0.out ||
  fail "array $array1 task 0 did not train uniform seed 1"
/usr/bin/python3 - "$camp" <<'PY'
import csv, sys
camp = sys.argv[1]
idx = [(r["method"], r["seed"], r["submission"]) for r in csv.DictReader(open(camp + "/index.tsv"), delimiter="\t")]
assert idx == [("uniform", "1", "1"), ("lr_low", "1", "2")], idx
for k, m in (("1", "uniform"), ("2", "lr_low")):
    sub = [(r["index"], r["method"]) for r in csv.DictReader(open(f"{camp}/submissions/{k}/index.tsv"), delimiter="\t")]
    assert sub == [("0", m)], (k, sub)
rows = [(r["method"], r["status"]) for r in csv.DictReader(open(camp + "/results.csv"))]
assert rows == [("uniform", "ok"), ("lr_low", "ok")], rows
PY
echo PASS
