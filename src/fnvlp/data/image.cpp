// Decoding (libjpeg-turbo's TurboJPEG API, libpng's simplified API) and the resize/centre-crop of
// the ingest path. The encoders live in image_encode.cpp.
#include "fnvlp/data/image.hpp"

#include <fcntl.h>
#include <png.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

// x86-64 always has SSE2; AVX2 is used when the CPU has it (checked at run time).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FNVLP_IMAGE_X86 1
#include <immintrin.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "fnvlp/core/error.hpp"

// The resize weights are computed in double exactly as Pillow does; -ffast-math would let the
// compiler reorder that arithmetic and break the bit-for-bit reproducibility promised below.
#if defined(__FAST_MATH__)
#error "fnvlp/data/image.cpp must not be compiled with -ffast-math"
#endif
#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD != 0
#error "fnvlp/data/image.cpp needs double arithmetic without excess precision (x87)"
#endif

namespace fnvlp::data {

namespace {

constexpr int kMaxSide = 65535;
constexpr int64_t kMaxPixels = int64_t{1} << 28;

[[noreturn]] void fail(const char* reason, const std::string& name, const std::string& what) {
  throw ImageError(reason, name + ": " + what);
}

void check_dimensions(int64_t w, int64_t h, const std::string& name, const char* format) {
  if (w <= 0 || h <= 0) {
    fail(image_reason::kEmpty, name,
         std::string(format) + " has no pixels (" + std::to_string(w) + "x" + std::to_string(h) +
             ")");
  }
  // A valid but huge image is refused rather than called corrupt: the bytes may be fine.
  if (w > kMaxSide || h > kMaxSide || w * h > kMaxPixels) {
    fail(image_reason::kUnsupported, name,
         std::string(format) + " too large (" + std::to_string(w) + "x" + std::to_string(h) +
             "; limits " + std::to_string(kMaxSide) + " per side, 2^28 pixels)");
  }
}

// ---------------------------------------------------------------------------------------------
// JPEG

// One decompressor per thread: tjInitDecompress allocates libjpeg's state, which costs about as
// much as decoding a small thumbnail. After a failure the handle is replaced: a failed
// tjDecompressHeader3 (2.1.5) leaves libjpeg mid-header, and the next image would then fail too.
class TjDecompressor {
 public:
  TjDecompressor() { init(); }
  ~TjDecompressor() { tjDestroy(handle_); }
  TjDecompressor(const TjDecompressor&) = delete;
  TjDecompressor& operator=(const TjDecompressor&) = delete;

  tjhandle get() const { return handle_; }
  // The handle's error message, then a fresh handle.
  std::string take_error_and_reset() {
    std::string msg = tjGetErrorStr2(handle_);
    tjDestroy(handle_);
    init();
    return msg;
  }

 private:
  void init() {
    handle_ = tjInitDecompress();
    FNVLP_CHECK(handle_ != nullptr, "tjInitDecompress failed: " << tjGetErrorStr2(nullptr));
  }
  tjhandle handle_ = nullptr;
};

TjDecompressor& thread_decompressor() {
  thread_local TjDecompressor d;
  return d;
}

bool ends_with(const uint8_t* data, size_t size, const uint8_t* tail, size_t n) {
  return size >= n && std::memcmp(data + size - n, tail, n) == 0;
}

// libjpeg's source manager reports running out of data as the warning "Premature end of JPEG
// file" (and then fakes an EOI); a stream without its EOI marker at the end was cut short too.
// Files with bytes after EOI decode fine, so this only labels streams that already failed.
const char* jpeg_failure_reason(const uint8_t* data, size_t size, const std::string& msg) {
  static const uint8_t kEoi[2] = {0xFF, 0xD9};
  if (msg.find("Premature end of JPEG file") != std::string::npos) return image_reason::kTruncated;
  if (!ends_with(data, size, kEoi, 2)) return image_reason::kTruncated;
  return image_reason::kCorrupt;
}

// Pillow's MULDIV255: round(a * b / 255) for a, b in [0, 255].
inline int muldiv255(int a, int b) {
  const int t = a * b + 128;
  return ((t >> 8) + t) >> 8;
}

// What a stored JPEG must be (decode_stored_jpeg); null for any input JPEG.
struct StoredJpeg {
  int width, height;
};

const char* colorspace_name(int cs) {
  switch (cs) {
    case TJCS_RGB:
      return "RGB";
    case TJCS_YCbCr:
      return "YCbCr";
    case TJCS_GRAY:
      return "greyscale";
    case TJCS_CMYK:
      return "CMYK";
    case TJCS_YCCK:
      return "YCCK";
    default:
      return "unknown";
  }
}

Image decode_jpeg(const uint8_t* data, size_t size, const std::string& name, int min_side,
                  const StoredJpeg* stored = nullptr) {
  TjDecompressor& dec = thread_decompressor();
  tjhandle tj = dec.get();
  int width = 0, height = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(tj, data, static_cast<unsigned long>(size), &width, &height, &subsamp,
                          &colorspace) != 0) {
    const std::string msg = dec.take_error_and_reset();
    fail(jpeg_failure_reason(data, size, msg), name, "JPEG header: " + msg);
  }
  // TurboJPEG accepts a tables-only stream (and a header cut before its frame, which reads as
  // one) with 0x0 pixels.
  if (width == 0 || height == 0) {
    fail(jpeg_failure_reason(data, size, ""), name, "JPEG stream has no frame header (SOF)");
  }
  check_dimensions(width, height, name, "JPEG");
  if (stored != nullptr) {
    // fnvlp-shard writes 8-bit YCbCr (or greyscale) of the size it records: anything else in a
    // shard was not written by it, and is refused before libjpeg decodes a byte of it.
    if (width != stored->width || height != stored->height)
      fail(image_reason::kCorrupt, name,
           "JPEG header says " + std::to_string(width) + "x" + std::to_string(height) +
               ", the shard records " + std::to_string(stored->width) + "x" +
               std::to_string(stored->height));
    if (colorspace != TJCS_YCbCr && colorspace != TJCS_GRAY)
      fail(image_reason::kUnsupported, name,
           std::string("JPEG colour space ") + colorspace_name(colorspace) +
               "; a shard stores YCbCr or greyscale");
  }

