#!/usr/bin/env bash
# Guarantee 15: running out of memory in the step says what happened. std::bad_alloc on rank 1 at
# step 3 (`step.oom`, the CPU analogue of CUDA's out-of-memory error, which gpu.oom injects on a
# GPU): every rank exits 1; summary.json is `failed`, names the rank, the phase, the batch size,
# the host memory in use and in total, and a hint; the log says the same.
# shellcheck source=tests/fault/lib.sh
source "$(dirname "$0")/lib.sh"
make_data
expect_failure env FNVLP_FAULT="step.oom:3:1" "${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" \
  --data "$work/shards" "${common[@]}" --out "$work/a"
[ "$rc" -eq 1 ] || { tail -20 "$work/out.txt"; fail "exit $rc, expected 1"; }
expect_output "out of memory on rank 1 \(host\) in phase 'step' at step 3 with train.batch_size 16: host memory .* in use"
/usr/bin/python3 - "$work/a/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
o = s.get("out_of_memory")
assert s["status"] == "failed" and s["exit_code"] == 1 and s["failed_rank"] == 1, s
assert s["phase"] == "step" and s["steps"] == 3, s
assert o and o["device"] == "host" and o["rank"] == 1 and o["step"] == 3, s
assert o["batch_size"] == 16, o
assert 0 < o["memory_in_use_bytes"] <= o["memory_peak_bytes"] <= o["memory_total_bytes"], o
assert "smaller train.batch_size (now 16 per rank" in o["hint"], o
assert "out of memory on rank 1" in s["error"] and "std::bad_alloc" in s["error"], s["error"]
print("  summary.json: %s; %.2f GiB in use of %.2f GiB; %s" % (
    s["error"].split(":")[0], o["memory_in_use_bytes"] / 2**30, o["memory_total_bytes"] / 2**30,
    o["hint"]))
PY
echo "PASS"
