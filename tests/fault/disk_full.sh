#!/usr/bin/env bash
# Guarantee 2: a full disk during a checkpoint ends the job non-zero with a message naming the
# file and the cause, `latest` still points to the previous intact checkpoint and no unfinished
# save is left; room for two checkpoints is checked before the first step.
#  a. injected write failure (FNVLP_FAULT=checkpoint.write) on one rank (runs everywhere);
#  b. a real full file system: a tmpfs sized for about 2.5 checkpoints;
#  c. a tmpfs too small for two checkpoints: refused at start, before any step.
# Usage: disk_full.sh BUILD VOCAB SOURCE [tmpfs]. Without `tmpfs`: a; with it: b and c, which need
# root and mount: where no tmpfs can be mounted they say SKIPPED and exit 77 (ctest: skipped).
# shellcheck source=tests/fault/lib.sh
source "$(dirname "$0")/lib.sh"
part=${4:-injected}
mnt=$work/mnt
mkdir -p "$mnt"
if [ "$part" = tmpfs ] && ! mount -t tmpfs -o size=1m tmpfs "$mnt" 2>/dev/null; then
  echo "SKIPPED: cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN); the injected write failure of fault.disk_full still runs"
  exit 77
fi
[ "$part" != tmpfs ] || umount "$mnt"
make_data

echo "== a. injected ENOSPC on rank 1 while writing the checkpoint of step 8"
expect_failure env FNVLP_FAULT="checkpoint.write:8:1" \
  "${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" --data "$work/shards" "${common[@]}" \
  --out "$work/a" --set checkpoint.every_steps=4
expect_output "checkpoint of step 8 in .* failed; 'latest' still points to step-0000004"
expect_output "cannot write '.*step-0000008.tmp/rank-1.sampler': No space left on device"
[ "$rc" -eq 1 ] || fail "exit code $rc, expected 1 (a clean collective failure)"
[ "$(check_latest "$work/a/checkpoints")" = step-0000004 ] || fail "latest moved"
[ ! -e "$work/a/checkpoints/step-0000008.tmp" ] || fail "the failed save was left behind"
/usr/bin/python3 - "$work/a/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["status"] == "failed" and s["exit_code"] == 1 and "No space left on device" in s["error"], s
print("  summary.json: failed, exit 1, %d steps, %r" % (s["steps"], s["error"][:80]))
PY
if [ "$part" != tmpfs ]; then
  echo PASS
  exit 0
fi
trap 'umount "$mnt" 2>/dev/null || true; rm -rf "$work"' EXIT
# Checkpoint size of this model: model + AdamW moments, measured from the committed one above.
ckpt=$(du -sb "$work/a/checkpoints/step-0000004" | cut -f1)
echo "  one checkpoint: $ckpt bytes"

echo "== b. real ENOSPC: tmpfs of 2.5 checkpoints, keep_last 2, a checkpoint every 2 steps"
mount -t tmpfs -o size=$((ckpt * 5 / 2)) tmpfs "$mnt"
expect_failure pretrain --out "$mnt/b" --set checkpoint.every_steps=2 --set checkpoint.keep_last=2
# Either the save's own free-space check (room for one more, from the last checkpoint's real
# size) refuses it, or a write hits ENOSPC and the save is rolled back.
expect_output "not enough free disk space for the checkpoint of step [0-9]+|checkpoint of step [0-9]+ in .* failed; 'latest' still points to step-0000004"
[ "$(check_latest "$mnt/b/checkpoints")" = step-0000004 ] || fail "latest moved"
[ -z "$(find "$mnt/b/checkpoints" -maxdepth 1 -name '*.tmp')" ] || fail "an unfinished save was left behind"
grep -E "failed|No space|free disk" "$work/out.txt" | head -3
umount "$mnt"

echo "== c. tmpfs of 1.5 checkpoints: refused before the first step"
mount -t tmpfs -o size=$((ckpt * 3 / 2)) tmpfs "$mnt"
expect_failure pretrain --out "$mnt/c"
expect_output "not enough free disk space for checkpoints in .*need 2 x"
[ ! -s "$mnt/c/metrics.jsonl" ] || fail "steps ran before the free-space check failed"
umount "$mnt"
echo "PASS"
