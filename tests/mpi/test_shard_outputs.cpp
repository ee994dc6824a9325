// Checks the outputs of the shard.* ctest jobs (tests/mpi/CMakeLists.txt): the same input sharded
// at np 1, 2 and 4 and from three input formats gives the same pair_id -> content, and every bad
// input is rejected with its reason.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "fnvlp/core/sha256.hpp"
#include "fnvlp/data/h5.hpp"
#include "fnvlp/data/image.hpp"
#include "fnvlp/data/ingest.hpp"
#include "fnvlp/data/manifest.hpp"
#include "fnvlp/data/shard.hpp"
#include "fnvlp/data/tokenizer.hpp"

using namespace fnvlp;
using json = nlohmann::json;

namespace {

std::string fixture() {
  const char* dir = std::getenv("FNVLP_SHARD_FIXTURE");
  return dir ? dir : "";
}

struct PairContent {
  std::vector<int32_t> tokens;
  int64_t image_id = -1;
  int32_t label = 0;
  std::string image_sha;  // of the stored pixels
};

std::map<int64_t, PairContent> read_content(const std::string& dir) {
  const auto m = data::Manifest::load(dir);
  std::map<int64_t, PairContent> out;
  for (const auto& s : m.shards) {
    data::ShardReader r(dir + "/" + s.file);
    const auto p = r.read_pairs();
    const bool jpeg = m.image_codec == data::ImageCodec::kJpeg;
    const size_t image_bytes = jpeg ? 0 : static_cast<size_t>(m.image_size * m.image_size * 3);
    std::vector<uint8_t> pixels(image_bytes * static_cast<size_t>(r.num_images()));
    data::EncodedImages enc;
    if (jpeg)
      r.read_jpegs(0, r.num_images(), enc);
    else
      r.read_images(0, r.num_images(), pixels.data());
    for (size_t i = 0; i < p.size(); ++i) {
      PairContent c;
      const auto L = static_cast<size_t>(m.max_len);
      c.tokens.assign(
          p.tokens.begin() + static_cast<long>(i * L),
          p.tokens.begin() + static_cast<long>(i * L + static_cast<size_t>(p.lengths[i])));
      c.image_id = p.image_id[i];
      c.label = p.label[i];
      const auto row = static_cast<size_t>(p.pair_image[i]);
      c.image_sha = jpeg ? sha256_hex(enc.data(row), enc.bytes_of(row))
                         : sha256_hex(pixels.data() + row * image_bytes, image_bytes);
      EXPECT_TRUE(out.emplace(p.pair_id[i], c).second)
          << "pair_id " << p.pair_id[i] << " twice in " << dir;
    }
  }
  return out;
}

json expected() {
  std::ifstream in(fixture() + "/expected.json");
  return json::parse(in);
}

class ShardOutputs : public ::testing::Test {
 protected:
  void SetUp() override {
    if (fixture().empty()) GTEST_SKIP() << "FNVLP_SHARD_FIXTURE not set (run through ctest)";
  }
};

TEST_F(ShardOutputs, ContentIsIdenticalForOneTwoAndFourRanks) {
  const auto c1 = read_content(fixture() + "/out-albef-np1");
  const auto m1 = data::Manifest::load(fixture() + "/out-albef-np1");
  ASSERT_EQ(static_cast<int64_t>(c1.size()), expected()["pairs"].get<int64_t>());
  for (const char* other : {"/out-albef-np2", "/out-albef-np4"}) {
    const auto c = read_content(fixture() + other);
    ASSERT_EQ(c.size(), c1.size()) << other;
    for (const auto& [pid, a] : c1) {
      const auto& b = c.at(pid);
      EXPECT_EQ(a.tokens, b.tokens) << other << " pair " << pid;
      EXPECT_EQ(a.image_sha, b.image_sha) << other << " pair " << pid;
      EXPECT_EQ(a.image_id, b.image_id) << other << " pair " << pid;
    }
    // Shard files are reproducible byte for byte, whatever the rank count.
    const auto m = data::Manifest::load(fixture() + other);
    ASSERT_EQ(m.shards.size(), m1.shards.size());
    for (size_t s = 0; s < m.shards.size(); ++s) EXPECT_EQ(m.shards[s].sha256, m1.shards[s].sha256);
  }
}

TEST_F(ShardOutputs, IdsAreDenseAndEachImageIsStoredOnce) {
  const auto dir = fixture() + "/out-albef-np2";
  const auto m = data::Manifest::load(dir);
  const auto c = read_content(dir);
  EXPECT_EQ(m.num_images, expected()["images"].get<int64_t>());
  int64_t stored = 0;
  for (const auto& s : m.shards) stored += s.num_images;
  EXPECT_EQ(stored, m.num_images);  // captions of an image are never split across shards here
  std::set<int64_t> image_ids;
  std::map<int64_t, std::string> pixels_of;
  int64_t expect_pid = 0;
  for (const auto& [pid, p] : c) {
    EXPECT_EQ(pid, expect_pid++);
    image_ids.insert(p.image_id);
    auto [it, fresh] = pixels_of.emplace(p.image_id, p.image_sha);
    EXPECT_EQ(it->second, p.image_sha) << "image_id " << p.image_id << " has two different images";
  }
  EXPECT_EQ(static_cast<int64_t>(image_ids.size()), m.num_images);
  EXPECT_EQ(*image_ids.rbegin(), m.num_images - 1);
  // Flickr8k: five captions per image, so five pairs share each image_id.
  std::map<int64_t, int> per_image;
  for (const auto& [pid, p] : c) ++per_image[p.image_id];
  for (const auto& [iid, n] : per_image) EXPECT_EQ(n, 5) << "image_id " << iid;
}

TEST_F(ShardOutputs, EveryBadInputIsRejectedWithItsReason) {
  const auto dir = fixture() + "/out-albef-np4";
  const auto want = expected()["rejects"];
  std::ifstream in(dir + "/rejects.jsonl");
  std::map<std::string, std::string> got;
  for (std::string line; std::getline(in, line);) {
    const auto r = data::Reject::from_json_line(line);
    got[std::to_string(r.record)] = r.reason;
    EXPECT_FALSE(r.detail.empty());
    EXPECT_FALSE(r.source.empty());
  }
  ASSERT_EQ(got.size(), want.size());
  const std::set<std::string> image_reasons = {"missing_image", "empty_image", "truncated_image",
                                               "corrupt_image", "unsupported_image"};
  for (const auto& [record, reason] : want.items()) {
    ASSERT_TRUE(got.count(record)) << "record " << record << " was not rejected";
    if (reason == "image_error")
      EXPECT_TRUE(image_reasons.count(got[record])) << record << ": " << got[record];
    else
      EXPECT_EQ(got[record], reason.get<std::string>()) << "record " << record;
  }
  const auto m = data::Manifest::load(dir);
  EXPECT_EQ(m.rejects_total, static_cast<int64_t>(want.size()));
  EXPECT_EQ(m.records_total, expected()["records"].get<int64_t>());
}

TEST_F(ShardOutputs, ImagesOutsideTheRootAreReadOnlyWithTheFlag) {
  const auto want = expected()["rejects"];
  size_t outside = 0;
  for (const auto& [record, reason] : want.items()) outside += reason == "image_outside_root";
  ASSERT_EQ(outside, 3u);
  std::ifstream in(fixture() + "/out-allow/rejects.jsonl");
  size_t n = 0;
  for (std::string line; std::getline(in, line); ++n) {
    const auto r = data::Reject::from_json_line(line);
    EXPECT_NE(r.reason, data::image_reason::kOutsideRoot) << line;
    const std::string wanted = want.at(std::to_string(r.record));
    if (wanted != "image_error") EXPECT_EQ(wanted, r.reason) << line;
  }
  EXPECT_EQ(n, want.size() - outside);
  // Images are keyed by path: the three escapes (one real image outside) add three.
  EXPECT_EQ(data::Manifest::load(fixture() + "/out-allow").num_images,
            data::Manifest::load(fixture() + "/out-albef-np1").num_images + 3);
}

TEST_F(ShardOutputs, CocoAndFlickrTokenInputsGiveTheSameDataset) {
  const auto albef = read_content(fixture() + "/out-albef-np1");
  for (const char* other : {"/out-coco", "/out-token"}) {
    const auto c = read_content(fixture() + other);
    ASSERT_EQ(c.size(), albef.size()) << other;
    for (const auto& [pid, a] : albef) {
      EXPECT_EQ(a.tokens, c.at(pid).tokens) << other << " pair " << pid;
      EXPECT_EQ(a.image_sha, c.at(pid).image_sha) << other << " pair " << pid;
      EXPECT_EQ(a.image_id, c.at(pid).image_id) << other << " pair " << pid;
    }
  }
}

TEST_F(ShardOutputs, TokensAndPixelsMatchTheSource) {
  // Pair 0 is the first good record: its tokens are the tokenizer's and its pixels the decoder's.
  const auto tok = data::WordPieceTokenizer::from_file(std::string(FNVLP_SHARED_DIR) +
                                                       "/data/vocab/bert-base-uncased-vocab.txt");
  // captions.json holds deliberately broken bytes; coco.json lists the same good records.
  std::ifstream in(fixture() + "/coco.json");
  const auto coco = json::parse(in);
  const auto c = read_content(fixture() + "/out-albef-np2");
  const auto& first = coco["annotations"].at(0);
  std::string file;
  for (const auto& im : coco["images"])
    if (im["id"] == first["image_id"]) file = im["file_name"].get<std::string>();
  EXPECT_EQ(c.at(0).tokens, tok.encode(first["caption"].get<std::string>(), 30));
  // The manifest records the vocabulary's special tokens for the trainer's MLM masking.
  const data::SpecialTokens st = data::Manifest::load(fixture() + "/out-albef-np2").special_tokens;
  EXPECT_EQ(std::vector<int64_t>({st.pad, st.cls, st.sep, st.mask}),
            std::vector<int64_t>({tok.pad_id(), tok.cls_id(), tok.sep_id(), tok.mask_id()}));
  const auto img = data::resize_center_crop(data::read_image_file(fixture() + "/" + file), 96);
  EXPECT_EQ(c.at(0).image_sha, sha256_hex(img.rgb.data(), img.rgb.size()));
}

// --image-codec jpeg stores the same pairs as raw, rejects the same inputs, gives the same bytes
// on one and two ranks, and each image is the source scaled to --max-side at its aspect ratio.
TEST_F(ShardOutputs, JpegShardsHoldTheSamePairsAndRejectsAsRaw) {
  const auto raw = read_content(fixture() + "/out-albef-np1");
  const auto jpeg = read_content(fixture() + "/out-jpeg-np1");
  ASSERT_EQ(jpeg.size(), raw.size());
  for (const auto& [pid, a] : raw) {
    EXPECT_EQ(a.tokens, jpeg.at(pid).tokens) << pid;
    EXPECT_EQ(a.image_id, jpeg.at(pid).image_id) << pid;
  }
  const auto m1 = data::Manifest::load(fixture() + "/out-jpeg-np1");
  const auto m2 = data::Manifest::load(fixture() + "/out-jpeg-np2");
  EXPECT_EQ(m1.image_codec, data::ImageCodec::kJpeg);
  EXPECT_EQ(m1.image_size, 100);
  EXPECT_EQ(m1.source["jpeg_quality"], 90);
  ASSERT_EQ(m1.shards.size(), m2.shards.size());
  for (size_t s = 0; s < m1.shards.size(); ++s) EXPECT_EQ(m1.shards[s].sha256, m2.shards[s].sha256);
  auto rejects = [](const std::string& dir) {
    std::ifstream in(dir + "/rejects.jsonl");
    std::map<int64_t, std::string> got;
    for (std::string line; std::getline(in, line);) {
      const auto r = data::Reject::from_json_line(line);
      got[r.record] = r.reason;
    }
    return got;
  };
  EXPECT_EQ(rejects(fixture() + "/out-jpeg-np2"), rejects(fixture() + "/out-albef-np1"));
  // A jpeg shard is schema 2; its stored JPEGs are smaller than the raw pixels of the same set.
  int64_t jpeg_bytes = 0, raw_bytes = 0;
  for (const auto& s : m1.shards) jpeg_bytes += s.bytes;
  for (const auto& s : data::Manifest::load(fixture() + "/out-albef-np1").shards)
    raw_bytes += s.bytes;
  EXPECT_LT(jpeg_bytes, raw_bytes);
  h5::Handle f = h5::open_file(fixture() + "/out-jpeg-np1/" + m1.shards[0].file);
  EXPECT_EQ(h5::read_attr_int(f, "fnvlp_schema", "shard"), data::kShardSchemaJpeg);
  EXPECT_EQ(h5::read_attr_string(f, "image_codec", "shard"), "jpeg");
}

TEST_F(ShardOutputs, JpegImagesAreTheSourceAtTheMaximumSide) {
  const std::string dir = fixture() + "/out-jpeg-np2";
  const auto m = data::Manifest::load(dir);
  std::ifstream in(fixture() + "/coco.json");
  const auto coco = json::parse(in);
  std::map<int64_t, std::string> file_of;  // coco image id -> file
  for (const auto& im : coco["images"]) file_of[im["id"]] = im["file_name"];
  // Pair order is the record order of the good records, as in coco.json's annotations.
  std::vector<std::string> pair_file;
  for (const auto& a : coco["annotations"]) pair_file.push_back(file_of.at(a["image_id"]));
  int non_square = 0;
  for (const auto& s : m.shards) {
    data::ShardReader r(dir + "/" + s.file);
    const auto p = r.read_pairs();
    data::EncodedImages enc;
    r.read_jpegs(0, r.num_images(), enc);
    for (size_t i = 0; i < p.size(); ++i) {
      const auto row = static_cast<size_t>(p.pair_image[i]);
      const std::string src = pair_file.at(static_cast<size_t>(p.pair_id[i]));
      const data::Image want =
          data::resize_max_side(data::read_image_file(fixture() + "/" + src), 100);
      ASSERT_EQ(enc.width[row], want.width) << src;
      ASSERT_EQ(enc.height[row], want.height) << src;
      non_square += want.width != want.height;
      const data::Image got = data::decode_stored_jpeg(enc.data(row), enc.bytes_of(row),
                                                       enc.width[row], enc.height[row], src);
      double se = 0;
      for (size_t k = 0; k < got.rgb.size(); ++k) {
        const double d = static_cast<double>(got.rgb[k]) - want.rgb[k];
        se += d * d;
      }
      const double psnr =
          10 * std::log10(255.0 * 255.0 / (se / static_cast<double>(got.rgb.size()) + 1e-12));
      EXPECT_GT(psnr, 30.0) << src << " (quality 90)";
    }
  }
  EXPECT_GT(non_square, 0) << "the fixture's non-square images";
}

}  // namespace
