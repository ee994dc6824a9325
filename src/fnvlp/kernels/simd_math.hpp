#pragma once
// Small branch-free math for the CPU kernels' vectorised loops (model/attention.cpp,
// model/gelu.cpp). Their translation units compile with -fopenmp -fno-trapping-math
// (CMakeLists.txt), which the `omp simd` loops and the vectorised comparisons need.
#include <cstdint>

namespace fnvlp::simd {

// Loops over these functions are compiled for AVX2+FMA and for the baseline, picked at load time:
// they vectorise 8-wide where the CPU allows and stay correct where it does not.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FNVLP_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define FNVLP_SIMD_CLONES
#endif

// exp(x) for x <= 0 (softmax after subtracting the row maximum), branch-free so that loops over
// it vectorise: x = n ln2 + r, |r| <= ln2 / 2, exp(r) by Cephes' degree-6 polynomial (relative
// error ~1e-7), 2^n by writing the exponent bits. Below -87.3 the result is 0, as libtorch's exp
// underflows there too: a padded key's -1e4 score gets exactly zero weight. NaN stays NaN.
inline float exp_nonpositive(float x) {
  const float xc = x < -87.3f ? -87.3f : x;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float t = xc * 1.44269504088896341f + kRound;
  const float n = t - kRound;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const int32_t bits = (__builtin_bit_cast(int32_t, t) - 0x4B400000 + 127) * (1 << 23);  // 2^n
  const float e = y * __builtin_bit_cast(float, bits);
  return x < -87.3f ? 0.0f : e;
}

}  // namespace fnvlp::simd
