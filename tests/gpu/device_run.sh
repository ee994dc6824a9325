#!/usr/bin/env bash
# On a lent GPU machine (tests/gpu/device_pack.sh made DIR here): unpacks the runtime prefix,
# points the programs at that machine's PyTorch and CUDA libraries, and runs the named parts:
#   never_run: GPU.md's list "Never run on a GPU", first in a session that has a device: the
#           unit tests' CUDA cases (the add + LayerNorm kernels among them), norm_kernel (the
#           fused kernels in whole runs), the gpu cases of the methods in the static step and CUDA
#           graphs (graphs_methods, graphs_shared, graphs_nan; graphs_nccl2, equivalence2,
#           nccl_timeout and nccl at 2 ranks say SKIPPED on one GPU); `kokkos` is the rest of that
#           list
#   checks: the gpu ctest cases (golden step, equivalence, shared GPU, bf16, kill + resume, NCCL,
#           profile, out of memory) and the unit tests' CUDA cases (*Cuda*: GPU state against
#           the CPU's)
#   unit_cuda: the unit tests' CUDA cases alone
#   CASE:   one case of tests/gpu/gpu_pretrain.sh by name
#   bench:  tests/bench/gpu_pretrain.sh
#   kokkos: simstat on the GPU (the programs of a build against Kokkos on CUDA): its tests against
#           the host, the named failure without a visible GPU, tests/bench/bench_simstat_device.sh
#           (exactness of a whole job against the host, speed at N = 1M against the GEMM floor and
#           PyTorch); sized for 5 minutes, each step under `timeout`, not yet run on a GPU
# Results go to $OUT (gpu_checks.log, results.jsonl, ...). Usage: device_run.sh DIR PART...
# An unknown part exits 2 before anything runs.
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac  # the header above
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# The cases of gpu_pretrain.sh (tests/gpu/device_run_check.sh: each is in `checks` or `never_run`).
cases="equivalence bf16 kill_resume shared_gpu no_cuda profile graphs graphs_resume graphs_nan sdpa oom graphs_methods graphs_shared graphs_nccl2 equivalence2 nccl_timeout norm_kernel"
[ $# -ge 2 ] || { echo "usage: device_run.sh DIR PART... (never_run checks nccl unit_cuda bench kokkos or a case: $cases)" >&2; exit 2; }
for part in "${@:2}"; do
  case " never_run checks nccl unit_cuda bench kokkos $cases " in
    *" $part "*) ;;
    *) echo "device_run.sh: unknown part '$part' (never_run checks nccl unit_cuda bench kokkos or a case: $cases)" >&2; exit 2 ;;
  esac
done
dir=$(cd "$1" && pwd)
shift
out=${OUT:-/tmp/fnvlp-device-out}
mkdir -p "$out" /tmp/fnvlp-prefix
tar -xJf "$dir/prefix.tar.xz" -C /tmp/fnvlp-prefix
site=$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
# Python keeps the machine's own libraries: the prefix's (bookworm's zlib, OpenSSL, ...) would
# shadow them through LD_LIBRARY_PATH.
printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec %s "$@"\n' "${LD_LIBRARY_PATH:-}" "$(command -v python3)" \
  >/tmp/fnvlp-python3
chmod +x /tmp/fnvlp-python3
export FNVLP_PYTHON=/tmp/fnvlp-python3 PYTHON=/tmp/fnvlp-python3
# shellcheck disable=SC1091
source /tmp/fnvlp-prefix/activate.sh /tmp/fnvlp-prefix
export LD_LIBRARY_PATH=$site/torch/lib:$site/nvidia/nccl/lib:$site/nvidia/cu13/lib:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export OMP_NUM_THREADS=1 HDF5_USE_FILE_LOCKING=FALSE OMPI_ALLOW_RUN_AS_ROOT=1 \
  OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# DEVICE_BIN: another build's programs (an A/B in one call) against the same runtime prefix.
