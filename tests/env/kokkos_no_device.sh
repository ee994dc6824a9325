#!/usr/bin/env bash
# Label kokkos, a build against a Kokkos on CUDA: fnvlp-simstat with no visible GPU (a GPU machine
# hides its GPUs with CUDA_VISIBLE_DEVICES="") fails on every rank, naming the reason, before it
# reads anything (the embeddings file does not exist), instead of Kokkos aborting the process.
set -uo pipefail
simstat=$1
out=$(CUDA_VISIBLE_DEVICES="" "${FNVLP_MPIEXEC:-mpirun}" -np 2 "$simstat" \
  --embeddings /nonexistent/emb.h5 --out "${TMPDIR:-/tmp}/kokkos_no_device.h5" 2>&1)
rc=$?
echo "$out"
[ "$rc" -ne 0 ] || { echo "FAIL: fnvlp-simstat exited 0 without a GPU" >&2; exit 1; }
for r in 0 1; do
  grep -q "failed on rank $r/2: this build's Kokkos runs on Cuda and no device is visible" <<<"$out" ||
    { echo "FAIL: rank $r did not name the missing device" >&2; exit 1; }
done
echo "OK: exit $rc, both ranks name the missing device"
