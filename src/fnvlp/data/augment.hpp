#pragma once
// Image augmentation of a whole batch at once: uint8 [b, S, S, 3] (raw shards) or the stored
// JPEGs of a batch (jpeg shards, decoded here on the intra-op threads) -> float [b, 3, R, R]
// normalised with the ALBEF/CLIP mean and std.
//
// Training: RandomResizedCrop (torchvision's sampling of scale and log-aspect, 10 tries then a
// centre crop), horizontal flip and colour jitter, from the stored image: the raw square, or the
// whole stored JPEG at its own aspect ratio, as ALBEF crops from the full image. Evaluation: raw,
// a resize of the square; jpeg, torchvision's Resize(R) + CenterCrop(R) (resize_center_crop);
// then normalisation.
// Resizing is bilinear with align_corners=false and no antialiasing, index for index as ATen's
// upsample_bilinear2d (so crop + resize equals torchvision's tensor RandomResizedCrop, and eval
// equals F::interpolate). All of it runs as one fused loop per image that reads the uint8 source
// and writes the normalised output: 3x (128 px) to 7x (64 px) less CPU than the same pipeline
// as torch ops (to-float copy, affine_grid + grid_sample, elementwise jitter, normalisation).
//
// Every random number comes from the torch::Generator passed in, so a batch's augmentation is a
// function of (images, generator state).
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "fnvlp/core/config_fields.hpp"
#include "fnvlp/data/dataset.hpp"
#include "fnvlp/data/image.hpp"

namespace fnvlp::data {

struct AugmentConfig {
  // clang-format off
  FNVLP_CONFIG_FIELDS(
      (bool, random_resized_crop, true),
      // fraction of the image area (ALBEF pretraining: 0.5 .. 1.0)
      (double, crop_scale_min, 0.5, config::above_to(0, 1)),
      (double, crop_scale_max, 1.0, config::above_to(0, 1)),
      (double, crop_ratio_min, 3.0 / 4.0, config::above(0)),  // aspect ratio w/h
      (double, crop_ratio_max, 4.0 / 3.0, config::above(0)),
      (bool, horizontal_flip, true),
      (double, flip_prob, 0.5, config::within(0, 1)),
      // Factors drawn uniformly from [max(0, 1 - a), 1 + a] per image, applied in this fixed order
      // (torchvision draws a random order), each clamped to the valid range; 0 turns one off.
      (bool, color_jitter, false),
      (double, brightness, 0.4, config::at_least(0)),
      (double, contrast, 0.4, config::at_least(0)),
      (double, saturation, 0.4, config::at_least(0)))
  // clang-format on
  void validate() const;  // throws naming the offending key
};

inline constexpr double kImageMean[3] = {0.48145466, 0.4578275, 0.40821073};
inline constexpr double kImageStd[3] = {0.26862954, 0.26130258, 0.27577711};

// The images of a batch as the transforms read them: views of the raw uint8 tensor, or the
// batch's stored JPEGs decoded (in parallel over the intra-op threads; the result does not
// depend on their number). A JPEG that does not decode throws fnvlp::Error naming its shard, row,
// pair and reason. Decode once, augment twice where a method asks for a second view.
class BatchImages {
 public:
  // `min_side` > 0 lets a JPEG decode at a reduced DCT scale whose shorter side stays >= min_side.
  explicit BatchImages(const Batch& batch, int min_side = 0);
  explicit BatchImages(const torch::Tensor& images);  // uint8 [b, S, S, 3]
  // Views point into the tensor or the decoded images: moves keep them, copies would not.
  BatchImages(const BatchImages&) = delete;
  BatchImages& operator=(const BatchImages&) = delete;
  BatchImages(BatchImages&&) = default;
  BatchImages& operator=(BatchImages&&) = default;
  struct View {
    const uint8_t* rgb;  // h * w * 3, row-major
    int64_t h, w;
  };
  int64_t size() const { return static_cast<int64_t>(views_.size()); }
  const View& operator[](int64_t i) const { return views_[static_cast<size_t>(i)]; }

 private:
  torch::Tensor tensor_;
  std::vector<Image> decoded_;
  std::vector<View> views_;
};

class Augmenter {
 public:
  Augmenter(const AugmentConfig& config, int64_t image_res);

  // -> float [b, 3, image_res, image_res], random per image.
  torch::Tensor train(const BatchImages& images, torch::Generator& gen) const;
  torch::Tensor train(const Batch& batch, torch::Generator& gen) const {
    return train(BatchImages(batch), gen);
  }
  torch::Tensor train(const torch::Tensor& images, torch::Generator& gen) const {
    return train(BatchImages(images), gen);
  }
  // -> float [b, 3, image_res, image_res]: raw, bilinear resize of the square; jpeg,
  // resize_center_crop to image_res; then normalisation.
  torch::Tensor eval(const Batch& batch) const;
  torch::Tensor eval(const torch::Tensor& images) const;  // uint8 [b, S, S, 3]

  const AugmentConfig& config() const { return config_; }
  int64_t image_res() const { return image_res_; }

 private:
  AugmentConfig config_;
  int64_t image_res_;
};

}  // namespace fnvlp::data
