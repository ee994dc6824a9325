#include <gtest/gtest.h>

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
