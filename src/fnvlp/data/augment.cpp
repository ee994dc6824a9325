#include "fnvlp/data/augment.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <ATen/Parallel.h>

#include "fnvlp/core/error.hpp"
#include "fnvlp/core/intraop_loops.hpp"

namespace fnvlp::data {

void AugmentConfig::validate() const {
  FNVLP_CHECK(crop_scale_min > 0 && crop_scale_min <= crop_scale_max && crop_scale_max <= 1,
              "augment: crop_scale_min " << crop_scale_min << " / crop_scale_max " << crop_scale_max
                                         << " must satisfy 0 < min <= max <= 1");
  FNVLP_CHECK(crop_ratio_min > 0 && crop_ratio_min <= crop_ratio_max,
              "augment: crop_ratio_min " << crop_ratio_min << " / crop_ratio_max " << crop_ratio_max
                                         << " must satisfy 0 < min <= max");
  FNVLP_CHECK(flip_prob >= 0 && flip_prob <= 1,
              "augment: flip_prob " << flip_prob << " outside [0, 1]");
  FNVLP_CHECK(brightness >= 0 && contrast >= 0 && saturation >= 0,
              "augment: brightness/contrast/saturation must be non-negative");
}

Augmenter::Augmenter(const AugmentConfig& config, int64_t image_res)
    : config_(config), image_res_(image_res) {
  config_.validate();
  FNVLP_CHECK(image_res >= 1, "augment: image_res must be positive, got " << image_res);
}

namespace {

void check_images(const torch::Tensor& images) {
  FNVLP_CHECK(images.dim() == 4 && images.size(3) == 3 && images.size(1) == images.size(2) &&
                  images.scalar_type() == torch::kUInt8,
              "augment: expected uint8 images [b, S, S, 3], got " << images.sizes() << " "
                                                                  << images.scalar_type());
}

}  // namespace

BatchImages::BatchImages(const torch::Tensor& images) {
  check_images(images);
  tensor_ = images.contiguous();
  const int64_t b = tensor_.size(0), S = tensor_.size(1);
  const uint8_t* p = tensor_.data_ptr<uint8_t>();
  views_.resize(static_cast<size_t>(b));
  for (int64_t i = 0; i < b; ++i) views_[static_cast<size_t>(i)] = {p + i * S * S * 3, S, S};
}

BatchImages::BatchImages(const Batch& batch, int min_side) {
  if (!batch.encoded) {
    FNVLP_CHECK(batch.images.defined(), "augment: a batch with neither images nor stored JPEGs");
    *this = BatchImages(batch.images);
    return;
  }
  const EncodedImages& enc = *batch.encoded;
  const auto n = static_cast<int64_t>(enc.size());
  decoded_.resize(enc.size());
  at::parallel_for(0, n, 1, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) {
      const auto k = static_cast<size_t>(i);
      try {
        decoded_[k] = decode_stored_jpeg(enc.data(k), enc.bytes_of(k), enc.width[k], enc.height[k],
                                         enc.source[k], min_side);
      } catch (const ImageError& e) {
        FNVLP_FAIL(e.what() << " (" << e.reason() << ")");
      }
    }
  });
  views_.resize(enc.size());
  for (size_t i = 0; i < enc.size(); ++i)
    views_[i] = {decoded_[i].rgb.data(), decoded_[i].height, decoded_[i].width};
}

