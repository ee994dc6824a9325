#pragma once
// A small, valid sharded dataset written straight through ShardWriter + Manifest (no image
// decoding), for tests of the reader and of --verify.
#include <filesystem>
#include <string>

#include "fnvlp/core/sha256.hpp"
#include "fnvlp/data/manifest.hpp"
#include "fnvlp/data/shard.hpp"

namespace fnvlp::testutil {

inline constexpr int kImageSize = 8;
inline constexpr int kMaxLen = 6;

// Pixel value of image `image_id`, row-major offset `k`: recognisable bytes for corruption tests.
// A hash, so that no run of one image's bytes appears anywhere else in the file.
inline uint8_t pixel(int64_t image_id, size_t k) {
  uint64_t z = static_cast<uint64_t>(image_id) * 0x9E3779B97F4A7C15ull + k + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<uint8_t>((z ^ (z >> 31)) & 0xFF);
}

// An empty DIR and a manifest with the fields every test dataset shares.
inline data::Manifest fresh_test_manifest(const std::string& dir) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  data::Manifest m;
  m.created_by = "test";
  m.created_at = "2026-01-01T00:00:00Z";
  m.max_len = kMaxLen;
  return m;
}

// Two shards of `pairs_per_shard` pairs; every two consecutive pairs share an image. Manifest and
// shards name `vocab` (by sha256) where given, a placeholder otherwise.
inline data::Manifest write_test_dataset(const std::string& dir, int64_t pairs_per_shard = 10,
                                         const std::string& vocab = "") {
  namespace fs = std::filesystem;
  data::Manifest m = fresh_test_manifest(dir);
  m.image_size = kImageSize;
  m.vocab_path = vocab.empty() ? "vocab.txt" : vocab;
  m.vocab_sha256 = vocab.empty() ? std::string(64, 'a') : sha256_file(vocab);
  m.vocab_size = 1000;
  int64_t pair = 0;
  for (int s = 0; s < 2; ++s) {
    const std::string name = "shard-0000" + std::to_string(s) + ".h5";
    const std::string path = (fs::path(dir) / name).string();
    data::ShardHeader h;
    h.created_by = "test";
    h.image_size = kImageSize;
    h.max_len = kMaxLen;
    h.vocab_sha256 = m.vocab_sha256;
    data::ShardWriter w(path, h, 2);
    const int64_t n_images = pairs_per_shard / 2;
    const size_t bytes = kImageSize * kImageSize * 3;
    std::vector<uint8_t> rgb(static_cast<size_t>(n_images) * bytes);
    const int64_t first_image = pair / 2;
    for (int64_t i = 0; i < n_images; ++i)
      for (size_t k = 0; k < bytes; ++k)
        rgb[static_cast<size_t>(i) * bytes + k] = pixel(first_image + i, k);
    w.append_images(rgb.data(), n_images);
    data::PairColumns c;
    std::vector<int64_t> pid, iid;
    for (int64_t i = 0; i < pairs_per_shard; ++i) {
      c.pair_image.push_back(i / 2);
      const std::vector<int32_t> t = {101, static_cast<int32_t>(2000 % 1000 + i + 1), 102, 0, 0, 0};
      c.tokens.insert(c.tokens.end(), t.begin(), t.end());
      c.lengths.push_back(3);
      c.label.push_back(static_cast<int32_t>(i % 3));
      pid.push_back(pair + i);
      iid.push_back((pair + i) / 2);
    }
    w.write_pairs(c);
    w.write_global_ids(pid, iid);
    w.close();
    m.shards.push_back({name, pair, pairs_per_shard, n_images,
                        static_cast<int64_t>(fs::file_size(path)), sha256_file(path)});
    pair += pairs_per_shard;
  }
  m.num_pairs = pair;
  m.num_images = pair / 2;
  m.records_total = pair;
  m.source = {{"input", "test"}};
  m.save(dir);
  return m;
}

// One jpeg shard (schema 2) holding `jpegs[i]` as image i, recorded as `hw[i]` = {height, width},
// one pair per image (pair i -> image i, label i % 3). The bytes are stored as given, hostile
// ones included: what a reader must do with them is the test.
inline data::Manifest write_jpeg_dataset(const std::string& dir,
                                         const std::vector<std::vector<uint8_t>>& jpegs,
                                         const std::vector<std::pair<int, int>>& hw, int max_side) {
  namespace fs = std::filesystem;
  data::Manifest m = fresh_test_manifest(dir);
  m.image_codec = data::ImageCodec::kJpeg;
  m.image_size = max_side;
  m.vocab_path = "vocab.txt";
  m.vocab_sha256 = std::string(64, 'a');
  m.vocab_size = 1000;
  const std::string name = "shard-00000.h5";
  const std::string path = (fs::path(dir) / name).string();
  data::ShardHeader h;
  h.codec = data::ImageCodec::kJpeg;
  h.created_by = "test";
  h.image_size = max_side;
  h.max_len = kMaxLen;
  h.vocab_sha256 = m.vocab_sha256;
  data::ShardWriter w(path, h, 1);
  data::PairColumns c;
  std::vector<int64_t> ids;
  for (size_t i = 0; i < jpegs.size(); ++i) {
    w.append_jpeg(jpegs[i].data(), jpegs[i].size(), hw[i].first, hw[i].second);
    c.pair_image.push_back(static_cast<int64_t>(i));
    const std::vector<int32_t> t = {101, static_cast<int32_t>(i + 1), 102, 0, 0, 0};
    c.tokens.insert(c.tokens.end(), t.begin(), t.end());
    c.lengths.push_back(3);
    c.label.push_back(static_cast<int32_t>(i % 3));
    ids.push_back(static_cast<int64_t>(i));
  }
  w.write_pairs(c);
  w.write_global_ids(ids, ids);
  w.close();
  const auto n = static_cast<int64_t>(jpegs.size());
  m.shards.push_back({name, 0, n, n, static_cast<int64_t>(fs::file_size(path)), sha256_file(path)});
  m.num_pairs = n;
  m.num_images = n;
  m.records_total = n;
  m.source = {{"input", "test"}};
  m.save(dir);
  return m;
}

}  // namespace fnvlp::testutil
