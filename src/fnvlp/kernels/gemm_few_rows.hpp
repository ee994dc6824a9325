#pragma once
// C = A B^T for a few rows of A against a long B: the tied MLM decoder's logits (M ~ 70 masked
// tokens of the tiny preset's batch, N = 30522 word embeddings, K = the text width).
//
// OpenBLAS packs B, the 15.6 MB embedding matrix, into its panel layout on every call and runs
// this shape at 48-62 GFLOP/s on one Zen 4 core (M = 40-74, K = 128); streaming B's rows straight
// into broadcast FMAs against a transposed copy of A (a few KB, in L1) runs it at 57-82 on the
// same core (7.0-7.3 against 8.8-9.0 ms per call at M = 70, 6.1-6.2 against 8.4-8.5 at M = 64,
// caches flushed before each call; equal at M = 320, above which OpenBLAS runs it).
#include <cstdint>

namespace fnvlp {

// C[M, N] = A[M, K] B[N, K]^T, all row-major with leading dimensions lda, ldb, ldc (C written
// whole, beta = 0). AVX-512 kernel where the CPU runs it and M <= 320, cblas_sgemm otherwise.
void gemm_nt_few_rows(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                      int64_t ldb, float* C, int64_t ldc);

namespace detail {
// The AVX-512 kernel alone (tests compare it with cblas_sgemm); false, touching nothing, where
// the CPU or the build lacks AVX-512.
bool gemm_nt_few_rows_avx512(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                             const float* B, int64_t ldb, float* C, int64_t ldc);
}  // namespace detail

}  // namespace fnvlp