  // Decode at the smallest DCT scale whose shorter side still reaches min_side: the IDCT then
  // produces fewer pixels directly (1.3x faster at 3/8 for a 500x375 photo, 1.8x at 1/4 and 2.2x
  // at 1/8 for a 2048x1536 one). Only scales <= 1/2: with libjpeg-turbo 2.1.5, 5/8, 3/4 and 7/8
  // were measured slower than the full-size decode (their IDCT and upsampling have no SIMD code).
  int out_w = width, out_h = height;
  if (min_side > 0) {
    int n = 0;
    const tjscalingfactor* factors = tjGetScalingFactors(&n);
    FNVLP_CHECK(factors != nullptr && n > 0, "tjGetScalingFactors failed");
    for (int i = 0; i < n; ++i) {
      const tjscalingfactor f = factors[i];
      if (2 * f.num > f.denom) continue;
      const int sw = TJSCALED(width, f), sh = TJSCALED(height, f);
      if (std::min(sw, sh) >= min_side && int64_t{sw} * sh < int64_t{out_w} * out_h) {
        out_w = sw;
        out_h = sh;
      }
    }
  }

  // libjpeg cannot convert CMYK/YCCK to RGB, so those come out as CMYK and are converted below.
  const bool cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  const int pixel_format = cmyk ? TJPF_CMYK : TJPF_RGB;
  // STOPONWARNING turns libjpeg's warnings (premature end of file, corrupt entropy data), after
  // which it would hand back a partly grey image, into failures. LIMITSCANS bounds the work a
  // hostile progressive JPEG can demand.
  const int flags = TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS;

  Image img;
  img.width = out_w;
  img.height = out_h;
  std::vector<uint8_t> cmyk_buf;
  const size_t npix = static_cast<size_t>(out_w) * out_h;
  unsigned char* dst;
  if (cmyk) {
    cmyk_buf.resize(npix * 4);
    dst = cmyk_buf.data();
  } else {
    img.rgb.resize(npix * 3);
    dst = img.rgb.data();
  }
  if (tjDecompress2(tj, data, static_cast<unsigned long>(size), dst, out_w, 0, out_h, pixel_format,
                    flags) != 0) {
    const std::string msg = dec.take_error_and_reset();
    fail(jpeg_failure_reason(data, size, msg), name, "JPEG decode: " + msg);
  }

