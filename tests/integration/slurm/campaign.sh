#!/usr/bin/env bash
# A 3-method x 2-seed campaign at smoke scale: one job array (%A_%a, %2), per-task pretraining and
# evaluation, the afterany collect job's results table. Methods: uniform (slurm/methods.sh), a
# custom one defined in the matrix, and "broken", whose config is refused (train.log_every=0:
# exit 2), so its two cells fail: the table is still made, those cells marked with their job
# state, and --wait exits non-zero. MATRIX.yaml may be given instead (e.g.
# slurm/campaigns/smoke.yaml); every cell must then succeed. FNVLP_SKIP_MISSING from the environment decides whether a
# missing fnvlp-eval / fnvlp-report is tolerated (see tests/integration/slurm/CMakeLists.txt).
set -euo pipefail
# shellcheck source=tests/integration/slurm/lib.sh
source "$(dirname "$0")/lib.sh" "$1" "$2" "${4:-campaign}"
matrix=${3:-}
cd "$FNVLP_ROOT"
broken=""
if [ -z "$matrix" ]; then
  matrix=$FNVLP_WORK/matrix.yaml
  broken=broken
  cat >"$matrix" <<'YAML'
name: test
methods: [uniform, lr_low, broken]
seeds: [1, 2]
concurrency: 2
set: [train.max_steps=12]
custom:
  lr_low: [optim.lr=2.0e-4]
  broken: [train.log_every=0]
YAML
fi
camp=$FNVLP_WORK/campaign
if bash slurm/ablation_campaign.sh "$matrix" --out "$camp" --wait >"$FNVLP_WORK/wait.log" 2>&1; then
  [ -z "$broken" ] || { cat "$FNVLP_WORK/wait.log"; fail "--wait exited 0 with failed cells"; }
else
  cat "$FNVLP_WORK/wait.log"
  [ -n "$broken" ] || fail "the campaign failed"
  grep -q "failed cells (marked in $camp/results.md)" "$FNVLP_WORK/wait.log" ||
    fail "--wait failed without naming the failed cells"
fi
read -r array < <(awk -F'\t' '$1 == "array" {print $2}' "$camp/jobs.tsv")
while IFS=$'\t' read -r i method _; do
  st=$(job_field "${array}_$i" JobState)
  want=COMPLETED
  [ "$method" != "$broken" ] || want=FAILED
  [ "$st" = "$want" ] || fail "array task ${array}_$i ($method) is $st, expected $want"
done < <(tail -n +2 "$camp/index.tsv")
ls "$FNVLP_LOGS"/fnvlp-camp-*-"${array}"_0.out >/dev/null || fail "no %A_%a log for task 0"
/usr/bin/python3 - "$camp" "$matrix" "$broken" <<'PY'
import csv, json, sys, yaml
camp, matrix, broken = sys.argv[1], sys.argv[2], sys.argv[3]
m = yaml.safe_load(open(matrix))
idx = list(csv.DictReader(open(camp + "/index.tsv"), delimiter="\t"))
want = [(str(i * len(m["seeds"]) + j), meth, str(s)) for i, meth in enumerate(m["methods"])
        for j, s in enumerate(m["seeds"])]
assert [(r["index"], r["method"], r["seed"]) for r in idx] == want, idx
for r in idx:
    t = json.load(open(f"{camp}/tasks/{r['method']}-s{r['seed']}/task.json"))
    assert t["index"] == int(r["index"]) and t["seed"] == int(r["seed"]), t
    assert "train.seed=" + r["seed"] in t["overrides"], t
rows = list(csv.DictReader(open(camp + "/results.csv")))
assert [(r["method"], r["seed"]) for r in rows] == [(w[1], w[2]) for w in want], rows
for r in rows:
    if r["method"] == broken:
        # The failed cell: in the table, marked with its job state, no numbers.
        assert r["status"] == "failed (FAILED)" and r["r_mean"] == "", r
        continue
    assert r["status"] == "ok", r
    for k in ("txt_r1", "img_r1", "r_mean"):
        assert 0.0 <= float(r[k]) <= 100.0, r
md = open(camp + "/results.md").read()
assert all(meth in md for meth in m["methods"]) and "+-" in md, md
if broken:
    assert md.count("| failed (FAILED) |") == 2 and "2 failed cell(s)" in md, md
    assert f"| {broken} | 0 | -" in md, md
print(md)
PY
echo PASS
