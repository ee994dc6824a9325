#pragma once
// The per-value test of the similarity stream (accumulate_tile, kernels.hpp) for one chunk of 64
// values: each value's histogram bin, and a bit mask of the values that must take the scalar path
// (s >= thr or s < lo). With the histogram increment it is the work every similarity costs
// besides the GEMM, so on x86-64 hosts it runs as explicit AVX2 (chosen at run time; the build
// itself targets baseline x86-64, whose SSE2 auto-vectorisation does half the work per instruction
// and gathered the hot positions with a store and a dependent add per value).
#include <cstdint>

#include "fnvlp/similarity/spaces.hpp"

namespace fnvlp::similarity {

inline constexpr int64_t kChunk = 64;

// Histogram bin of a similarity over [-1, 1] (values outside go to the edge bins, NaN to bin 0). A
// monotone function of s alone, so bins do not depend on tiling or rank count. Written as a clamp
// (no branches) so that it vectorises; the SIMD versions compute the same operations in the same
// order (max(x, 0) with NaN giving 0, then min(., bins - 1)), so they give the same bins.
KOKKOS_INLINE_FUNCTION int32_t sim_bin(float s, int32_t bins) {
  const float x = (s + 1.0f) * (0.5f * static_cast<float>(bins));
  const float top = static_cast<float>(bins - 1);
  float y = x > 0.0f ? x : 0.0f;  // NaN compares false: bin 0
  y = y < top ? y : top;
  return static_cast<int32_t>(y);
}

// Portable version for any length <= kChunk (the tail of a tile, device code): bin[t] for
// t < len, and bit t of the result set when x[t] >= thr or x[t] < lo (NaN sets neither).
KOKKOS_INLINE_FUNCTION uint64_t classify_chunk(const float* x, int64_t len, float thr, float lo,
                                               int32_t bins, int32_t* bin) {
  uint64_t mask = 0;
  for (int64_t t = 0; t < len; ++t) {
    const float s = x[t];
    bin[t] = sim_bin(s, bins);
    mask |= static_cast<uint64_t>((s >= thr) | (s < lo)) << t;
  }
  return mask;
}

// Host version for a full chunk of kChunk values: the same results as classify_chunk(x, kChunk,
// ...), through the widest implementation this CPU runs.
uint64_t classify_chunk64_host(const float* x, float thr, float lo, int32_t bins, int32_t* bin);
// Which implementation classify_chunk64_host uses: "avx2" or "portable".
const char* classify_chunk64_impl();

// The chunk test inside a kernel. kHostSimd (fixed at compile time, true only where the kernel runs
// on the host: kOnHost) lets full chunks take classify_chunk64_host; the generic path a device
// takes is the portable loop. The preprocessor guard keeps the host call out of the device pass of
// a build with a device backend, where a host-space kernel is compiled for the device as well.
template <bool kHostSimd>
KOKKOS_INLINE_FUNCTION uint64_t classify_chunk_on(const float* x, int64_t len, float thr, float lo,
                                                  int32_t bins, int32_t* bin) {
  if constexpr (kHostSimd) {
#if !defined(__CUDA_ARCH__) && !defined(__HIP_DEVICE_COMPILE__) && !defined(__SYCL_DEVICE_ONLY__)
    if (len == kChunk) return classify_chunk64_host(x, thr, lo, bins, bin);
#endif
  }
  return classify_chunk(x, len, thr, lo, bins, bin);
}

// Index of the lowest set bit of a non-zero mask.
KOKKOS_INLINE_FUNCTION int lowest_bit(uint64_t m) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __ffsll(static_cast<long long>(m)) - 1;
#else
  return __builtin_ctzll(m);
#endif
}

}  // namespace fnvlp::similarity
