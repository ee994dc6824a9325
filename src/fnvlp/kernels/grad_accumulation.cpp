#include "fnvlp/kernels/grad_accumulation.hpp"

#include <ATen/Parallel.h>

#include <vector>

#include "fnvlp/core/intraop_loops.hpp"
#include "fnvlp/kernels/simd_math.hpp"

namespace fnvlp {

namespace {

// Columns [begin, end) of g's column sums into sum[0, end - begin).
FNVLP_SIMD_CLONES void column_sums(const float* g, int64_t rows, int64_t ld, int64_t begin,
                                   int64_t end, float* sum) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = g + r * ld + begin;
#pragma omp simd
    for (int64_t j = 0; j < end - begin; ++j) sum[j] += row[j];
  }
}

}  // namespace

void add_column_sums(const float* g, int64_t rows, int64_t cols, float* acc) {
  add_column_sums(g, rows, cols, cols, acc);
}

void add_column_sums(const float* g, int64_t rows, int64_t cols, int64_t ld, float* acc) {
  at::parallel_for(0, cols, 4096, [&](int64_t begin, int64_t end) {
    std::vector<float> sum(static_cast<size_t>(end - begin), 0.0f);
    column_sums(g, rows, ld, begin, end, sum.data());
    for (int64_t j = begin; j < end; ++j) acc[j] += sum[j - begin];
  });
}

}  // namespace fnvlp