  if (cmyk) {
    // CMYK JPEGs come (almost) only from Photoshop, which stores the channels inverted
    // (0 = full ink) with an Adobe APP14 marker; like Pillow ("CMYK;I" then its cmyk2rgb) we
    // always assume that convention: ink c = 255 - stored, R = (255 - k) - (255 - k) * c / 255.
    img.rgb.resize(npix * 3);
    const uint8_t* s = cmyk_buf.data();
    uint8_t* o = img.rgb.data();
    for (size_t i = 0; i < npix; ++i, s += 4, o += 3) {
      const int nk = s[3];  // 255 - ink k
      for (int c = 0; c < 3; ++c) o[c] = static_cast<uint8_t>(nk - muldiv255(255 - s[c], nk));
    }
  }
  return img;
}

// ---------------------------------------------------------------------------------------------
// PNG

// libpng's memory reader fails with "read beyond end of data" when the stream is cut; a stream
// that does not end with the IEND chunk was cut as well.
const char* png_failure_reason(const uint8_t* data, size_t size, const std::string& msg) {
  static const uint8_t kIend[12] = {0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xAE, 0x42, 0x60, 0x82};
  if (msg.find("beyond end") != std::string::npos) return image_reason::kTruncated;
  if (!ends_with(data, size, kIend, sizeof(kIend))) return image_reason::kTruncated;
  return image_reason::kCorrupt;
}

// Whether the chunk list reaches IEND inside the data. libpng's simplified reader stops after
// the last image row, so a file cut between the pixel data and IEND would otherwise pass.
bool png_reaches_iend(const uint8_t* data, size_t size) {
  size_t pos = 8;  // after the signature
  while (pos + 12 <= size) {
    const uint32_t len = uint32_t{data[pos]} << 24 | uint32_t{data[pos + 1]} << 16 |
                         uint32_t{data[pos + 2]} << 8 | uint32_t{data[pos + 3]};
    if (std::memcmp(data + pos + 4, "IEND", 4) == 0) return true;
    if (len > size - pos - 12) return false;
    pos += 12 + static_cast<size_t>(len);
  }
  return false;
}

Image decode_png(const uint8_t* data, size_t size, const std::string& name) {
  png_image png;
  std::memset(&png, 0, sizeof(png));
  png.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&png, data, size)) {
    const std::string msg = png.message;  // begin_read frees the png_image on failure
    fail(png_failure_reason(data, size, msg), name, "PNG header: " + msg);
  }
  try {
    check_dimensions(png.width, png.height, name, "PNG");
  } catch (...) {
    png_image_free(&png);
    throw;
  }
  png.format = PNG_FORMAT_RGB;  // 8-bit sRGB, 3 channels, whatever the file holds
  Image img;
  img.width = static_cast<int>(png.width);
  img.height = static_cast<int>(png.height);
  img.rgb.resize(static_cast<size_t>(img.width) * img.height * 3);
  // libpng expands gray, palette and 16-bit samples, converts to sRGB when gAMA/cHRM/iCCP say
  // otherwise, and composites alpha (and tRNS) over this background. White, not black: images
  // with transparency are mostly logos and cut-out objects drawn for a white page, and a dark
  // glyph over black would vanish. (Pillow's convert("RGB") drops alpha instead.) libpng's own
  // warnings (e.g. a known-incorrect sRGB profile) are ignored, like Pillow does.
  const png_color background = {255, 255, 255};
  if (!png_image_finish_read(&png, &background, img.rgb.data(),
                             static_cast<png_int_32>(img.width) * 3, nullptr)) {
    const std::string msg = png.message;  // finish_read frees the png_image in any case
    fail(png_failure_reason(data, size, msg), name, "PNG decode: " + msg);
  }
  if (!png_reaches_iend(data, size)) {
    fail(image_reason::kTruncated, name, "PNG data ends before its IEND chunk");
  }
  return img;
}

// ---------------------------------------------------------------------------------------------
// Resize

// 8.22 fixed point as Pillow's 8-bit resampler (PRECISION_BITS = 32 - 8 - 2).
constexpr int kPrecisionBits = 22;
constexpr int32_t kHalf = 1 << (kPrecisionBits - 1);
// The SIMD kernels multiply 16-bit pairs (pmaddwd), so each 22-bit weight is split into
// w = hi * 2^11 + lo with hi, lo <= 2^11; the two partial sums recombine to the exact result.
constexpr int kLoBits = 11;

// A product rounded on its own. The volatile store keeps the compiler from fusing it with a
// following add into an FMA (GCC contracts across statements on FMA targets), whose different
// rounding could move a weight by one unit and a pixel by one level between builds.
inline double rounded_mul(double a, double b) {
  volatile double p = a * b;
  return p;
}

// The taps of one output coordinate: `count` consecutive source lines from its first one.
struct TapView {
  int count;
  const int32_t* w;       // count weights, 8.22 fixed point
  const uint32_t* pairs;  // per pair of taps: 4 x (hi0 | hi1 << 16), then 4 x (lo0 | lo1 << 16)
};

// Filter taps for output coordinates [out_first, out_first + n) of a 1-D resize.
struct Taps {
  int ksize = 0;                // weights stored per output coordinate (zero padded)
  int npairs = 0;               // ceil(ksize / 2)
  std::vector<int> first;       // first source index per output coordinate
  std::vector<int> count;       // number of source indices per output coordinate
  std::vector<int32_t> w;       // n * ksize
  std::vector<uint32_t> pairs;  // n * npairs * 8, see TapView; replicated x4 so that the SSE2
                                // kernel loads a broadcast weight instead of shuffling one
  int lo = 0, hi = 0;           // union of the source ranges: [lo, hi)

  TapView view(int i) const {
    return {count[i], &w[static_cast<size_t>(i) * ksize],
            &pairs[static_cast<size_t>(i) * npairs * 8]};
  }
};

