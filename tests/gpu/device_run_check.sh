#!/usr/bin/env bash
# device_run.sh's promises, checked without a GPU: an unknown part exits 2 before anything runs
# (nothing unpacked, nothing written to $OUT), and every case of gpu_pretrain.sh runs in one of
# its parts (`checks` or `never_run`), so that no GPU case is left out of a device session.
set -euo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run=$src/tests/gpu/device_run.sh
rc=0
OUT=$tmp/out bash "$run" "$tmp" never_run bogus >"$tmp/log" 2>&1 || rc=$?
if [ "$rc" -ne 2 ] || ! grep -q "unknown part 'bogus'" "$tmp/log"; then
  echo "FAIL: an unknown part gave exit $rc: $(cat "$tmp/log")"
  exit 1
fi
[ ! -e "$tmp/out" ] || { echo "FAIL: an unknown part still wrote $tmp/out"; exit 1; }
echo "unknown part: exit 2, nothing run"
# The case labels of gpu_pretrain.sh's dispatch, and the cases each part of device_run.sh runs.
mapfile -t defined < <(sed -nE 's/^([a-z_0-9]+)\)$/\1/p' "$src/tests/gpu/gpu_pretrain.sh")
[ "${#defined[@]}" -ge 10 ] || { echo "FAIL: found ${#defined[@]} cases in gpu_pretrain.sh"; exit 1; }
run_parts=$(sed -n '/^  never_run)$/,/^  bench)/p' "$run")
missing=()
for c in "${defined[@]}"; do
  grep -qE "(^|[ '])$c( |;|$)" <<<"$run_parts" || missing+=("$c")
done
[ "${#missing[@]}" -eq 0 ] || { echo "FAIL: gpu_pretrain.sh cases no part of device_run.sh runs: ${missing[*]}"; exit 1; }
echo "all ${#defined[@]} cases of gpu_pretrain.sh run in never_run or checks"
