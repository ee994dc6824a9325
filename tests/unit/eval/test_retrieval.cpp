#include <gtest/gtest.h>

#include "fnvlp/core/error.hpp"
#include "fnvlp/eval/retrieval.hpp"

using fnvlp::eval::retrieval_metrics;

TEST(Retrieval, HandComputedRankingsWithSeveralCaptionsPerImage) {
  // 3 images; captions 0,1 -> image 0, 2 -> image 1, 3,4 -> image 2.
  const std::vector<int64_t> text_image = {0, 0, 1, 2, 2};
  const std::vector<float> sim = {
      // t0   t1   t2   t3   t4
      0.1f, 0.9f, 0.2f, 0.3f, 0.0f,  // image 0: best positive t1 ranks first -> txt hit @1
      0.5f, 0.4f, 0.3f, 0.6f, 0.7f,  // image 1: 4 negatives above its caption t2 -> hit @5 only
      0.9f, 0.1f, 0.2f, 0.8f, 0.0f,  // image 2: best positive t3 (0.8) behind t0 (0.9) -> rank 1
  };
  const auto m = retrieval_metrics(sim, 3, text_image);
  EXPECT_NEAR(m.txt_r1, 100.0 / 3, 1e-9);  // image 0 only
  EXPECT_NEAR(m.txt_r5, 100.0, 1e-9);      // image 1 at rank 4 (0-based), image 2 at rank 1
  // Image retrieval per caption: t0: image 0 scores 0.1, beaten by 0.5 and 0.9 -> rank 2.
  // t1: 0.9 best -> rank 0. t2: image 1 at 0.3 above 0.2 and 0.2 -> rank 0. t3: image 2 at 0.8
  // above 0.3 and 0.6 -> rank 0. t4: image 2 at 0.0, tied with image 0 (a tie counts against)
  // and below 0.7 -> rank 2.
  EXPECT_NEAR(m.img_r1, 60.0, 1e-9);
  EXPECT_NEAR(m.img_r5, 100.0, 1e-9);
  EXPECT_NEAR(m.r_mean(), (m.txt_r_mean() + m.img_r_mean()) / 2, 1e-12);
}

TEST(Retrieval, ConstantScoresAreNeverHits) {
  const std::vector<float> sim(4 * 4, 0.5f);
  const auto m = retrieval_metrics(sim, 4, {0, 1, 2, 3});
  EXPECT_EQ(m.txt_r1, 0.0);  // ties rank against the positive
  EXPECT_EQ(m.img_r1, 0.0);
}

TEST(Retrieval, FromEmbeddingsDeduplicatesImages) {
  // Two images, two captions each, embeddings aligned with their captions.
  const std::vector<float> img = {1, 0, 1, 0, 0, 1, 0, 1};
  const std::vector<float> txt = {1, 0, 0.9f, 0.1f, 0, 1, 0.2f, 0.8f};
  const auto m = fnvlp::eval::retrieval_from_embeddings(img, txt, 2, {7, 7, 9, 9});
  EXPECT_EQ(m.txt_r1, 100.0);
  EXPECT_EQ(m.img_r1, 100.0);
}

using fnvlp::eval::reranked_metrics;
using fnvlp::eval::reranked_rank;
using fnvlp::eval::top_k;

TEST(Retrieval, TopKBreaksTiesByLowerIndex) {
  const std::vector<float> s = {0.5f, 0.9f, 0.5f, 0.1f, 0.9f};
  EXPECT_EQ(top_k(s.data(), 5, 3), (std::vector<int64_t>{1, 4, 0}));
  EXPECT_EQ(top_k(s.data(), 5, 9), (std::vector<int64_t>{1, 4, 0, 2, 3}));  // k clamped to n
  EXPECT_THROW(top_k(s.data(), 5, 0), fnvlp::Error);
}

TEST(Retrieval, RerankedRankTiesAndAbsentPositives) {
  const std::vector<int64_t> cand = {3, 7, 1};
  const std::vector<float> itm = {2.0f, 2.0f, 1.0f};
  // Positive 7 ties with negative 3: the tie counts against it.
  EXPECT_EQ(reranked_rank(cand, itm, 10, [](int64_t j) { return j == 7; }), 1);
  EXPECT_EQ(reranked_rank(cand, itm, 10, [](int64_t j) { return j == 1; }), 2);
  // Several positives: the best-scoring one counts (3 at 2.0, only 7 ties it).
  EXPECT_EQ(reranked_rank(cand, itm, 10, [](int64_t j) { return j == 1 || j == 3; }), 1);
  // Positive outside the candidates: every negative of the gallery (9) ranks ahead.
  EXPECT_EQ(reranked_rank(cand, itm, 10, [](int64_t j) { return j == 9; }), 9);
  // Two positives outside, gallery of 10: 8 negatives ahead.
  EXPECT_EQ(reranked_rank(cand, itm, 10, [](int64_t j) { return j == 8 || j == 9; }), 8);
}

