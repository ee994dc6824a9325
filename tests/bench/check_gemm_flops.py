#!/usr/bin/env python3
"""ctest bench.gemm_flops: the BLAS counter of gemm_flops.c counts known products exactly.

bench_methods.sh states FALCON's reward pass in BLAS FLOPs through this library, so its counts
are checked here on products whose FLOPs are known: libtorch's sgemm_ path (mm, a Linear's
forward and backward, bmm; mv through sgemv_) and a direct cblas_sgemm, whose result must be
unchanged.
Usage: check_gemm_flops.py PATH/gemm_flops.so (re-runs itself with the library preloaded).
"""
import ctypes
import os
import sys

lib = os.path.abspath(sys.argv[1])
if os.environ.get("LD_PRELOAD") != lib:
    env = dict(os.environ, LD_PRELOAD=lib, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    os.execve(sys.executable, [sys.executable] + sys.argv, env)

import torch  # noqa: E402 (after the re-exec, so libtorch's BLAS calls go through the library)

torch.manual_seed(0)
me = ctypes.CDLL(None)
flops, ns = me.fnvlp_gemm_flops, me.fnvlp_gemm_ns
flops.restype = ns.restype = ctypes.c_ulonglong
failures = []


def expect(name, fn, want):
    f0, t0 = flops(), ns()
    result = fn()
    got, spent = flops() - f0, ns() - t0
    print(f"{name}: counted {got} FLOPs, expected {want}, {spent} ns inside BLAS")
    if got != want:
        failures.append(f"{name}: {got} != {want}")
    if spent == 0:
        failures.append(f"{name}: no time counted")
    return result


a, b = torch.randn(256, 128), torch.randn(128, 512)
y = expect("mm 256x128 @ 128x512", lambda: a @ b, 2 * 256 * 128 * 512)
if not torch.allclose(y, (a.double() @ b.double()).float(), atol=1e-4):
    failures.append("mm result changed")

lin = torch.nn.Linear(128, 64)
x = torch.randn(32, 128, requires_grad=True)
out = expect("Linear forward", lambda: lin(x), 2 * 32 * 128 * 64)
expect("Linear backward (dX and dW)", lambda: out.sum().backward(), 2 * 2 * 32 * 128 * 64)

expect("bmm 8 x (30x32 @ 32x65)", lambda: torch.bmm(torch.randn(8, 30, 32), torch.randn(8, 32, 65)),
       2 * 8 * 30 * 32 * 65)

expect("mv 64x128 @ 128", lambda: torch.mv(torch.randn(64, 128), torch.randn(128)), 2 * 64 * 128)

# A direct CBLAS call, as fnvlp's fused attention makes (row major, no transposes: enums 101, 111).
m, n, k = 7, 5, 3
A = (ctypes.c_float * (m * k))(*[float(i % 5) for i in range(m * k)])
B = (ctypes.c_float * (k * n))(*[float(i % 3) for i in range(k * n)])
C = (ctypes.c_float * (m * n))()
me.cblas_sgemm.restype = None
expect("cblas_sgemm 7x3 @ 3x5", lambda: me.cblas_sgemm(
    101, 111, 111, m, n, k, ctypes.c_float(1.0), A, k, B, n, ctypes.c_float(0.0), C, n),
    2 * m * n * k)
want = [sum(A[i * k + p] * B[p * n + j] for p in range(k)) for i in range(m) for j in range(n)]
if list(C) != want:
    failures.append("cblas_sgemm result changed")

if failures:
    print("FAILED:", "; ".join(failures))
    sys.exit(1)
print("gemm_flops: all counts exact")