namespace {

constexpr int kCropTries = 10;  // torchvision's RandomResizedCrop
// Uniform draws per image: (scale, log-ratio) per try, crop top, crop left, flip, 3 jitter factors.
constexpr int kDraws = 2 * kCropTries + 6;

struct ImageOp {
  int64_t top = 0, left = 0, h = 0, w = 0;  // crop box in source pixels
  bool flip = false;
  float brightness = 1, contrast = 1, saturation = 1;
};

// One axis of PyTorch's bilinear resize (align_corners=false, no antialias) of `in` source pixels
// starting at `offset` to `out` pixels: indices i0/i1 (pre-multiplied by `stride`) and the weight
// of i1, computed exactly as ATen's compute_source_index_and_lambda so eval matches interpolate.
void axis_table(int64_t offset, int64_t in, int64_t out, int64_t stride, bool flip,
                std::vector<int64_t>& i0, std::vector<int64_t>& i1, std::vector<float>& l1) {
  i0.resize(static_cast<size_t>(out));
  i1.resize(static_cast<size_t>(out));
  l1.resize(static_cast<size_t>(out));
  const float ratio = static_cast<float>(in) / static_cast<float>(out);
  for (int64_t d = 0; d < out; ++d) {
    float src = ratio * (static_cast<float>(d) + 0.5f) - 0.5f;
    if (src < 0) src = 0;
    const auto a = static_cast<int64_t>(src);
    const int64_t b = a + (a < in - 1 ? 1 : 0);
    const auto k = static_cast<size_t>(flip ? out - 1 - d : d);
    i0[k] = (offset + a) * stride;
    i1[k] = (offset + b) * stride;
    l1[k] = std::min(std::max(src - static_cast<float>(a), 0.0f), 1.0f);
  }
}

// Written as selects so that the compiler emits maxss/minss, not branches.
inline float clamp255(float v) {
  v = v > 0.0f ? v : 0.0f;
  return v < 255.0f ? v : 255.0f;
}
inline float luma(float r, float g, float b) { return 0.299f * r + 0.587f * g + 0.114f * b; }

// Crop + resize + flip (+ jitter) + normalisation of every image, reading the uint8 HWC source
// directly: no float copy of the full-size batch, no sampling grid. The resize is separable: a
// source row is resized horizontally once (kept while consecutive output rows use it), then each
// output row blends two such rows. Images are independent, so at::parallel_for uses the
// intra-op threads, if any, without changing results.
torch::Tensor apply(const BatchImages& images, const std::vector<ImageOp>& ops, int64_t R,
                    bool jitter, bool contrast, bool saturation) {
  const int64_t b = images.size();
  torch::Tensor out = torch::empty({b, 3, R, R}, torch::kFloat);
  float* out_all = out.data_ptr<float>();
  float scale[3], shift[3];
  for (int c = 0; c < 3; ++c) {
    scale[c] = static_cast<float>(1.0 / (255.0 * kImageStd[c]));
    shift[c] = static_cast<float>(-kImageMean[c] / kImageStd[c]);
  }
  const size_t row_len = static_cast<size_t>(R * 3);
  at::parallel_for(0, b, 1, [&](int64_t first, int64_t last) {
    std::vector<int64_t> y0, y1, x0, x1;
    std::vector<float> ly, lx, tmp;
    std::vector<float> hrow[2] = {std::vector<float>(row_len), std::vector<float>(row_len)};
    std::vector<float> line(row_len);
    for (int64_t i = first; i < last; ++i) {
      const ImageOp& op = ops[static_cast<size_t>(i)];
      axis_table(op.top, op.h, R, 1, false, y0, y1, ly);
      axis_table(op.left, op.w, R, 3, op.flip, x0, x1, lx);
      const uint8_t* src = images[i].rgb;
      const int64_t W = images[i].w;
      float* o[3];
      for (int c = 0; c < 3; ++c) o[c] = out_all + (i * 3 + c) * R * R;
      if (jitter) tmp.resize(static_cast<size_t>(R * R * 3));
      int64_t cached[2] = {-1, -1};  // source row held by hrow[k]
      auto resized_row = [&](int64_t r) -> const float* {
        for (int k = 0; k < 2; ++k)
          if (cached[k] == r) return hrow[k].data();
        // Rows are requested in ascending order: replace the older (smaller) one.
        const int k = cached[0] < cached[1] ? 0 : 1;
        cached[k] = r;
        const uint8_t* __restrict s = src + r * W * 3;
        float* __restrict h = hrow[k].data();
        for (int64_t x = 0; x < R; ++x) {
          const uint8_t* __restrict p0 = s + x0[static_cast<size_t>(x)];
          const uint8_t* __restrict p1 = s + x1[static_cast<size_t>(x)];
          const float w1 = lx[static_cast<size_t>(x)], w0 = 1.0f - w1;
          h[x * 3] = w0 * p0[0] + w1 * p1[0];
          h[x * 3 + 1] = w0 * p0[1] + w1 * p1[1];
          h[x * 3 + 2] = w0 * p0[2] + w1 * p1[2];
        }
        return h;
      };
      double gray_sum = 0;
      for (int64_t y = 0; y < R; ++y) {
        const float* __restrict a = resized_row(y0[static_cast<size_t>(y)]);
        const float* __restrict bb = resized_row(y1[static_cast<size_t>(y)]);
        const float w1 = ly[static_cast<size_t>(y)], w0 = 1.0f - w1;
        float* __restrict l = jitter ? &tmp[static_cast<size_t>(y) * row_len] : line.data();
        for (size_t k = 0; k < row_len; ++k) l[k] = w0 * a[k] + w1 * bb[k];
        if (jitter) {
          float g = 0;
          for (int64_t x = 0; x < R; ++x) {
            float* v = l + x * 3;
            for (int c = 0; c < 3; ++c) v[c] = clamp255(v[c] * op.brightness);
            g += luma(v[0], v[1], v[2]);
          }
          gray_sum += g;
          continue;
        }
        for (int c = 0; c < 3; ++c) {
          float* __restrict oc = o[c] + y * R;
          for (int64_t x = 0; x < R; ++x) oc[x] = l[x * 3 + c] * scale[c] + shift[c];
        }
      }
      if (!jitter) continue;
      const auto mean = static_cast<float>(gray_sum / static_cast<double>(R * R));
      const float fc = op.contrast, fs = op.saturation;
      for (int64_t p = 0; p < R * R; ++p) {
        float* v = &tmp[static_cast<size_t>(p) * 3];
        if (contrast)
          for (int c = 0; c < 3; ++c) v[c] = clamp255(fc * v[c] + (1 - fc) * mean);
        if (saturation) {
          const float g = luma(v[0], v[1], v[2]);
          for (int c = 0; c < 3; ++c) v[c] = clamp255(fs * v[c] + (1 - fs) * g);
        }
        for (int c = 0; c < 3; ++c) o[c][p] = v[c] * scale[c] + shift[c];
      }
    }
  });
  return out;
}

}  // namespace

