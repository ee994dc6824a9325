#pragma once
// Sizes of the ALBEF-style model (Li et al., "Align before Fuse", NeurIPS 2021). Kept free of torch
// so that configs, mains and tests that only read YAML do not pay the libtorch compile cost.
#include <cstdint>

#include "fnvlp/core/config_fields.hpp"
#include "fnvlp/core/error.hpp"

namespace fnvlp::model {

struct ModelConfig {
  // clang-format off
  FNVLP_CONFIG_FIELDS(
      // Image encoder: ViT (Dosovitskiy et al. 2021) as ALBEF's models/vit.py, pre-norm blocks.
      (int64_t, image_size, 64, config::at_least(1)),
      (int64_t, patch_size, 8, config::at_least(1)),
      (int64_t, vision_width, 128, config::at_least(1)),
      (int64_t, vision_layers, 2, config::at_least(1)),
      (int64_t, vision_heads, 4, config::at_least(1)),
      // Text and fusion encoders: BERT post-norm layers. ALBEF splits one 12-layer BERT into the
      // first 6 text-only layers and the last 6 layers with cross-attention to the image (fusion).
      (int64_t, text_width, 128, config::at_least(1)),
      (int64_t, text_layers, 2, config::at_least(0)),
      (int64_t, fusion_layers, 1, config::at_least(1)),
      (int64_t, text_heads, 4, config::at_least(1)),
      // FFN width = mlp_ratio * width (ViT and BERT both use 4)
      (int64_t, mlp_ratio, 4, config::at_least(1)),
      (int64_t, vocab_size, 30522, config::at_least(1)),  // bert-base-uncased
      // number of learned text positions (ALBEF truncates captions to 30)
      (int64_t, max_len, 30, config::at_least(2)),
      (int64_t, embed_dim, 128, config::at_least(1)),  // ITC projection width (ALBEF: 256)
      // BERT's hidden and attention-probability dropout (text and fusion encoders). The ViT has
      // none, as in ALBEF (drop_rate = drop_path_rate = 0 there).
      (double, dropout, 0.0, config::half_open(0, 1)),
      // Learnable ITC temperature: initial value and the clamp ALBEF applies (model_pretrain.py).
      (double, temp, 0.07, config::above(0)),
      (double, temp_min, 0.001, config::above(0)),
      (double, temp_max, 0.5, config::above(0)))
  // clang-format on

  int64_t num_patches() const { return (image_size / patch_size) * (image_size / patch_size); }

  // Throws fnvlp::Error naming the first inconsistent size.
  void validate() const {
    FNVLP_CHECK(patch_size > 0 && image_size > 0 && image_size % patch_size == 0,
                "model: image_size " << image_size << " must be a positive multiple of patch_size "
                                     << patch_size);
    FNVLP_CHECK(vision_heads > 0 && vision_width > 0 && vision_width % vision_heads == 0,
                "model: vision_width " << vision_width << " must be divisible by vision_heads "
                                       << vision_heads);
    FNVLP_CHECK(
        text_heads > 0 && text_width > 0 && text_width % text_heads == 0,
        "model: text_width " << text_width << " must be divisible by text_heads " << text_heads);
    FNVLP_CHECK(vision_layers >= 0 && text_layers >= 0 && fusion_layers >= 0,
                "model: layer counts must be non-negative");
    FNVLP_CHECK(mlp_ratio > 0 && vocab_size > 0 && max_len > 0 && embed_dim > 0,
                "model: mlp_ratio, vocab_size, max_len and embed_dim must be positive");
    FNVLP_CHECK(dropout >= 0.0 && dropout < 1.0, "model: dropout " << dropout << " not in [0, 1)");
    FNVLP_CHECK(0.0 < temp_min && temp_min <= temp && temp <= temp_max,
                "model: need 0 < temp_min <= temp <= temp_max, got " << temp_min << ", " << temp
                                                                     << ", " << temp_max);
  }
};

}  // namespace fnvlp::model
