#include "fnvlp/eval/retrieval.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <unordered_map>

#include "fnvlp/core/error.hpp"

namespace fnvlp::eval {

nlohmann::json RetrievalMetrics::to_json(const std::string& p) const {
  return {
      {p + "txt_r1", txt_r1},           {p + "txt_r5", txt_r5},           {p + "txt_r10", txt_r10},
      {p + "img_r1", img_r1},           {p + "img_r5", img_r5},           {p + "img_r10", img_r10},
      {p + "txt_r_mean", txt_r_mean()}, {p + "img_r_mean", img_r_mean()}, {p + "r_mean", r_mean()}};
}

RetrievalMetrics metrics_from_counts(const HitCounts& txt, const HitCounts& img) {
  FNVLP_CHECK(txt.queries > 0 && img.queries > 0, "retrieval: no queries to score");
  const double ni = 100.0 / static_cast<double>(txt.queries),
               nt = 100.0 / static_cast<double>(img.queries);
  RetrievalMetrics m;
  m.txt_r1 = txt.r1 * ni, m.txt_r5 = txt.r5 * ni, m.txt_r10 = txt.r10 * ni;
  m.img_r1 = img.r1 * nt, m.img_r5 = img.r5 * nt, m.img_r10 = img.r10 * nt;
  return m;
}

int64_t positive_rank(const float* scores, int64_t n,
                      const std::function<bool(int64_t)>& positive) {
  float best = -std::numeric_limits<float>::infinity();
  bool any = false;
  for (int64_t j = 0; j < n; ++j)
    if (positive(j)) best = std::max(best, scores[j]), any = true;
  FNVLP_CHECK(any, "retrieval: a query has no positive in its gallery of " << n);
  int64_t rank = 0;
  for (int64_t j = 0; j < n; ++j)
    if (!positive(j) && scores[j] >= best) ++rank;
  return rank;
}

std::vector<int64_t> top_k(const float* scores, int64_t n, int64_t k) {
  FNVLP_CHECK(k > 0, "retrieval: top_k needs k > 0, got " << k);
  k = std::min(k, n);
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), int64_t{0});
  // Total order (score descending, index ascending): no dependence on the sort's stability.
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int64_t a, int64_t b) {
    return scores[a] != scores[b] ? scores[a] > scores[b] : a < b;
  });
  idx.resize(static_cast<size_t>(k));
  return idx;
}

int64_t reranked_rank(const std::vector<int64_t>& candidates, const std::vector<float>& itm_scores,
                      int64_t gallery_size, const std::function<bool(int64_t)>& positive) {
  FNVLP_CHECK(candidates.size() == itm_scores.size(),
              "retrieval: " << itm_scores.size() << " ITM scores for " << candidates.size()
                            << " candidates");
  float best = -std::numeric_limits<float>::infinity();
  bool found = false;
  int64_t positives = 0;
  for (int64_t j = 0; j < gallery_size; ++j) positives += positive(j);
  for (size_t c = 0; c < candidates.size(); ++c)
    if (positive(candidates[c]))
      best = found ? std::max(best, itm_scores[c]) : itm_scores[c], found = true;
  // Every non-candidate sits at -inf, tied with (hence ahead of) an absent positive.
  if (!found) return gallery_size - positives;
  int64_t rank = 0;
  for (size_t c = 0; c < candidates.size(); ++c)
    if (!positive(candidates[c]) && itm_scores[c] >= best) ++rank;
  return rank;
}

namespace {
// Column t of the row-major num_images x num_texts similarity matrix: caption t vs every image.
void copy_column(const std::vector<float>& sim, int64_t num_images, int64_t num_texts, int64_t t,
                 std::vector<float>& column) {
  for (int64_t i = 0; i < num_images; ++i)
    column[static_cast<size_t>(i)] = sim[static_cast<size_t>(i * num_texts + t)];
}
}  // namespace