// Pillow's precompute_coeffs + normalize_coeffs_8bpc for the BILINEAR (triangle) filter, for
// output coordinates [out_first, out_first + n) of a resize in_size -> out_size: pixel centres
// at +0.5, the support widened by the scale when downsampling (antialiasing), weights
// normalised to sum 1 then rounded to 8.22. Same expressions in the same order as Pillow 9/10,
// so the weights match it bit for bit.
Taps bilinear_taps(int in_size, int out_size, int out_first, int n) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = 1.0 * filterscale;  // triangle support 1, widened
  const double ss = 1.0 / filterscale;
  Taps t;
  t.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  t.npairs = (t.ksize + 1) / 2;
  t.first.resize(n);
  t.count.resize(n);
  t.w.assign(static_cast<size_t>(n) * t.ksize, 0);
  t.pairs.assign(static_cast<size_t>(n) * t.npairs * 8, 0);
  t.lo = in_size;
  t.hi = 0;
  std::vector<double> k(t.ksize);
  for (int i = 0; i < n; ++i) {
    const int xx = out_first + i;
    const double center = rounded_mul(xx + 0.5, scale);
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    FNVLP_CHECK(xmax >= 1 && xmax <= t.ksize, "resize taps out of range: " << xmax);
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      double d = rounded_mul(x + xmin - center + 0.5, ss);
      if (d < 0.0) d = -d;
      const double w = d < 1.0 ? 1.0 - d : 0.0;
      k[x] = w;
      ww += w;
    }
    int32_t* wi = &t.w[static_cast<size_t>(i) * t.ksize];
    for (int x = 0; x < xmax; ++x) {
      if (ww != 0.0) k[x] /= ww;
      // Weights are never negative for the triangle filter; Pillow rounds half away from zero.
      // (A fused multiply-add here is harmless: the product by 2^22 is exact.)
      wi[x] = static_cast<int32_t>(0.5 + k[x] * (1 << kPrecisionBits));
      FNVLP_CHECK(wi[x] >= 0 && wi[x] <= (1 << kPrecisionBits), "resize weight " << wi[x]);
    }
    uint32_t* pi = &t.pairs[static_cast<size_t>(i) * t.npairs * 8];
    for (int p = 0; p < t.npairs; ++p, pi += 8) {
      const uint32_t w0 = static_cast<uint32_t>(wi[2 * p]);
      const uint32_t w1 = 2 * p + 1 < t.ksize ? static_cast<uint32_t>(wi[2 * p + 1]) : 0;
      const uint32_t mask = (1u << kLoBits) - 1;
      std::fill(pi, pi + 4, (w0 >> kLoBits) | (w1 >> kLoBits) << 16);
      std::fill(pi + 4, pi + 8, (w0 & mask) | (w1 & mask) << 16);
    }
    t.first[i] = xmin;
    t.count[i] = xmax;
    t.lo = std::min(t.lo, xmin);
    t.hi = std::max(t.hi, xmin + xmax);
  }
  return t;
}

inline uint8_t clip8(int32_t acc) {
  const int32_t v = acc >> kPrecisionBits;  // arithmetic shift, as Pillow's lookup table
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// out[i] = clip8(2^21 + sum_j src[j * stride + i] * w[j]) for i < len, j < count: one output
// line from `count` consecutive input lines. Both passes of the resize reduce to this (the
// horizontal one on transposed blocks), so it is the only loop that needs SIMD. Sums are exact
// integers: the result does not depend on the order, the vector width or the instruction set.
//
// The vector kernels interleave the bytes of lines j and j+1 into 16-bit pairs so that one
// pmaddwd gives a_i * w_j + b_i * w_j+1; an odd last tap pairs with itself under a zero weight.
// Each returns the index up to which it wrote out.

#if defined(FNVLP_IMAGE_X86)
// (hi << 11) + lo + 2^21, shifted down by 22: the exact 8.22 sum, before clamping.
inline __m128i finish_sse2(__m128i h, __m128i l, __m128i half) {
  return _mm_srai_epi32(_mm_add_epi32(_mm_add_epi32(_mm_slli_epi32(h, kLoBits), l), half),
                        kPrecisionBits);
}

__attribute__((target("avx2"))) inline __m256i finish_avx2(__m256i h, __m256i l, __m256i half) {
  return _mm256_srai_epi32(
      _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(h, kLoBits), l), half), kPrecisionBits);
}