torch::Tensor Augmenter::eval(const torch::Tensor& images) const {
  const BatchImages views(images);
  const int64_t S = images.size(1);
  std::vector<ImageOp> ops(static_cast<size_t>(views.size()), ImageOp{0, 0, S, S});
  return apply(views, ops, image_res_, false, false, false);
}

torch::Tensor Augmenter::eval(const Batch& batch) const {
  if (!batch.encoded) return eval(batch.images);
  // Decoded at the smallest DCT scale that keeps the shorter side >= image_res, then resized and
  // centre-cropped to image_res as torchvision's Resize + CenterCrop on a PIL image.
  const EncodedImages& enc = *batch.encoded;
  const int R = static_cast<int>(image_res_);
  const auto n = static_cast<int64_t>(enc.size());
  torch::Tensor square = torch::empty({n, R, R, 3}, torch::kUInt8);
  uint8_t* dst = square.data_ptr<uint8_t>();
  at::parallel_for(0, n, 1, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) {
      const auto k = static_cast<size_t>(i);
      Image img;
      try {
        img = resize_center_crop(decode_stored_jpeg(enc.data(k), enc.bytes_of(k), enc.width[k],
                                                    enc.height[k], enc.source[k], R),
                                 R);
      } catch (const ImageError& e) {
        FNVLP_FAIL(e.what() << " (" << e.reason() << ")");
      }
      std::memcpy(dst + i * R * R * 3, img.rgb.data(), img.rgb.size());
    }
  });
  return eval(square);
}

torch::Tensor Augmenter::train(const BatchImages& images, torch::Generator& gen) const {
  const int64_t b = images.size();
  const AugmentConfig& c = config_;
  // All draws of the batch at once, in double: the crop arithmetic below is plain C++.
  const torch::Tensor u = torch::rand({b, kDraws}, gen, torch::kDouble);
  const auto ua = u.accessor<double, 2>();
  const double log_rmin = std::log(c.crop_ratio_min), log_rmax = std::log(c.crop_ratio_max);
  std::vector<ImageOp> ops(static_cast<size_t>(b));
  for (int64_t i = 0; i < b; ++i) {
    ImageOp& op = ops[static_cast<size_t>(i)];
    const int64_t H = images[i].h, W = images[i].w;
    op.h = H;
    op.w = W;
    if (c.random_resized_crop) {
      bool found = false;
      for (int t = 0; t < kCropTries && !found; ++t) {
        const double area =
            static_cast<double>(H * W) *
            (c.crop_scale_min + (c.crop_scale_max - c.crop_scale_min) * ua[i][2 * t]);
        const double ratio = std::exp(log_rmin + (log_rmax - log_rmin) * ua[i][2 * t + 1]);
        const auto cw = static_cast<int64_t>(std::lround(std::sqrt(area * ratio)));
        const auto ch = static_cast<int64_t>(std::lround(std::sqrt(area / ratio)));
        if (cw > 0 && cw <= W && ch > 0 && ch <= H) {
          op.h = ch;
          op.w = cw;
          op.top = std::min(H - ch, static_cast<int64_t>(ua[i][2 * kCropTries] * (H - ch + 1)));
          op.left =
              std::min(W - cw, static_cast<int64_t>(ua[i][2 * kCropTries + 1] * (W - cw + 1)));
          found = true;
        }
      }
      if (!found) {  // torchvision's fallback: the largest centred crop within the ratio range
        const double in_ratio = static_cast<double>(W) / static_cast<double>(H);
        if (in_ratio < c.crop_ratio_min)
          op.h = std::min(H, static_cast<int64_t>(std::lround(W / c.crop_ratio_min)));
        else if (in_ratio > c.crop_ratio_max)
          op.w = std::min(W, static_cast<int64_t>(std::lround(H * c.crop_ratio_max)));
        op.top = (H - op.h) / 2;
        op.left = (W - op.w) / 2;
      }
    }
    op.flip = c.horizontal_flip && ua[i][2 * kCropTries + 2] < c.flip_prob;
    if (c.color_jitter) {
      const double amount[3] = {c.brightness, c.contrast, c.saturation};
      float* factor[3] = {&op.brightness, &op.contrast, &op.saturation};
      for (int k = 0; k < 3; ++k) {
        const double lo = std::max(0.0, 1.0 - amount[k]), hi = 1.0 + amount[k];
        *factor[k] = static_cast<float>(lo + (hi - lo) * ua[i][2 * kCropTries + 3 + k]);
      }
    }
  }
  return apply(images, ops, image_res_, c.color_jitter, c.color_jitter && c.contrast > 0,
               c.color_jitter && c.saturation > 0);
}

}  // namespace fnvlp::data
