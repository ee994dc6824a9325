#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fnvlp/core/error.hpp"
#include "fnvlp/data/embeddings.hpp"

using namespace fnvlp::data;

TEST(Embeddings, RoundTripWithLambdas) {
  Embeddings e;
  e.epoch = 3;
  e.step = 120;
  e.dim = 4;
  for (int i = 0; i < 5; ++i) {
    for (int k = 0; k < 4; ++k) {
      e.image_emb.push_back(0.1f * i + k);
      e.text_emb.push_back(-0.1f * i - k);
    }
    e.pair_id.push_back(i);
    e.image_id.push_back(i / 2);
    e.label.push_back(i % 3);
    e.glofnd_lambda_image.push_back(0.5f + i);
    e.glofnd_lambda_text.push_back(0.25f + i);
  }
  const std::string path = ::testing::TempDir() + "/fnvlp_emb.h5";
  write_embeddings(path, e);
  const Embeddings r = read_embeddings(path);
  EXPECT_EQ(r.epoch, 3);
  EXPECT_EQ(r.step, 120);
  EXPECT_EQ(r.dim, 4);
  EXPECT_EQ(r.image_emb, e.image_emb);
  EXPECT_EQ(r.text_emb, e.text_emb);
  EXPECT_EQ(r.image_id, e.image_id);
  EXPECT_EQ(r.label, e.label);
  EXPECT_EQ(r.glofnd_lambda_text, e.glofnd_lambda_text);
}

TEST(Embeddings, RowsOutOfPairOrderAreRefused) {
  Embeddings e;
  e.dim = 1;
  e.image_emb = e.text_emb = {1, 2};
  e.pair_id = {1, 0};
  e.image_id = {0, 1};
  e.label = {-1, -1};
  EXPECT_THROW(write_embeddings(::testing::TempDir() + "/fnvlp_emb_bad.h5", e), fnvlp::Error);
}

// The strided read simstat samples its starting thresholds with: rows first, first + stride, ...
// across chunk boundaries (chunks of 4,096 rows), and a selection past the end refused by name.
TEST(Embeddings, StridedRowsAcrossChunks) {
  Embeddings e;
  e.dim = 3;
  const int64_t n = 9000;
  for (int64_t i = 0; i < n; ++i) {
    for (int k = 0; k < 3; ++k) {
      e.image_emb.push_back(static_cast<float>(i) + 0.25f * k);
      e.text_emb.push_back(-static_cast<float>(i) - 0.25f * k);
    }
    e.pair_id.push_back(i);
    e.image_id.push_back(i);
    e.label.push_back(-1);
  }
  const std::string path = ::testing::TempDir() + "/fnvlp_emb_strided.h5";
  write_embeddings(path, e);
  EmbeddingsFile f(path);
  const int64_t first = 7, stride = 1500, count = 6;  // rows 7 .. 7507
  std::vector<float> got(static_cast<size_t>((count + 1) * 3));
  f.read_emb(false, first, count, got.data(), stride);
  for (int64_t j = 0; j < count; ++j)
    for (int k = 0; k < 3; ++k)
      EXPECT_EQ(got[static_cast<size_t>(3 * j + k)],
                e.text_emb[static_cast<size_t>(3 * (first + j * stride) + k)]);
  try {
    f.read_emb(false, first, 7, got.data(), stride);  // row 9007 does not exist
    ADD_FAILURE() << "read past the end accepted";
  } catch (const fnvlp::Error& err) {
    EXPECT_NE(std::string(err.what()).find(path), std::string::npos) << err.what();
  }
}
