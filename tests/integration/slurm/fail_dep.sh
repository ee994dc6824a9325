#!/usr/bin/env bash
# A failing stage stops its dependents: shards of a dataset whose images are all missing fail
# (reject fraction), pretrain waits with DependencyNeverSatisfied, and `pipeline.sh submit
# --wait` exits non-zero naming the failed job, its reason and log, and cancels the rest.
# Also: a stage whose executable is not built is refused before anything is submitted.
set -euo pipefail
# shellcheck source=tests/integration/slurm/lib.sh
T_OWN_SHARDS=1 source "$(dirname "$0")/lib.sh" "$1" "$2" fail_dep
bad=$FNVLP_WORK/bad-data
mkdir -p "$bad"
/usr/bin/python3 - "$bad" <<'PY'
import json, sys
d = sys.argv[1]
recs = [{"image": f"missing/{i}.jpg", "caption": f"a photo number {i}", "image_id": i} for i in range(20)]
json.dump(recs, open(d + "/captions.json", "w"))
json.dump({"train": list(range(16)), "val": list(range(16, 20))}, open(d + "/splits.json", "w"))
PY
export FNVLP_DATA=$bad FNVLP_STAGES="shard pretrain"
cd "$FNVLP_ROOT"
set +e
bash slurm/pipeline.sh submit --wait >"$FNVLP_WORK/out.txt" 2>&1
rc=$?
set -e
cat "$FNVLP_WORK/out.txt"
[ "$rc" -ne 0 ] || fail "the pipeline exited 0 although sharding failed"
shard=$(awk -F'\t' '$1 == "shard" {print $2}' "$FNVLP_WORK/chain.tsv")
pre=$(awk -F'\t' '$1 == "pretrain" {print $2}' "$FNVLP_WORK/chain.tsv")
grep -q "job $shard (fnvlp-shard): FAILED" "$FNVLP_WORK/out.txt" || fail "output does not name the failed shard job"
grep -q "job $pre (fnvlp-pretrain): PENDING, reason DependencyNeverSatisfied" "$FNVLP_WORK/out.txt" ||
  fail "output does not show the dependent pending with DependencyNeverSatisfied"
grep -qi 'reject' "$FNVLP_WORK/out.txt" || fail "output lacks the shard job's own reason (rejects)"
[ "$(job_field "$pre" JobState)" = CANCELLED ] || fail "dependent job $pre was not cancelled"
[ ! -e "$FNVLP_WORK/run" ] || fail "pretraining ran although its dependency failed"

echo "== a stage whose executable is missing is refused at submission"
set +e
FNVLP_BUILD_DIR=$FNVLP_WORK/no-build PATH=/usr/bin:/bin FNVLP_STAGES="shard pretrain simstat" \
  bash slurm/pipeline.sh submit >"$FNVLP_WORK/out2.txt" 2>&1
rc=$?
set -e
cat "$FNVLP_WORK/out2.txt"
[ "$rc" -ne 0 ] || fail "submission with missing executables exited 0"
grep -q 'fnvlp-shard not built' "$FNVLP_WORK/out2.txt" || fail "no clear 'not built' message"
echo PASS
