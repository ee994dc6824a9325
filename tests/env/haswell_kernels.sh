#!/usr/bin/env bash
# Runs a command on OpenBLAS's Haswell SGEMM kernels where the CPU runs them (AVX2 and FMA). Their
# per-element summation order depends on the element's place in the product, so simstat's tests
# of same bits for any decomposition (which rest on each pair's fixed place in the GEMM,
# simstat.hpp) bite on every such machine, not only on CPUs whose own kernels are these (Haswell
# to AMD Zen 3). Without AVX2 and FMA the command runs on the library's own choice, and says so.
set -euo pipefail
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  export OPENBLAS_CORETYPE=Haswell
else
  echo "haswell_kernels.sh: no AVX2 and FMA here: running on the library's own kernels" >&2
fi
exec "$@"