size_t combine_sse2(const uint8_t* src, size_t stride, const TapView& t, size_t len, size_t i,
                    uint8_t* out) {
  const __m128i zero = _mm_setzero_si128();
  const __m128i half = _mm_set1_epi32(kHalf);
  for (; i + 16 <= len; i += 16) {
    __m128i h0 = zero, h1 = zero, h2 = zero, h3 = zero;
    __m128i l0 = zero, l1 = zero, l2 = zero, l3 = zero;
    const uint32_t* wp = t.pairs;
    for (int j = 0; j < t.count; j += 2, wp += 8) {
      const uint8_t* a = src + static_cast<size_t>(j) * stride + i;
      const uint8_t* b = j + 1 < t.count ? a + stride : a;
      const __m128i va = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a));
      const __m128i vb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
      const __m128i ab_lo = _mm_unpacklo_epi8(va, vb), ab_hi = _mm_unpackhi_epi8(va, vb);
      const __m128i p0 = _mm_unpacklo_epi8(ab_lo, zero), p1 = _mm_unpackhi_epi8(ab_lo, zero);
      const __m128i p2 = _mm_unpacklo_epi8(ab_hi, zero), p3 = _mm_unpackhi_epi8(ab_hi, zero);
      const __m128i wh = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wp));
      const __m128i wl = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wp + 4));
      h0 = _mm_add_epi32(h0, _mm_madd_epi16(p0, wh));
      h1 = _mm_add_epi32(h1, _mm_madd_epi16(p1, wh));
      h2 = _mm_add_epi32(h2, _mm_madd_epi16(p2, wh));
      h3 = _mm_add_epi32(h3, _mm_madd_epi16(p3, wh));
      l0 = _mm_add_epi32(l0, _mm_madd_epi16(p0, wl));
      l1 = _mm_add_epi32(l1, _mm_madd_epi16(p1, wl));
      l2 = _mm_add_epi32(l2, _mm_madd_epi16(p2, wl));
      l3 = _mm_add_epi32(l3, _mm_madd_epi16(p3, wl));
    }
    // Signed saturation to 16 bits, then unsigned saturation to 8 bits: clip8.
    const __m128i r01 = _mm_packs_epi32(finish_sse2(h0, l0, half), finish_sse2(h1, l1, half));
    const __m128i r23 = _mm_packs_epi32(finish_sse2(h2, l2, half), finish_sse2(h3, l3, half));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm_packus_epi16(r01, r23));
  }
  return i;
}

// The same with 32-byte vectors. AVX2's unpack and pack instructions work within 128-bit
// halves, so the element order survives the round trip exactly as in the SSE2 kernel.
__attribute__((target("avx2"))) size_t combine_avx2(const uint8_t* src, size_t stride,
                                                    const TapView& t, size_t len, size_t i,
                                                    uint8_t* out) {
  const __m256i zero = _mm256_setzero_si256();
  const __m256i half = _mm256_set1_epi32(kHalf);
  for (; i + 32 <= len; i += 32) {
    __m256i h0 = zero, h1 = zero, h2 = zero, h3 = zero;
    __m256i l0 = zero, l1 = zero, l2 = zero, l3 = zero;
    const uint32_t* wp = t.pairs;
    for (int j = 0; j < t.count; j += 2, wp += 8) {
      const uint8_t* a = src + static_cast<size_t>(j) * stride + i;
      const uint8_t* b = j + 1 < t.count ? a + stride : a;
      const __m256i va = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a));
      const __m256i vb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
      const __m256i ab_lo = _mm256_unpacklo_epi8(va, vb), ab_hi = _mm256_unpackhi_epi8(va, vb);
      const __m256i p0 = _mm256_unpacklo_epi8(ab_lo, zero);
      const __m256i p1 = _mm256_unpackhi_epi8(ab_lo, zero);
      const __m256i p2 = _mm256_unpacklo_epi8(ab_hi, zero);
      const __m256i p3 = _mm256_unpackhi_epi8(ab_hi, zero);
      const __m256i wh = _mm256_set1_epi32(static_cast<int>(wp[0]));
      const __m256i wl = _mm256_set1_epi32(static_cast<int>(wp[4]));
      h0 = _mm256_add_epi32(h0, _mm256_madd_epi16(p0, wh));
      h1 = _mm256_add_epi32(h1, _mm256_madd_epi16(p1, wh));
      h2 = _mm256_add_epi32(h2, _mm256_madd_epi16(p2, wh));
      h3 = _mm256_add_epi32(h3, _mm256_madd_epi16(p3, wh));
      l0 = _mm256_add_epi32(l0, _mm256_madd_epi16(p0, wl));
      l1 = _mm256_add_epi32(l1, _mm256_madd_epi16(p1, wl));
      l2 = _mm256_add_epi32(l2, _mm256_madd_epi16(p2, wl));
      l3 = _mm256_add_epi32(l3, _mm256_madd_epi16(p3, wl));
    }
    const __m256i r01 = _mm256_packs_epi32(finish_avx2(h0, l0, half), finish_avx2(h1, l1, half));
    const __m256i r23 = _mm256_packs_epi32(finish_avx2(h2, l2, half), finish_avx2(h3, l3, half));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_packus_epi16(r01, r23));
  }
  return i;
}