RetrievalMetrics retrieval_metrics(const std::vector<float>& sim, int64_t num_images,
                                   const std::vector<int64_t>& text_image) {
  const auto num_texts = static_cast<int64_t>(text_image.size());
  FNVLP_CHECK(
      num_images > 0 && num_texts > 0 && static_cast<int64_t>(sim.size()) == num_images * num_texts,
      "retrieval: similarity matrix is not " << num_images << " x " << num_texts);
  for (int64_t t = 0; t < num_texts; ++t)
    FNVLP_CHECK(
        text_image[static_cast<size_t>(t)] >= 0 && text_image[static_cast<size_t>(t)] < num_images,
        "retrieval: caption " << t << " has no image");
  HitCounts txt, img;
  // Text retrieval: rank of the best positive caption = number of negatives scoring >= it.
  for (int64_t i = 0; i < num_images; ++i)
    txt.add(positive_rank(&sim[static_cast<size_t>(i * num_texts)], num_texts,
                          [&](int64_t t) { return text_image[static_cast<size_t>(t)] == i; }));
  // Image retrieval: rank of the caption's image among all images (one column of sim).
  std::vector<float> column(static_cast<size_t>(num_images));
  for (int64_t t = 0; t < num_texts; ++t) {
    copy_column(sim, num_images, num_texts, t, column);
    const int64_t gt = text_image[static_cast<size_t>(t)];
    img.add(positive_rank(column.data(), num_images, [&](int64_t i) { return i == gt; }));
  }
  return metrics_from_counts(txt, img);
}

RetrievalMetrics reranked_metrics(const std::vector<float>& sim, int64_t num_images,
                                  const std::vector<int64_t>& text_image, int64_t k_test,
                                  const ItmScorer& i2t, const ItmScorer& t2i) {
  const auto num_texts = static_cast<int64_t>(text_image.size());
  FNVLP_CHECK(
      num_images > 0 && num_texts > 0 && static_cast<int64_t>(sim.size()) == num_images * num_texts,
      "retrieval: similarity matrix is not " << num_images << " x " << num_texts);
  HitCounts txt, img;
  for (int64_t i = 0; i < num_images; ++i) {
    const auto cand = top_k(&sim[static_cast<size_t>(i * num_texts)], num_texts, k_test);
    txt.add(reranked_rank(cand, i2t(i, cand), num_texts,
                          [&](int64_t t) { return text_image[static_cast<size_t>(t)] == i; }));
  }
  std::vector<float> column(static_cast<size_t>(num_images));
  for (int64_t t = 0; t < num_texts; ++t) {
    copy_column(sim, num_images, num_texts, t, column);
    const int64_t gt = text_image[static_cast<size_t>(t)];
    const auto cand = top_k(column.data(), num_images, k_test);
    img.add(reranked_rank(cand, t2i(t, cand), num_images, [&](int64_t i) { return i == gt; }));
  }
  return metrics_from_counts(txt, img);
}

RetrievalMetrics retrieval_from_embeddings(const std::vector<float>& image_emb,
                                           const std::vector<float>& text_emb, int64_t dim,
                                           const std::vector<int64_t>& image_id) {
  const auto n = static_cast<int64_t>(image_id.size());
  FNVLP_CHECK(static_cast<int64_t>(image_emb.size()) == n * dim &&
                  static_cast<int64_t>(text_emb.size()) == n * dim,
              "retrieval: embeddings do not match " << n << " pairs of dimension " << dim);
  std::unordered_map<int64_t, int64_t> row_of;
  std::vector<int64_t> first_pair, text_image(static_cast<size_t>(n));
  for (int64_t p = 0; p < n; ++p) {
    auto [it, fresh] =
        row_of.emplace(image_id[static_cast<size_t>(p)], static_cast<int64_t>(first_pair.size()));
    if (fresh) first_pair.push_back(p);
    text_image[static_cast<size_t>(p)] = it->second;
  }
  const auto ni = static_cast<int64_t>(first_pair.size());
  std::vector<float> sim(static_cast<size_t>(ni * n));
  for (int64_t i = 0; i < ni; ++i) {
    const float* a = &image_emb[static_cast<size_t>(first_pair[static_cast<size_t>(i)] * dim)];
    for (int64_t t = 0; t < n; ++t) {
      const float* b = &text_emb[static_cast<size_t>(t * dim)];
      double s = 0;
      for (int64_t k = 0; k < dim; ++k) s += static_cast<double>(a[k]) * b[k];
      sim[static_cast<size_t>(i * n + t)] = static_cast<float>(s);
    }
  }
  return retrieval_metrics(sim, ni, text_image);
}

}  // namespace fnvlp::eval
