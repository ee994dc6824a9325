// gemm_flops: an LD_PRELOAD library that counts the floating-point operations of a process's
// single-precision BLAS calls and forwards every call unchanged to the real BLAS.
//
// libtorch reaches BLAS through sgemm_/sgemv_ (every Linear, matmul and bmm large enough to leave
// its naive loop), fnvlp's fused attention through cblas_sgemm, so together they are the
// matrix work of a training step. A program reads the running totals through
// fnvlp_gemm_flops() and fnvlp_gemm_ns() (wall time inside those calls, all threads added), found
// with dlsym(RTLD_DEFAULT, ...) only when this library is preloaded.
// Counted as 2·m·n·k per GEMM and 2·m·n per GEMV (one multiply and one add per term).
//
//   cmake --build build --target gemm_flops    # build/tests/bench/gemm_flops.so
//   LD_PRELOAD=$PWD/build/tests/bench/gemm_flops.so build/tests/bench/bench_step ...
// ctest bench.gemm_flops (check_gemm_flops.py) checks its counts on products of known size.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static _Atomic unsigned long long total_flops, total_ns;

unsigned long long fnvlp_gemm_flops(void) { return atomic_load(&total_flops); }
unsigned long long fnvlp_gemm_ns(void) { return atomic_load(&total_ns); }

static unsigned long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (unsigned long long)t.tv_sec * 1000000000ULL + (unsigned long long)t.tv_nsec;
}

// The next definition in the global scope; where BLAS came in with a library dlopen'ed locally
// (Python's torch), that scope lacks it, so ask the BLAS libraries themselves.
static void* real_symbol(const char* name) {
  void* f = dlsym(RTLD_NEXT, name);
  const char* libs[] = {"libblas.so.3", "libopenblas.so.0"};
  for (int i = 0; !f && i < 2; ++i) {
    void* lib = dlopen(libs[i], RTLD_LAZY | RTLD_NOLOAD);
    if (lib) f = dlsym(lib, name);
  }
  if (!f) {
    fprintf(stderr, "gemm_flops: no %s after this library (%s)\n", name, dlerror());
    abort();
  }
  return f;
}

static void add(unsigned long long flops, unsigned long long t0) {
  atomic_fetch_add(&total_flops, flops);
  atomic_fetch_add(&total_ns, now_ns() - t0);
}

typedef void (*sgemm_t)(const char*, const char*, const int*, const int*, const int*, const float*,
                        const float*, const int*, const float*, const int*, const float*, float*,
                        const int*);
void sgemm_(const char* ta, const char* tb, const int* m, const int* n, const int* k,
            const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
            const float* beta, float* c, const int* ldc) {
  static sgemm_t real;
  if (!real) real = (sgemm_t)real_symbol("sgemm_");
  const unsigned long long t0 = now_ns();
  real(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  add(2ULL * (unsigned long long)*m * (unsigned long long)*n * (unsigned long long)*k, t0);
}

typedef void (*sgemv_t)(const char*, const int*, const int*, const float*, const float*, const int*,
                        const float*, const int*, const float*, float*, const int*);
void sgemv_(const char* t, const int* m, const int* n, const float* alpha, const float* a,
            const int* lda, const float* x, const int* incx, const float* beta, float* y,
            const int* incy) {
  static sgemv_t real;
  if (!real) real = (sgemv_t)real_symbol("sgemv_");
  const unsigned long long t0 = now_ns();
  real(t, m, n, alpha, a, lda, x, incx, beta, y, incy);
  add(2ULL * (unsigned long long)*m * (unsigned long long)*n, t0);
}

// The CBLAS enums are ints in every cblas.h; declared here so no BLAS header is needed.
typedef void (*cblas_sgemm_t)(int, int, int, int, int, int, float, const float*, int, const float*,
                              int, float, float*, int);
void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float* a,
                 int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  static cblas_sgemm_t real;
  if (!real) real = (cblas_sgemm_t)real_symbol("cblas_sgemm");
  const unsigned long long t0 = now_ns();
  real(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  add(2ULL * (unsigned long long)m * (unsigned long long)n * (unsigned long long)k, t0);
}

typedef void (*cblas_sgemv_t)(int, int, int, int, float, const float*, int, const float*, int,
                              float, float*, int);
void cblas_sgemv(int order, int t, int m, int n, float alpha, const float* a, int lda,
                 const float* x, int incx, float beta, float* y, int incy) {
  static cblas_sgemv_t real;
  if (!real) real = (cblas_sgemv_t)real_symbol("cblas_sgemv");
  const unsigned long long t0 = now_ns();
  real(order, t, m, n, alpha, a, lda, x, incx, beta, y, incy);
  add(2ULL * (unsigned long long)m * (unsigned long long)n, t0);
}