bool cpu_has_avx2() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return has;
}
#endif  // FNVLP_IMAGE_X86

void combine_lines(const uint8_t* src, size_t stride, const TapView& t, size_t len, uint8_t* out) {
  size_t i = 0;
#if defined(FNVLP_IMAGE_X86)
  if (cpu_has_avx2()) i = combine_avx2(src, stride, t, len, i, out);
  i = combine_sse2(src, stride, t, len, i, out);
#endif
  for (; i < len; ++i) {
    int32_t acc = kHalf;
    for (int j = 0; j < t.count; ++j) acc += src[static_cast<size_t>(j) * stride + i] * t.w[j];
    out[i] = clip8(acc);
  }
}

// The horizontal pass, as vertical passes over transposed blocks of kBlockRows source rows:
// a column of the block becomes one 96-byte line (32 pixels = three AVX2 or six SSE2 vectors),
// so combine_lines works on whole vectors; then the block's output columns are transposed back
// into rows of `tmp`. 32 rows measured faster than 16 or 64 for 500x375 -> 128 and
// 640x480 -> 256 (the block's columns stay in L1/L2).
constexpr int kBlockRows = 32;
constexpr size_t kLine = kBlockRows * 3;

// Pixels move as 4-byte words whose 4th byte the next pixel overwrites (or lands in padding).
// Row by row, so the loads stream along the source row; a lane's spill byte belongs to the next
// lane, written later, except for the block's last lane, whose spill would hit the next line.
void transpose_in(const uint8_t* base, size_t in_stride, int ncols, int nb, uint8_t* cols) {
  for (int r = 0; r < nb; ++r) {
    const uint8_t* s = base + r * in_stride;
    uint8_t* d = cols + 3 * r;
    int c = 0;
    if (r + 1 < kBlockRows) {
      for (; c + 1 < ncols; ++c) {  // the last column's 4-byte load could leave the image
        uint32_t v;
        std::memcpy(&v, s + 3 * c, 4);
        std::memcpy(d + kLine * c, &v, 4);
      }
    }
    for (; c < ncols; ++c) std::memcpy(d + kLine * c, s + 3 * c, 3);
  }
}

// Back to rows. The last lane's 4-byte load takes the next line's first byte (or padding); each
// store's spill byte is the next pixel's, or the next row's (written later), or padding. NB is a
// template constant so that full blocks get a fixed trip count.
template <int NB>
void transpose_out(const uint8_t* outs, int size, int nb, size_t row_bytes, uint8_t* dst) {
  const int n = NB > 0 ? NB : nb;
  for (int r = 0; r < n; ++r) {
    const uint8_t* s = outs + 3 * r;
    uint8_t* d = dst + static_cast<size_t>(r) * row_bytes;
    for (int xx = 0; xx < size; ++xx) {
      uint32_t v;
      std::memcpy(&v, s + static_cast<size_t>(xx) * kLine, 4);
      std::memcpy(d + 3 * xx, &v, 4);
    }
  }
}

// `tmp` needs one byte of padding after rows * size * 3.
void horizontal_pass(const Image& in, int row_lo, int rows, const Taps& tx, int size,
                     uint8_t* tmp) {
  const int ncols = tx.hi - tx.lo;
  const size_t in_stride = static_cast<size_t>(in.width) * 3;
  const size_t row_bytes = static_cast<size_t>(size) * 3;
  thread_local std::vector<uint8_t> cols, outs;
  cols.resize(static_cast<size_t>(ncols) * kLine + 1);
  outs.resize(static_cast<size_t>(size) * kLine + 1);
  for (int r0 = 0; r0 < rows; r0 += kBlockRows) {
    const int nb = std::min(kBlockRows, rows - r0);  // lanes >= nb hold stale bytes, unused
    const uint8_t* base =
        in.rgb.data() + static_cast<size_t>(row_lo + r0) * in_stride + size_t(tx.lo) * 3;
    transpose_in(base, in_stride, ncols, nb, cols.data());
    for (int xx = 0; xx < size; ++xx) {
      combine_lines(cols.data() + static_cast<size_t>(tx.first[xx] - tx.lo) * kLine, kLine,
                    tx.view(xx), kLine, outs.data() + static_cast<size_t>(xx) * kLine);
    }
    uint8_t* dst = tmp + static_cast<size_t>(r0) * row_bytes;
    if (nb == kBlockRows) {
      transpose_out<kBlockRows>(outs.data(), size, nb, row_bytes, dst);
    } else {
      transpose_out<0>(outs.data(), size, nb, row_bytes, dst);
    }
  }
}