bin=${DEVICE_BIN:-$dir/build}
nvidia-smi -L
"$FNVLP_PYTHON" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
if ldd "$bin/jobs/fnvlp-pretrain" | grep 'not found'; then
  echo "FAIL: unresolved libraries"
  exit 1
fi
ldd "$bin/jobs/fnvlp-pretrain" | grep -E 'libtorch_cuda|libnccl|libcudart'
status=0
check() {  # NAME COMMAND...: runs one check, one summary line per check
  local name=$1 t0 rc
  shift
  t0=$(date +%s)
  "$@" >"$out/$name.log" 2>&1
  rc=$?
  case $rc in 0) r=PASS ;; 77) r=SKIPPED ;; *) r="FAIL($rc)" status=1 ;; esac
  echo "$name: $r in $(($(date +%s) - t0)) s" | tee -a "$out/gpu_checks.log"
  tail -n 4 "$out/$name.log"
}
gpu_case() { check "gpu_$1" bash "$root/tests/gpu/gpu_pretrain.sh" "$1" "$bin" "$dir/vocab.txt" "$root"; }
for part in "$@"; do
  case $part in
  never_run)
    check unit_cuda "$bin/tests/fnvlp_unit_tests" --gtest_filter='*Cuda*'
    for c in norm_kernel graphs_methods graphs_shared graphs_nan graphs_nccl2 equivalence2 nccl_timeout; do
      gpu_case "$c"
    done
    if [ "$(nvidia-smi -L | grep -c '^GPU')" -ge 2 ]; then
      check nccl_np2 mpirun --oversubscribe -np 2 "$bin/tests/mpi/fnvlp_nccl_tests"
    else
      echo "nccl_np2: SKIPPED (one GPU)" | tee -a "$out/gpu_checks.log"
    fi
    ;;
  nccl) check nccl_np1 mpirun --oversubscribe -np 1 "$bin/tests/mpi/fnvlp_nccl_tests" ;;
  unit_cuda) check unit_cuda "$bin/tests/fnvlp_unit_tests" --gtest_filter='*Cuda*' ;;
  checks)
    check golden_step env FNVLP_GOLDEN_DEVICE=cuda FNVLP_GOLDEN_FILE="$bin/tests/golden/tiny_step.h5" \
      "$bin/tests/golden/fnvlp_golden_tests"
    check nccl_np1 mpirun --oversubscribe -np 1 "$bin/tests/mpi/fnvlp_nccl_tests"
    check unit_cuda "$bin/tests/fnvlp_unit_tests" --gtest_filter='*Cuda*'
    for c in equivalence bf16 kill_resume shared_gpu no_cuda profile graphs graphs_resume graphs_nan \
      sdpa oom graphs_methods graphs_shared; do
      gpu_case "$c"
    done
    ;;
  bench) OUT=$out bash "$root/tests/bench/gpu_pretrain.sh" "$bin" "$dir/vocab.txt" "$out" ;;
  kokkos)
    kb=/tmp/fnvlp-kokkos
    mkdir -p "$kb" && tar -xJf "$dir/kokkos.tar.xz" -C "$kb"
    check kokkos_unit bash "$root/tests/env/kokkos_backend.sh" "$kb/fnvlp_unit_tests" \
      --gtest_filter='Simstat.*'
    check kokkos_mpi_np2 bash "$root/tests/env/kokkos_backend.sh" mpirun --oversubscribe -np 2 \
      "$kb/fnvlp_simstat_mpi_tests"
    check kokkos_no_device bash "$root/tests/env/kokkos_no_device.sh" "$kb/fnvlp-simstat"
    check kokkos_bench env WORK=/tmp/fnvlp-kokkos-bench bash "$root/tests/bench/bench_simstat_device.sh" \
      "$kb/fnvlp-simstat" "$kb/bench_simstat" "$FNVLP_PYTHON"
    cat "$out/kokkos_bench.log"
    ;;
  *) gpu_case "$part" ;; # a case of gpu_pretrain.sh (checked above)
  esac
done
exit $status
