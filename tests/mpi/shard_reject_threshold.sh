#!/usr/bin/env bash
# Above --max-reject-fraction, fnvlp-shard must exit non-zero on every rank, name the worst
# reasons, keep rejects.jsonl for diagnosis and leave nothing that --verify accepts.
set -euo pipefail
shard=$1 fixture=$2 vocab=$3
out=$fixture/out-threshold
log=$(mktemp)
set +e
timeout 120 mpirun --oversubscribe -np 2 "$shard" --input "$fixture/captions.json" \
  --image-root "$fixture" --vocab "$vocab" --out "$out" --shard-size 37 --max-reject-fraction 0.01 \
  >"$log" 2>&1
rc=$?
set -e
cat "$log"
fail() { echo "FAIL: $*"; exit 1; }
[ "$rc" -ne 0 ] || fail "exit code 0 above the reject threshold"
[ "$rc" -ne 124 ] || fail "timed out: a rank hung"
grep -q "inputs rejected" "$log" || fail "no summary of the rejects"
grep -q "truncated_image x3" "$log" || fail "worst reason not named with its count"
[ -s "$out/rejects.jsonl" ] || fail "rejects.jsonl missing"
[ ! -e "$out/manifest.json" ] || fail "a manifest was written"
if ls "$out"/shard-*.h5 "$out"/.shard-* >/dev/null 2>&1; then fail "shard files left behind"; fi
if timeout 60 mpirun --oversubscribe -np 1 "$shard" --verify "$out" >/dev/null 2>&1; then
  fail "--verify accepts the output of a failed run"
fi
echo "PASS: failed cleanly (exit $rc), reasons named, no dataset left"
