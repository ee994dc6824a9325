#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
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

// Issue 27: a training rank opens an export without its whole image_id and label columns
// (Columns::kStreamed) and reads the rows it asks for; both modes give the same rows.
TEST(Embeddings, StreamedColumnsAreReadByRowsNotWhole) {
  Embeddings e;
  e.dim = 2;
  const int64_t n = 5000;
  for (int64_t i = 0; i < n; ++i) {
    e.image_emb.insert(e.image_emb.end(), {1.0f, static_cast<float>(i)});
    e.text_emb.insert(e.text_emb.end(), {static_cast<float>(i), 1.0f});
    e.pair_id.push_back(i);
    e.image_id.push_back(i / 3);
    e.label.push_back(static_cast<int32_t>(i % 11) - 1);
  }
  const std::string path = ::testing::TempDir() + "/fnvlp_emb_columns.h5";
  write_embeddings(path, e);
  const EmbeddingsFile whole(path), streamed(path, EmbeddingsFile::Columns::kStreamed);
  EXPECT_EQ(whole.image_id(), e.image_id);
  EXPECT_TRUE(streamed.image_id().empty());
  EXPECT_TRUE(streamed.label().empty());
  for (const auto* f : {&whole, &streamed}) {
    std::vector<int64_t> id(700);
    std::vector<int32_t> label(700);
    f->read_columns(4100, 700, id.data(), label.data());
    for (size_t i = 0; i < id.size(); ++i) {
      EXPECT_EQ(id[i], e.image_id[4100 + i]);
      EXPECT_EQ(label[i], e.label[4100 + i]);
    }
    EXPECT_THROW(f->read_columns(4500, 501, id.data(), label.data()), fnvlp::Error);
  }
}

namespace {

// Rows [first, first + n) of a fixed export of 9,000 pairs (chunks of 4,096 rows) with lambdas.
Embeddings rows_of(int64_t first, int64_t n) {
  Embeddings e;
  e.epoch = 2;
  e.step = 77;
  e.dim = 3;
  e.first = first;
  for (int64_t i = first; i < first + n; ++i) {
    for (int k = 0; k < 3; ++k) {
      e.image_emb.push_back(static_cast<float>(i) + 0.25f * k);
      e.text_emb.push_back(-static_cast<float>(i) - 0.5f * k);
    }
    e.pair_id.push_back(i);
    e.image_id.push_back(i / 5);
    e.label.push_back(static_cast<int32_t>(i % 7));
    e.glofnd_lambda_image.push_back(0.001f * static_cast<float>(i));
    e.glofnd_lambda_text.push_back(-0.001f * static_cast<float>(i));
  }
  return e;
}

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

// Issue 27: each rank writes its own rows of the export; the file must not depend on how the rows
// were split (chunk boundaries at 4,096 fall inside blocks) or in which order they were written.
TEST(Embeddings, RowsWrittenInBlocksGiveTheBytesOfOneWriter) {
  const int64_t n = 9000;
  const std::string dir = ::testing::TempDir();
  write_embeddings(dir + "/fnvlp_emb_whole.h5", rows_of(0, n));
  const std::string whole = bytes_of(dir + "/fnvlp_emb_whole.h5");
  ASSERT_FALSE(whole.empty());
  const std::vector<std::vector<int64_t>> splits = {{0, 2250, 4500, 6750, n}, {0, 4097, n}};
  for (const auto& cuts : splits) {
    const std::string path = dir + "/fnvlp_emb_blocks.h5";
    create_embeddings(path, n, 3, true, 2, 77);
    for (size_t b = cuts.size() - 1; b-- > 0;)  // last block first
      write_embedding_rows(path, rows_of(cuts[b], cuts[b + 1] - cuts[b]));
    EXPECT_TRUE(bytes_of(path) == whole) << cuts.size() - 1 << " blocks";
  }
}

TEST(Embeddings, ReadsOneBlockOfRows) {
  const std::string path = ::testing::TempDir() + "/fnvlp_emb_rows.h5";
  write_embeddings(path, rows_of(0, 9000));
  int64_t total = 0;
  const Embeddings r = read_embedding_rows(path, 4000, 200, &total);
  const Embeddings want = rows_of(4000, 200);
  EXPECT_EQ(total, 9000);
  EXPECT_EQ(r.first, 4000);
  EXPECT_EQ(r.dim, 3);
  EXPECT_EQ(r.epoch, 2);
  EXPECT_EQ(r.pair_id, want.pair_id);
  EXPECT_EQ(r.image_emb, want.image_emb);
  EXPECT_EQ(r.text_emb, want.text_emb);
  EXPECT_EQ(r.image_id, want.image_id);
  EXPECT_EQ(r.label, want.label);
  EXPECT_EQ(r.glofnd_lambda_image, want.glofnd_lambda_image);
  EXPECT_EQ(r.glofnd_lambda_text, want.glofnd_lambda_text);
  EXPECT_THROW(read_embedding_rows(path, 8900, 101), fnvlp::Error);
}

TEST(Embeddings, RowsThatDoNotFitTheFileAreRefusedByName) {
  const std::string path = ::testing::TempDir() + "/fnvlp_emb_fit.h5";
  create_embeddings(path, 100, 3, true, 0, 0);
  const auto refused = [&](const Embeddings& e, const std::string& why) {
    try {
      write_embedding_rows(path, e);
      ADD_FAILURE() << why << ": accepted";
    } catch (const fnvlp::Error& err) {
      EXPECT_NE(std::string(err.what()).find(path), std::string::npos) << err.what();
    }
  };
  refused(rows_of(90, 20), "rows past the end");
  Embeddings no_lambda = rows_of(0, 10);
  no_lambda.glofnd_lambda_image.clear();
  no_lambda.glofnd_lambda_text.clear();
  refused(no_lambda, "a block without the file's thresholds");
  Embeddings wide = rows_of(0, 10);
  wide.dim = 1;
  wide.image_emb.resize(10);
  wide.text_emb.resize(10);
  refused(wide, "another width");
}
