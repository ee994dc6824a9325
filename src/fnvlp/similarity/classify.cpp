#include "fnvlp/similarity/classify.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define FNVLP_CLASSIFY_AVX2 1
#endif

namespace fnvlp::similarity {

namespace {

uint64_t classify_portable(const float* x, float thr, float lo, int32_t bins, int32_t* bin) {
  return classify_chunk(x, kChunk, thr, lo, bins, bin);
}

#ifdef FNVLP_CLASSIFY_AVX2
// Eight values per instruction. The bin is sim_bin's arithmetic in the same order: (s + 1) * c,
// then max(., 0) (the second operand is returned when the first is NaN, so NaN gives 0, as the
// scalar `x > 0 ? x : 0`), then min(., top) (`y < top ? y : top`), then truncation. Comparisons are
// ordered (a NaN is never hot). No FMA can form: the add comes before the multiply.
__attribute__((target("avx2"))) uint64_t classify_avx2(const float* x, float thr, float lo,
                                                       int32_t bins, int32_t* bin) {
  const __m256 scale = _mm256_set1_ps(0.5f * static_cast<float>(bins));
  const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
  const __m256 top = _mm256_set1_ps(static_cast<float>(bins - 1));
  const __m256 vthr = _mm256_set1_ps(thr), vlo = _mm256_set1_ps(lo);
  uint64_t mask = 0;
  for (int q = 0; q < kChunk / 8; ++q) {
    const __m256 s = _mm256_loadu_ps(x + 8 * q);
    __m256 y = _mm256_mul_ps(_mm256_add_ps(s, one), scale);
    y = _mm256_min_ps(_mm256_max_ps(y, zero), top);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(bin + 8 * q), _mm256_cvttps_epi32(y));
    const __m256 hot =
        _mm256_or_ps(_mm256_cmp_ps(s, vthr, _CMP_GE_OQ), _mm256_cmp_ps(s, vlo, _CMP_LT_OQ));
    mask |= static_cast<uint64_t>(static_cast<uint32_t>(_mm256_movemask_ps(hot))) << (8 * q);
  }
  return mask;
}
#endif

using ClassifyFn = uint64_t (*)(const float*, float, float, int32_t, int32_t*);

struct Dispatch {
  ClassifyFn fn = classify_portable;
  const char* name = "portable";
  Dispatch() {
#ifdef FNVLP_CLASSIFY_AVX2
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) {
      fn = classify_avx2;
      name = "avx2";
    }
#endif
  }
};

// Resolved once when the library loads: the hot path calls through it with no guard to test.
const Dispatch kDispatch;

}  // namespace

uint64_t classify_chunk64_host(const float* x, float thr, float lo, int32_t bins, int32_t* bin) {
  return kDispatch.fn(x, thr, lo, bins, bin);
}

const char* classify_chunk64_impl() { return kDispatch.name; }

}  // namespace fnvlp::similarity
