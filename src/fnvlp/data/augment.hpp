#pragma once
// Image augmentation of a whole batch at once: uint8 [b, S, S, 3] (as read from the shards) ->
// float [b, 3, R, R] normalised with the ALBEF/CLIP mean and std.
//
// Training: RandomResizedCrop (torchvision's sampling of scale and log-aspect, 10 tries then a
// centre crop), horizontal flip and colour jitter; evaluation: resize and normalisation only.
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

#include "fnvlp/core/config_fields.hpp"

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

class Augmenter {
 public:
  Augmenter(const AugmentConfig& config, int64_t image_res);

  // uint8 [b, S, S, 3] -> float [b, 3, image_res, image_res], random per image.
  torch::Tensor train(const torch::Tensor& images, torch::Generator& gen) const;
  // uint8 [b, S, S, 3] -> float [b, 3, image_res, image_res]: bilinear resize + normalisation.
  torch::Tensor eval(const torch::Tensor& images) const;

  const AugmentConfig& config() const { return config_; }
  int64_t image_res() const { return image_res_; }

 private:
  AugmentConfig config_;
  int64_t image_res_;
};

}  // namespace fnvlp::data
