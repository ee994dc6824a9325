#pragma once
// Image-text retrieval metrics as ALBEF's itm_eval computes them, from a similarity matrix of
// distinct images x captions: text retrieval (image -> text) counts a hit when ANY caption of the
// image ranks within K; image retrieval (text -> image) when the caption's image does.
#include <cstdint>
#include <functional>
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

// --- building blocks shared by the single-process metrics and the distributed evaluator ---------

// Hits of one direction: a query whose best positive has 0-based rank r counts for R@K if r < K.
// Integer counts, so sums over ranks are exact whatever the rank count.
struct HitCounts {
  int64_t r1 = 0, r5 = 0, r10 = 0, queries = 0;
  void add(int64_t rank) {
    r1 += rank < 1;
    r5 += rank < 5;
    r10 += rank < 10;
    ++queries;
  }
  HitCounts& operator+=(const HitCounts& o) {
    r1 += o.r1, r5 += o.r5, r10 += o.r10, queries += o.queries;
    return *this;
  }
};
// Percentages from the counts of text retrieval (image queries) and image retrieval (text queries).
RetrievalMetrics metrics_from_counts(const HitCounts& txt, const HitCounts& img);

// 0-based rank of the best-scoring positive of one query: the number of negatives scoring >= it
// (ties count against the positive). A query without a positive throws.
int64_t positive_rank(const float* scores, int64_t n, const std::function<bool(int64_t)>& positive);

// Indices of the k largest scores, best first; equal scores keep the lower index first, so the
// candidate set is a function of the scores alone (k is clamped to n).
std::vector<int64_t> top_k(const float* scores, int64_t n, int64_t k);

// ALBEF's re-ranking of one query (Li et al. 2021, evaluation in ALBEF's Retrieval code): the k
// candidates of the ITC ranking get their ITM score, every other gallery item -inf. Returns the
// rank of the best positive in that re-scored row: among the candidates by ITM score with ties
// against the positive, and a miss at every K (the number of negatives in the gallery) when no
// positive is among the candidates.
int64_t reranked_rank(const std::vector<int64_t>& candidates, const std::vector<float>& itm_scores,
                      int64_t gallery_size, const std::function<bool(int64_t)>& positive);

// ITM score of a query against candidate gallery items (one score per candidate, larger = better).
using ItmScorer =
    std::function<std::vector<float>(int64_t query, const std::vector<int64_t>& candidates)>;

// Single-process reference of the re-ranked metrics over the whole ITC matrix `sim` (layout as
// retrieval_metrics): image queries re-score their top k_test captions with i2t(image, captions),
// caption queries their top k_test images with t2i(caption, images).
RetrievalMetrics reranked_metrics(const std::vector<float>& sim, int64_t num_images,
                                  const std::vector<int64_t>& text_image, int64_t k_test,
                                  const ItmScorer& i2t, const ItmScorer& t2i);

}  // namespace fnvlp::eval