TEST(Retrieval, ItmRerankingHandComputed) {
  // Same gallery as above: captions 0,1 -> image 0, 2 -> image 1, 3,4 -> image 2; k_test = 2.
  const std::vector<int64_t> text_image = {0, 0, 1, 2, 2};
  const std::vector<float> sim = {
      0.1f, 0.9f, 0.2f, 0.3f, 0.0f,  //
      0.5f, 0.4f, 0.3f, 0.6f, 0.7f,  //
      0.9f, 0.1f, 0.2f, 0.8f, 0.0f,  //
  };
  const float itm[3][5] = {{5, 1, 0, 0, 0}, {0, 0, 3, 4, 0}, {0, 0, 0, 1, 2}};
  auto i2t = [&](int64_t i, const std::vector<int64_t>& c) {
    std::vector<float> s;
    for (int64_t t : c) s.push_back(itm[i][t]);
    return s;
  };
  auto t2i = [&](int64_t t, const std::vector<int64_t>& c) {
    std::vector<float> s;
    for (int64_t i : c) s.push_back(itm[i][t]);
    return s;
  };
  const auto m = reranked_metrics(sim, 3, text_image, 2, i2t, t2i);
  // Image queries (top 2 captions by ITC, then ITM):
  //  i0: {t1, t3}: positive t1 (1) above t3 (0) -> rank 0.
  //  i1: {t4, t3}: its caption t2 is not a candidate -> all 4 negatives ahead -> rank 4.
  //  i2: {t0, t3}: positive t3 (1) above t0 (0) -> rank 0 (ITC alone had rank 1).
  EXPECT_NEAR(m.txt_r1, 200.0 / 3, 1e-9);
  EXPECT_NEAR(m.txt_r5, 100.0, 1e-9);
  EXPECT_NEAR(m.txt_r10, 100.0, 1e-9);
  // Caption queries (top 2 images by ITC; ties by lower index):
  //  t0 (i0): {i2, i1}, i0 absent -> rank 2.     t1 (i0): {i0, i1}: 1 > 0 -> rank 0.
  //  t2 (i1): {i1, i0} (i0 and i2 tie at 0.2): 3 > 0 -> rank 0.
  //  t3 (i2): {i2, i1}: i1 scores 4 > 1 -> rank 1.  t4 (i2): {i1, i0}, i2 absent -> rank 2.
  EXPECT_NEAR(m.img_r1, 40.0, 1e-9);
  EXPECT_NEAR(m.img_r5, 100.0, 1e-9);
  EXPECT_NEAR(m.r_mean(), ((200.0 / 3 + 200) / 3 + (40.0 + 200) / 3) / 2, 1e-9);
}

TEST(Retrieval, RerankingByItcItselfOverTheWholeGalleryEqualsItc) {
  // 4 images x 9 captions of pseudo-random scores, with ties.
  const int64_t ni = 4, nt = 9;
  std::vector<int64_t> text_image = {0, 0, 1, 1, 1, 2, 3, 3, 2};
  std::vector<float> sim(static_cast<size_t>(ni * nt));
  uint64_t x = 12345;
  for (auto& s : sim) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    s = static_cast<float>((x >> 60) % 5) / 4.0f;  // 5 levels: many ties
  }
  auto i2t = [&](int64_t i, const std::vector<int64_t>& c) {
    std::vector<float> s;
    for (int64_t t : c) s.push_back(sim[static_cast<size_t>(i * nt + t)]);
    return s;
  };
  auto t2i = [&](int64_t t, const std::vector<int64_t>& c) {
    std::vector<float> s;
    for (int64_t i : c) s.push_back(sim[static_cast<size_t>(i * nt + t)]);
    return s;
  };
  const auto a = retrieval_metrics(sim, ni, text_image);
  const auto b = reranked_metrics(sim, ni, text_image, nt, i2t, t2i);
  EXPECT_EQ(a.to_json().dump(), b.to_json().dump());
}
