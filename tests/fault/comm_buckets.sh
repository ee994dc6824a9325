#!/usr/bin/env bash
# The gradient all-reduce overlapped with the backward (comm.bucket_mb, train/grad_buckets.hpp):
#  - the losses of 2-rank 60-step runs with comm.bucket_mb auto (over MPI: one all-reduce after
#    the backward) and 1 (buckets during it) are bitwise equal, as are their bytes per step;
#  - a rank that never joins the buckets (FNVLP_FAULT=comm.sleep, before its last bucket): every
#    rank exits within comm.timeout_s (5 s here, the watchdog's 120 s far off), the message naming
#    the gradient all-reduce and the time limit.
# shellcheck source=tests/fault/lib.sh
source "$(dirname "$0")/lib.sh"
make_data
long=(--set train.max_steps=60 --set train.batch_size=8 --set checkpoint.every_steps=0)

echo "== 60 steps, comm.bucket_mb auto (0 over MPI) and 1"
# The default (auto) over MPI is the single all-reduce; buckets are asked for explicitly.
pretrain --out "$work/single" "${long[@]}" >"$work/single.txt" 2>&1 ||
  { tail -20 "$work/single.txt"; fail "the run with one all-reduce"; }
grep -q "gradient all-reduce after the backward (one all-reduce)" "$work/single.txt" ||
  fail "comm.bucket_mb auto over MPI did not take the single all-reduce"
pretrain --out "$work/buckets" "${long[@]}" --set comm.bucket_mb=1 >"$work/buckets.txt" 2>&1 ||
  { tail -20 "$work/buckets.txt"; fail "the run with buckets"; }
grep -Eq "gradient all-reduce in [0-9]+ buckets of ~1 MiB during the backward" "$work/buckets.txt" ||
  fail "comm.bucket_mb=1 did not take buckets"
same_metrics "$work/single" "$work/buckets"
/usr/bin/python3 - "$work/single" "$work/buckets" <<'PY'
import json, sys
rows = [[json.loads(l)["comm_bytes_per_step"] for l in open(r + "/metrics.jsonl")] for r in sys.argv[1:]]
assert rows[0] == rows[1], "bytes per step differ: %s vs %s" % (rows[0][:2], rows[1][:2])
print("  the same bytes per step: %d all-reduced" % rows[0][0]["allreduce"])
PY

echo "== rank 1 sleeps before its last gradient bucket at the 3rd backward (comm.timeout_s 5)"
expect_failure env FNVLP_FAULT="comm.sleep:3:1:600" "${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" \
  --data "$work/shards" "${common[@]}" --out "$work/stall" --set comm.timeout_s=5 \
  --set comm.bucket_mb=25
expect_output "the gradient all-reduce \([0-9]+ buckets, comm.bucket_mb\): [0-9]+ sums not complete after 5 s \(comm.timeout_s\)"
/usr/bin/python3 -c "import sys; t=float(sys.argv[1]); assert t < 60, t" "$elapsed" ||
  fail "the job took ${elapsed}s to end"
echo "PASS"
