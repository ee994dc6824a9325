#!/usr/bin/env bash
# A 2-method x 2-seed campaign at smoke scale: one job array (%A_%a, %2), per-task pretraining and
# evaluation, the afterok collect job's results table. Methods: uniform (slurm/methods.sh) and a
# custom one defined in the matrix; MATRIX.yaml may be given (e.g. slurm/campaigns/smoke.yaml once
# the false-negative methods exist). FNVLP_SKIP_MISSING from the environment decides whether a
# missing fnvlp-eval / fnvlp-report is tolerated (see tests/integration/slurm/CMakeLists.txt).
set -euo pipefail
# shellcheck source=tests/integration/slurm/lib.sh
source "$(dirname "$0")/lib.sh" "$1" "$2" "${4:-campaign}"
matrix=${3:-}
cd "$FNVLP_ROOT"
if [ -z "$matrix" ]; then
  matrix=$FNVLP_WORK/matrix.yaml
  cat >"$matrix" <<'YAML'
name: test
methods: [uniform, lr_low]
seeds: [1, 2]
concurrency: 2
set: [train.max_steps=12]
custom:
  lr_low: [optim.lr=2.0e-4]
YAML
fi
camp=$FNVLP_WORK/campaign
bash slurm/ablation_campaign.sh "$matrix" --out "$camp" --wait
read -r array < <(awk -F'\t' '$1 == "array" {print $2}' "$camp/jobs.tsv")
n=$(($(wc -l <"$camp/index.tsv") - 1))
for i in $(seq 0 $((n - 1))); do
  st=$(job_field "${array}_$i" JobState)
  [ "$st" = COMPLETED ] || fail "array task ${array}_$i is $st"
done
ls "$FNVLP_LOGS"/fnvlp-camp-*-"${array}"_0.out >/dev/null || fail "no %A_%a log for task 0"
/usr/bin/python3 - "$camp" "$matrix" <<'PY'
import csv, json, sys, yaml
camp, matrix = sys.argv[1], sys.argv[2]
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
    for k in ("txt_r1", "img_r1", "r_mean"):
        assert 0.0 <= float(r[k]) <= 100.0, r
md = open(camp + "/results.md").read()
assert all(meth in md for meth in m["methods"]) and "+-" in md, md
print(md)
PY
echo PASS
