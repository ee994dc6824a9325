#include "fnvlp/kernels/gemm_few_rows.hpp"

#include <cblas.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "fnvlp/core/blas.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define FNVLP_GEMM_FEW_ROWS_AVX512 1
#endif

namespace fnvlp {

namespace {

constexpr int64_t kMaxRows = 320;

#ifdef FNVLP_GEMM_FEW_ROWS_AVX512
// Rows of A per pass over B: 5 vectors of 16. A tile of 4 B rows then holds 4 x 5 accumulators,
// 5 vectors of A^T and the broadcasts in the 32 vector registers; more rows would spill, and a
// longer B row tile would too.
constexpr int64_t kRowsPerPass = 80;
constexpr int kBRows = 4;

// out[r][i] = sum_k B[r, k] AT[k][i] for the RR rows of B at `b` and the 16 NI columns of AT
// ([K][16 NI], 64-byte aligned): each B element is one broadcast against NI vectors of A^T.
template <int NI, int RR>
__attribute__((target("avx512f"))) inline void tile(const float* AT, int64_t K, const float* b,
                                                    int64_t ldb, float* out) {
  __m512 acc[RR][NI];
#pragma GCC unroll 4
  for (int r = 0; r < RR; ++r)
#pragma GCC unroll 5
    for (int j = 0; j < NI; ++j) acc[r][j] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    __m512 a[NI];
#pragma GCC unroll 5
    for (int j = 0; j < NI; ++j) a[j] = _mm512_load_ps(AT + k * 16 * NI + 16 * j);
#pragma GCC unroll 4
    for (int r = 0; r < RR; ++r) {
      const __m512 w = _mm512_set1_ps(b[r * ldb + k]);
#pragma GCC unroll 5
      for (int j = 0; j < NI; ++j) acc[r][j] = _mm512_fmadd_ps(w, a[j], acc[r][j]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < RR; ++r)
#pragma GCC unroll 5
    for (int j = 0; j < NI; ++j) _mm512_store_ps(out + (r * NI + j) * 16, acc[r][j]);
}

// C[i, v] for the m (<= 16 NI) rows of one pass, every v: B streamed once, row after row.
template <int NI>
__attribute__((target("avx512f"))) void pass(int64_t m, int64_t N, int64_t K, const float* AT,
                                             const float* B, int64_t ldb, float* C, int64_t ldc) {
  alignas(64) float out[kBRows * NI * 16];
  int64_t v = 0;
  for (; v + kBRows <= N; v += kBRows) {
    tile<NI, kBRows>(AT, K, B + v * ldb, ldb, out);
    for (int64_t i = 0; i < m; ++i)
      for (int r = 0; r < kBRows; ++r) C[i * ldc + v + r] = out[r * NI * 16 + i];
  }
  for (; v < N; ++v) {
    tile<NI, 1>(AT, K, B + v * ldb, ldb, out);
    for (int64_t i = 0; i < m; ++i) C[i * ldc + v] = out[i];
  }
}

using Pass = void (*)(int64_t, int64_t, int64_t, const float*, const float*, int64_t, float*,
                      int64_t);
constexpr Pass kPasses[] = {pass<1>, pass<2>, pass<3>, pass<4>, pass<5>};
#endif

}  // namespace

bool detail::gemm_nt_few_rows_avx512(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                                     const float* B, int64_t ldb, float* C, int64_t ldc) {
#ifdef FNVLP_GEMM_FEW_ROWS_AVX512
  static const bool supported = cpu_features().avx512;
  if (!supported) return false;
  if (M == 0) return true;
  // A^T of one pass, zero-padded to whole vectors (the padded columns are computed and dropped).
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(K, 1)) * kRowsPerPass * sizeof(float);
  std::unique_ptr<float, decltype(&std::free)> at(
      static_cast<float*>(std::aligned_alloc(64, bytes)), &std::free);
  FNVLP_CHECK(at, "gemm_nt_few_rows: out of memory for " << bytes << " bytes");
  // Passes of equal width (96 rows: 48 + 48, not 80 + 16: a narrow pass streams B for little).
  const int64_t passes = (M + kRowsPerPass - 1) / kRowsPerPass;
  const int64_t per_pass = std::min(kRowsPerPass, ((M + passes - 1) / passes + 15) / 16 * 16);
  for (int64_t i0 = 0; i0 < M; i0 += per_pass) {
    const int64_t m = std::min(per_pass, M - i0);
    const int64_t ni = (m + 15) / 16, width = 16 * ni;
    float* AT = at.get();
    for (int64_t k = 0; k < K; ++k)
      for (int64_t i = 0; i < width; ++i) AT[k * width + i] = i < m ? A[(i0 + i) * lda + k] : 0.0f;
    float* c = C + i0 * ldc;
    kPasses[ni - 1](m, N, K, AT, B, ldb, c, ldc);
  }
  return true;
#else
  (void)M, (void)N, (void)K, (void)A, (void)lda, (void)B, (void)ldb, (void)C, (void)ldc;
  return false;
#endif
}

void gemm_nt_few_rows(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                      int64_t ldb, float* C, int64_t ldc) {
  // Each pass streams B once: from 4 passes on OpenBLAS's packing pays off (equal at M = 320).
  if (M <= kMaxRows && detail::gemm_nt_few_rows_avx512(M, N, K, A, lda, B, ldb, C, ldc)) return;
  const char* what = "gemm_nt_few_rows";
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blas_int(M, what), blas_int(N, what),
              blas_int(K, what), 1.0f, A, blas_int(lda, what), B, blas_int(ldb, what), 0.0f, C,
              blas_int(ldc, what));
}

}  // namespace fnvlp