// Python 3's round(), half to even, of d / 2 for d >= 0 (torchvision's CenterCrop offset).
int half_round_even(int d) {
  const int k = d / 2;
  return (d % 2 == 0 || k % 2 == 0) ? k : k + 1;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

ImageFormat sniff_format(const uint8_t* data, size_t size) {
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  if (data == nullptr) return ImageFormat::kUnknown;
  if (size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF) return ImageFormat::kJpeg;
  if (size >= 8 && std::memcmp(data, kPng, 8) == 0) return ImageFormat::kPng;
  return ImageFormat::kUnknown;
}

Image decode_stored_jpeg(const uint8_t* data, size_t size, int width, int height,
                         const std::string& name, int min_side) {
  if (size == 0) fail(image_reason::kEmpty, name, "zero bytes");
  FNVLP_CHECK(data != nullptr, "decode_stored_jpeg(" << name << "): null data");
  FNVLP_CHECK(min_side >= 0, "decode_stored_jpeg: min_side must be >= 0, got " << min_side);
  if (sniff_format(data, size) != ImageFormat::kJpeg)
    fail(image_reason::kUnsupported, name, "not a JPEG stream (no SOI marker)");
  const StoredJpeg expect{width, height};
  return decode_jpeg(data, size, name, min_side, &expect);
}

Image decode_image(const uint8_t* data, size_t size, const std::string& name, int min_side) {
  if (size == 0) fail(image_reason::kEmpty, name, "zero bytes");
  FNVLP_CHECK(data != nullptr, "decode_image(" << name << "): null data with size " << size);
  FNVLP_CHECK(min_side >= 0, "decode_image: min_side must be >= 0, got " << min_side);
  switch (sniff_format(data, size)) {
    case ImageFormat::kJpeg:
      return decode_jpeg(data, size, name, min_side);
    case ImageFormat::kPng:
      return decode_png(data, size, name);
    case ImageFormat::kUnknown:
      break;
  }
  char head[3 * 8 + 1] = {0};
  const size_t n = std::min<size_t>(size, 8);
  for (size_t i = 0; i < n; ++i) std::snprintf(head + 3 * i, 4, "%02x ", data[i]);
  fail(image_reason::kUnsupported, name,
       "neither JPEG nor PNG (first bytes: " + std::string(head, 3 * n - 1) + ")");
}

namespace {

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Where the open descriptor really points (every symlink resolved), so a link swapped after a
// path check cannot lead outside the root.
std::string resolved_path(int fd, const std::string& path) {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/fd/" + std::to_string(fd), ec);
  if (ec) p = std::filesystem::canonical(path, ec);
  return ec ? std::string() : p.string();
}

bool inside(const std::string& path, const std::string& root) {
  if (root == "/") return !path.empty() && path[0] == '/';
  return path.size() > root.size() && path.compare(0, root.size(), root) == 0 &&
         path[root.size()] == '/';
}

}  // namespace

Image read_image_file(const std::string& path, int min_side, const ImageFileLimits& limits) {
  // Devices, FIFOs and directories are refused before open: opening /dev/zero or a FIFO without
  // a writer reads forever or blocks.
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    fail(image_reason::kMissing, path, std::string("cannot open: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(image_reason::kNotRegular, path, file_kind(st.st_mode));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    fail(image_reason::kMissing, path, std::string("cannot open: ") + std::strerror(errno));
  }
  auto refuse = [&](const char* reason, const std::string& what) {
    ::close(fd);
    fail(reason, path, what);
  };
  if (::fstat(fd, &st) != 0) refuse(image_reason::kMissing, "cannot stat the open file");
  if (!S_ISREG(st.st_mode)) refuse(image_reason::kNotRegular, file_kind(st.st_mode));
  if (!limits.root.empty()) {
    const std::string real = resolved_path(fd, path);
    if (!inside(real, limits.root))
      refuse(image_reason::kOutsideRoot, "resolves to " + (real.empty() ? "?" : real) +
                                             ", outside the image root " + limits.root);
  }
  const auto cap = static_cast<size_t>(limits.max_bytes);
  if (st.st_size > limits.max_bytes)
    refuse(image_reason::kTooLarge, std::to_string(st.st_size) + " bytes, above the cap of " +
                                        std::to_string(limits.max_bytes));
  // Sized from fstat plus one byte, so that the read that sees EOF needs no growth; but read to
  // EOF rather than trusting the size: the file may change under us.
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size) + 1);
  size_t used = 0;
  for (;;) {
    if (used > cap)
      refuse(image_reason::kTooLarge,
             "grew past the cap of " + std::to_string(limits.max_bytes) + " bytes while read");
    if (used == bytes.size()) bytes.resize(std::min(2 * bytes.size() + 65536, cap + 1));
    const ssize_t r = ::read(fd, bytes.data() + used, bytes.size() - used);
    if (r == 0) break;
    if (r < 0) {
      if (errno == EINTR) continue;
      refuse(image_reason::kMissing, std::string("cannot read: ") + std::strerror(errno));
    }
    used += static_cast<size_t>(r);
  }
  ::close(fd);
  return decode_image(bytes.data(), used, path, min_side);
}

