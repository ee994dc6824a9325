#include "fnvlp/eval/retrieval.hpp"

#include <algorithm>
#include <limits>
#include <unordered_map>

#include "fnvlp/core/error.hpp"

namespace fnvlp::eval {

nlohmann::json RetrievalMetrics::to_json(const std::string& p) const {
  return {
      {p + "txt_r1", txt_r1},           {p + "txt_r5", txt_r5},           {p + "txt_r10", txt_r10},
      {p + "img_r1", img_r1},           {p + "img_r5", img_r5},           {p + "img_r10", img_r10},
      {p + "txt_r_mean", txt_r_mean()}, {p + "img_r_mean", img_r_mean()}, {p + "r_mean", r_mean()}};
}

RetrievalMetrics retrieval_metrics(const std::vector<float>& sim, int64_t num_images,
                                   const std::vector<int64_t>& text_image) {
  const auto num_texts = static_cast<int64_t>(text_image.size());
  FNVLP_CHECK(
      num_images > 0 && num_texts > 0 && static_cast<int64_t>(sim.size()) == num_images * num_texts,
      "retrieval: similarity matrix is not " << num_images << " x " << num_texts);
  auto at = [&](int64_t i, int64_t t) { return sim[static_cast<size_t>(i * num_texts + t)]; };
  RetrievalMetrics m;
  // Text retrieval: rank of the best positive caption = number of negatives scoring >= it.
  for (int64_t i = 0; i < num_images; ++i) {
    float best = -std::numeric_limits<float>::infinity();
    bool any = false;
    for (int64_t t = 0; t < num_texts; ++t)
      if (text_image[static_cast<size_t>(t)] == i) best = std::max(best, at(i, t)), any = true;
    FNVLP_CHECK(any, "retrieval: image " << i << " has no caption");
    int64_t rank = 0;
    for (int64_t t = 0; t < num_texts; ++t)
      if (text_image[static_cast<size_t>(t)] != i && at(i, t) >= best) ++rank;
    m.txt_r1 += rank < 1;
    m.txt_r5 += rank < 5;
    m.txt_r10 += rank < 10;
  }
  // Image retrieval: rank of the caption's image among all images.
  for (int64_t t = 0; t < num_texts; ++t) {
    const int64_t gt = text_image[static_cast<size_t>(t)];
    FNVLP_CHECK(gt >= 0 && gt < num_images, "retrieval: caption " << t << " has no image");
    const float s = at(gt, t);
    int64_t rank = 0;
    for (int64_t i = 0; i < num_images; ++i)
      if (i != gt && at(i, t) >= s) ++rank;
    m.img_r1 += rank < 1;
    m.img_r5 += rank < 5;
    m.img_r10 += rank < 10;
  }
  const double ni = 100.0 / static_cast<double>(num_images),
               nt = 100.0 / static_cast<double>(num_texts);
  m.txt_r1 *= ni, m.txt_r5 *= ni, m.txt_r10 *= ni;
  m.img_r1 *= nt, m.img_r5 *= nt, m.img_r10 *= nt;
  return m;
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
