#!/usr/bin/env bash
# The whole chain as README command 1 runs it: `sbatch slurm/pretrain_4m.sh` at smoke scale,
# shard -> pretrain -> simstat -> report -> finetune -> eval, every job COMPLETED, the report and
# the evaluation JSON present, the report rendered in a browser (tests/integration/report_browser.sh).
# Needs fnvlp-simstat, fnvlp-report, fnvlp-finetune and fnvlp-eval.
set -euo pipefail
# shellcheck source=tests/integration/slurm/lib.sh
source "$(dirname "$0")/lib.sh" "$1" "$2" full_chain
export FNVLP_STAGES="shard pretrain simstat report finetune eval"
mkdir -p "$FNVLP_LOGS"
cd "$FNVLP_ROOT"
for b in fnvlp-simstat fnvlp-report fnvlp-finetune fnvlp-eval; do
  [ -n "$(fnvlp_bin_path "$b")" ] || fail "$b not built (this test needs the merged issues 5 and 6)"
done
id=$(sbatch --parsable "${smoke_opts[@]}" --output="$FNVLP_LOGS/%x-%j.out" slurm/pretrain_4m.sh)
bash slurm/pipeline.sh wait --job "$id"
assert_chain_completed "$FNVLP_WORK/chain.tsv"
for f in run/report/report.html run/report/report.json run/analysis/simstat.h5 eval.json; do
  [ -s "$FNVLP_WORK/$f" ] || fail "missing $f"
done
/usr/bin/python3 - "$FNVLP_WORK/eval.json" "$FNVLP_WORK/finetune" <<'PY'
import json, os, sys
e = json.load(open(sys.argv[1]))
# The chain evaluates fine-tuning's best checkpoint by validation (RUN/best/latest), not its last.
best = os.path.realpath(os.path.join(sys.argv[2], "best", "latest"))
assert os.path.isdir(best), "fine-tuning kept no best checkpoint: " + best
assert os.path.realpath(e["checkpoint"]) == best, ("evaluated", e["checkpoint"], "not", best)
for k in ("txt_r1", "txt_r5", "txt_r10", "img_r1", "img_r5", "img_r10", "txt_r_mean", "img_r_mean",
          "r_mean", "itc_r_mean"):
    assert k in e and 0.0 <= e[k] <= 100.0, (k, e)
print("eval: r_mean %.2f (ITC only %.2f)" % (e["r_mean"], e["itc_r_mean"]))
PY
# The report as a user sees it: rendered by headless Chromium, every image loaded, no console
# message, the summary on the page.
bash "$FNVLP_ROOT/tests/integration/report_browser.sh" "$FNVLP_WORK/run/report"
echo "report: $FNVLP_WORK/run/report/report.html"
echo PASS
