#!/usr/bin/env bash
# `slurm/ablation_campaign.sh MATRIX --local` runs a campaign here without SLURM (sbatch, srun and
# scontrol on PATH fail the test if called): the shard stage, every cell through
# slurm/campaign_task.sh, the collect table. A GloFND cell with FNVLP_EPOCH_STATS=1 leaves
# fnvlp-simstat's summary of each of its epoch exports (lambda included) in epoch_stats.jsonl; a
# cell whose config is refused is marked failed in the table and the command exits non-zero.
# No cluster needed: usage campaign_local.sh BUILD_DIR SOURCE_DIR.
set -euo pipefail
export FNVLP_BUILD_DIR=$1 FNVLP_ROOT=$2
work=$FNVLP_BUILD_DIR/slurm-work/campaign_local
rm -rf "$work"
mkdir -p "$work/bin"
fail() {
  echo "FAIL (campaign_local): $*"
  exit 1
}
for tool in sbatch srun scontrol sacct; do
  printf '#!/bin/sh\necho "%s called by a --local campaign" >>"%s/slurm-calls"\nexit 1\n' \
    "$tool" "$work" >"$work/bin/$tool"
  chmod +x "$work/bin/$tool"
done
export PATH=$work/bin:$PATH
unset SLURM_JOB_ID SLURM_ARRAY_TASK_ID
cat >"$work/matrix.yaml" <<'YAML'
name: local_test
methods: [glofnd, broken]
seeds: [1]
env:
  FNVLP_SCALE: smoke
  FNVLP_DATA: synthetic
  FNVLP_SYNTH_IMAGES: 96
  FNVLP_SYNTH_CLASSES: 4
  FNVLP_BATCH: 16
  # 385 train pairs: 12 steps per epoch at 2 x 16, 2 epochs (exports epoch-000 and epoch-001).
  FNVLP_STEPS: 24
  FNVLP_LOG_EVERY: 4
  FNVLP_K_TEST: 4
  FNVLP_EPOCH_STATS: 1
set: [negatives.alpha=0.05, negatives.start_epoch=1, negatives.glofnd.init=0.5,
      train.export_embeddings=true]
custom:
  broken: [train.log_every=0]
YAML
export FNVLP_WORK=$work/w
camp=$work/campaign
cd "$FNVLP_ROOT"
if bash slurm/ablation_campaign.sh "$work/matrix.yaml" --out "$camp" --local >"$work/run.log" 2>&1; then
  cat "$work/run.log"
  fail "--local exited 0 with a failed cell"
fi
grep -q "failed cells: broken-s1" "$work/run.log" || { cat "$work/run.log"; fail "the failed cell is not named"; }
[ ! -e "$work/slurm-calls" ] || fail "SLURM was called: $(cat "$work/slurm-calls")"
/usr/bin/python3 - "$camp" <<'PY'
import csv, json, sys
camp = sys.argv[1]
rows = {r["method"]: r for r in csv.DictReader(open(camp + "/results.csv"))}
assert rows["glofnd"]["status"] == "ok" and 0 <= float(rows["glofnd"]["r_mean"]) <= 100, rows
assert rows["broken"]["status"].startswith("failed"), rows["broken"]
lines = [json.loads(l) for l in open(camp + "/tasks/glofnd-s1/epoch_stats.jsonl")]
exports = [d["export"] for d in lines]
assert exports == ["epoch-000.h5", "epoch-001.h5"], exports
for d in lines:
    assert abs(d["alpha"] - 0.05) < 1e-12, d["alpha"]
    for m in ("image", "text"):
        assert 0 <= d[m]["glofnd"]["mean_abs_error"] < 2 and 0 <= d[m]["fnc"]["mean_abs_error"] < 2, d
assert json.load(open(camp + "/tasks/glofnd-s1/stats.json"))["epoch"] == lines[-1]["epoch"]
print("local campaign: glofnd r_mean %s; |lambda - exact| per export %s" % (
      rows["glofnd"]["r_mean"],
      [round((d["image"]["glofnd"]["mean_abs_error"] + d["text"]["glofnd"]["mean_abs_error"]) / 2, 4)
       for d in lines]))
PY
# A second run of the finished cell adds no line: the exports already summarised are skipped.
bash slurm/ablation_campaign.sh "$work/matrix.yaml" --out "$camp" --local --methods glofnd \
  >"$work/run2.log" 2>&1 || { cat "$work/run2.log"; fail "the rerun of a finished cell failed"; }
[ "$(wc -l <"$camp/tasks/glofnd-s1/epoch_stats.jsonl")" -eq 2 ] || fail "epoch_stats.jsonl grew on a rerun"
echo PASS
