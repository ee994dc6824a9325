#pragma once
// Image-text retrieval metrics as ALBEF's itm_eval computes them, from a similarity matrix of
// distinct images x captions: text retrieval (image -> text) counts a hit when ANY caption of the
// image ranks within K; image retrieval (text -> image) when the caption's image does.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

namespace fnvlp::eval {

struct RetrievalMetrics {
  double txt_r1 = 0, txt_r5 = 0, txt_r10 = 0;
  double img_r1 = 0, img_r5 = 0, img_r10 = 0;
  double txt_r_mean() const { return (txt_r1 + txt_r5 + txt_r10) / 3; }
  double img_r_mean() const { return (img_r1 + img_r5 + img_r10) / 3; }
  double r_mean() const { return (txt_r_mean() + img_r_mean()) / 2; }
  nlohmann::json to_json(const std::string& prefix = "") const;
};

// sim: row-major [num_images x num_texts]; text_image[t] = row of caption t's image. Ties count
// against the positive (a tied negative ranks ahead), so a constant matrix scores at chance.
// Percentages (0..100), as ALBEF reports them.
RetrievalMetrics retrieval_metrics(const std::vector<float>& sim, int64_t num_images,
                                   const std::vector<int64_t>& text_image);

// From per-pair embeddings (pair order, one row per caption, image rows repeated per caption):
// images are de-duplicated by image_id, then retrieval_metrics on the cosine similarities.
RetrievalMetrics retrieval_from_embeddings(const std::vector<float>& image_emb,
                                           const std::vector<float>& text_emb, int64_t dim,
                                           const std::vector<int64_t>& image_id);

}  // namespace fnvlp::eval
