#include "fnvlp/kernels/gemm_few_rows.hpp"

#include <cblas.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "fnvlp/core/blas.hpp"

namespace {

struct Case {
  int64_t M, N, K;
};

// Row-major A [M, lda], B [N, ldb] with padding columns beyond K that must not be read into the
// result (they hold huge values), C compared with cblas_sgemm's C = A B^T.
void check(const Case& c, bool kernel_only) {
  SCOPED_TRACE(testing::Message() << "M=" << c.M << " N=" << c.N << " K=" << c.K);
  const int64_t lda = c.K + 3, ldb = c.K + 5, ldc = c.N + 2;
  std::mt19937 gen(static_cast<unsigned>(c.M * 131 + c.N * 7 + c.K));
  std::normal_distribution<float> normal;
  std::vector<float> A(c.M * lda, 1e30f), B(c.N * ldb, 1e30f);
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t k = 0; k < c.K; ++k) A[i * lda + k] = normal(gen);
  for (int64_t v = 0; v < c.N; ++v)
    for (int64_t k = 0; k < c.K; ++k) B[v * ldb + k] = normal(gen);
  std::vector<float> want(c.M * ldc, -7.0f), got(c.M * ldc, -7.0f);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, c.M, c.N, c.K, 1.0f, A.data(), lda, B.data(),
              ldb, 0.0f, want.data(), ldc);
  if (kernel_only) {
    ASSERT_TRUE(fnvlp::detail::gemm_nt_few_rows_avx512(c.M, c.N, c.K, A.data(), lda, B.data(), ldb,
                                                       got.data(), ldc));
  } else {
    fnvlp::gemm_nt_few_rows(c.M, c.N, c.K, A.data(), lda, B.data(), ldb, got.data(), ldc);
  }
  double worst = 0;
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t v = 0; v < ldc; ++v) {
      const float w = want[i * ldc + v], g = got[i * ldc + v];
      if (v >= c.N) {
        ASSERT_EQ(g, -7.0f) << "wrote C's padding at row " << i << ", column " << v;
        continue;
      }
      // Sums of K products of unit normals: errors relative to sqrt(K).
      worst = std::max(worst, std::abs(static_cast<double>(g) - w) / std::sqrt(double(c.K)));
    }
  EXPECT_LT(worst, 1e-5);
}

// Row counts around the 16-row vectors and the 80-row passes, B row counts around the 4-row
// tiles, K from 1 up to the decoder's width.
const std::vector<Case> kCases = {{1, 1, 1},     {1, 7, 128},     {15, 30, 64}, {16, 33, 128},
                                  {17, 101, 96}, {70, 3001, 128}, {79, 9, 128}, {80, 13, 32},
                                  {81, 18, 128}, {161, 50, 48},   {330, 20, 8}, {5, 0, 16},
                                  {0, 5, 16}};

TEST(GemmFewRows, MatchesCblasThroughTheDispatch) {
  for (const Case& c : kCases) check(c, false);
}

TEST(GemmFewRows, Avx512KernelMatchesCblas) {
  if (!fnvlp::cpu_features().avx512) GTEST_SKIP() << "no AVX-512 on this CPU";
  for (const Case& c : kCases) check(c, true);
}

}  // namespace