namespace {

// Rows and columns [y0, y0 + out_h) x [x0, x0 + out_w) of `in` resized to rw x rh: only the
// output pixels are computed, in Pillow's order: a horizontal pass to 8-bit over the source rows
// the vertical taps touch, then the vertical pass. Integer arithmetic throughout except the
// weights, which are computed as Pillow does; so the result is Pillow's, bit for bit.
Image resample(const Image& in, int rw, int rh, int x0, int y0, int out_w, int out_h) {
  const int w = in.width, h = in.height;
  Image out;
  out.width = out_w;
  out.height = out_h;
  out.rgb.resize(static_cast<size_t>(out_w) * out_h * 3);
  const size_t in_stride = static_cast<size_t>(w) * 3;
  const size_t row_bytes = static_cast<size_t>(out_w) * 3;

  // Pillow skips a pass whose size does not change; its identity weights would give the same
  // bytes, so skipping is only faster.
  const bool horizontal = rw != w;
  const bool vertical = rh != h;
  const Taps ty = vertical ? bilinear_taps(h, rh, y0, out_h) : Taps{};
  const int row_lo = vertical ? ty.lo : y0;
  const int rows = vertical ? ty.hi - ty.lo : out_h;

  // Rows [row_lo, row_lo + rows) of the horizontally resampled output columns, 8-bit as Pillow.
  const uint8_t* hbase;
  size_t hstride;
  thread_local std::vector<uint8_t> tmp;
  if (horizontal) {
    const Taps tx = bilinear_taps(w, rw, x0, out_w);
    tmp.resize(static_cast<size_t>(rows) * row_bytes + 1);  // +1: 4-byte stores below
    horizontal_pass(in, row_lo, rows, tx, out_w, tmp.data());
    hbase = tmp.data();
    hstride = row_bytes;
  } else {
    hbase = in.rgb.data() + static_cast<size_t>(row_lo) * in_stride + static_cast<size_t>(x0) * 3;
    hstride = in_stride;
  }

  for (int yy = 0; yy < out_h; ++yy) {
    uint8_t* o = &out.rgb[yy * row_bytes];
    if (!vertical) {
      std::memcpy(o, hbase + static_cast<size_t>(yy) * hstride, row_bytes);
      continue;
    }
    combine_lines(hbase + static_cast<size_t>(ty.first[yy] - row_lo) * hstride, hstride,
                  ty.view(yy), row_bytes, o);
  }
  return out;
}

void check_rgb(const Image& in, const char* what) {
  FNVLP_CHECK(in.width > 0 && in.height > 0, what << ": empty input image");
  FNVLP_CHECK(
      in.rgb.size() == static_cast<size_t>(in.width) * in.height * 3,
      what << ": " << in.rgb.size() << " bytes for " << in.width << "x" << in.height << " RGB");
}

}  // namespace

// Equivalent to torchvision's Resize(size) + CenterCrop(size) on a PIL image, i.e.
//   im.resize((W', H'), Image.BILINEAR).crop(centred square)
// with the shorter side -> size, the longer -> floor(size * long / short) (Python's int()), and
// the crop offset round((long' - size) / 2) rounded half to even (Python's round()).
Image resize_center_crop(const Image& in, int size) {
  FNVLP_CHECK(size > 0, "resize_center_crop: size must be > 0, got " << size);
  check_rgb(in, "resize_center_crop");
  if (in.width == size && in.height == size) return in;
  const int w = in.width, h = in.height;
  const int64_t shorter = std::min(w, h), longer = std::max(w, h);
  const int64_t resized_long = size * longer / shorter;
  FNVLP_CHECK(resized_long <= (int64_t{1} << 24),
              "resize_center_crop: " << w << "x" << h << " -> " << size << " is too large");
  const int rw = w <= h ? size : static_cast<int>(resized_long);
  const int rh = w <= h ? static_cast<int>(resized_long) : size;
  return resample(in, rw, rh, half_round_even(rw - size), half_round_even(rh - size), size, size);
}

Image resize_max_side(const Image& in, int max_side) {
  FNVLP_CHECK(max_side > 0, "resize_max_side: max_side must be > 0, got " << max_side);
  check_rgb(in, "resize_max_side");
  const int64_t w = in.width, h = in.height, longer = std::max(w, h);
  if (longer <= max_side) return in;
  // The shorter side rounded half up, at least one pixel.
  auto scaled = [&](int64_t side) {
    return static_cast<int>(std::max<int64_t>(1, (2 * side * max_side + longer) / (2 * longer)));
  };
  const int rw = w >= h ? max_side : scaled(w);
  const int rh = h > w ? max_side : scaled(h);
  return resample(in, rw, rh, 0, 0, rw, rh);
}

}  // namespace fnvlp::data
