#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>

#include "dataset_fixture.hpp"
#include "fnvlp/data/h5.hpp"
#include "fnvlp/data/image.hpp"
#include "hostile_jpeg.hpp"

namespace fs = std::filesystem;
using namespace fnvlp;

namespace {

std::string tmpdir(const std::string& name) { return ::testing::TempDir() + "/fnvlp_" + name; }

std::vector<char> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void spit(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string verify_text(const std::string& dir) {
  std::string all;
  for (const auto& p : data::verify_dataset(dir).problems) all += p + "\n";
  return all;
}

TEST(ShardFormat, RoundTripWithSchemaAttributes) {
  const auto dir = tmpdir("roundtrip");
  const auto m = testutil::write_test_dataset(dir);
  data::ShardReader r(dir + "/shard-00001.h5");
  EXPECT_EQ(r.header().codec, data::ImageCodec::kRaw);
  EXPECT_EQ(r.header().image_size, testutil::kImageSize);
  EXPECT_EQ(r.header().max_len, testutil::kMaxLen);
  EXPECT_EQ(r.header().vocab_sha256, m.vocab_sha256);
  EXPECT_EQ(r.num_pairs(), 10);
  EXPECT_EQ(r.num_images(), 5);
  const auto p = r.read_pairs();
  ASSERT_EQ(p.size(), 10u);
  EXPECT_EQ(p.pair_id.front(), 10);
  EXPECT_EQ(p.image_id[3], (10 + 3) / 2);
  EXPECT_EQ(p.tokens[0], 101);
  EXPECT_EQ(p.lengths[9], 3);
  std::vector<uint8_t> img(testutil::kImageSize * testutil::kImageSize * 3);
  r.read_images(2, 1, img.data());
  EXPECT_EQ(img[5], testutil::pixel(5 + 2, 5));
}

TEST(ShardFormat, DatasetsAreChunkedWithFletcher32) {
  const auto dir = tmpdir("filters");
  testutil::write_test_dataset(dir);
  h5::Handle f = h5::open_file(dir + "/shard-00000.h5");
  for (const char* name :
       {"images", "pair_image", "tokens", "lengths", "pair_id", "image_id", "label"}) {
    h5::Handle ds = h5::open_dataset(f, name, "shard");
    h5::Handle dcpl(H5Dget_create_plist(ds), H5Pclose);
    EXPECT_EQ(H5Pget_layout(dcpl), H5D_CHUNKED) << name;
    bool fletcher = false;
    for (int i = 0; i < H5Pget_nfilters(dcpl); ++i) {
      unsigned flags = 0;
      size_t n = 0;
      fletcher |= H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &n, nullptr, 0, nullptr,
                                 nullptr) == H5Z_FILTER_FLETCHER32;
    }
    EXPECT_TRUE(fletcher) << name;
  }
}

TEST(ShardFormat, SameContentGivesSameBytes) {
  testutil::write_test_dataset(tmpdir("repro_a"));
  testutil::write_test_dataset(tmpdir("repro_b"));
  EXPECT_EQ(sha256_file(tmpdir("repro_a") + "/shard-00000.h5"),
            sha256_file(tmpdir("repro_b") + "/shard-00000.h5"));
}

// Issue 28: shards (and every other HDF5 file fnvlp writes) carry metadata checksums, so a
// flipped byte in an object header is refused by libhdf5 instead of decoded; the files of the
// older format (superblock v0, unchecksummed headers) still read.
TEST(ShardFormat, MetadataIsChecksummedAndOldFormatFilesStillRead) {
  const auto dir = tmpdir("metadata_checksums");
  testutil::write_test_dataset(dir);
  const auto path = dir + "/shard-00000.h5";
  auto bytes = slurp(path);
  ASSERT_GT(bytes.size(), 9u);
  EXPECT_EQ(bytes[8], 3) << "superblock version";  // v3: the 1.10 format, checksummed
  // Version-2 object headers (root group and each dataset), each with its own checksum.
  const std::string sig = "OHDR";
  std::vector<size_t> headers;
  for (auto it = bytes.begin();
       (it = std::search(it, bytes.end(), sig.begin(), sig.end())) != bytes.end(); ++it)
    headers.push_back(static_cast<size_t>(it - bytes.begin()));
  ASSERT_GE(headers.size(), 8u) << "checksummed object headers in " << path;

  // One flipped byte inside any object header's messages (past its signature, version and
  // flags): the checksum fails and reading the shard is an error, nothing decoded from it.
  const size_t image_bytes = testutil::kImageSize * testutil::kImageSize * 3;
  const auto read_all = [&] {
    data::ShardReader r(path);
    r.read_pairs();
    std::vector<uint8_t> img(static_cast<size_t>(r.num_images()) * image_bytes);
    r.read_images(0, r.num_images(), img.data());
  };
  for (const size_t at : headers) {
    SCOPED_TRACE("object header at byte " + std::to_string(at));
    bytes[at + 8] ^= 0x01;
    spit(path, bytes);
    EXPECT_THROW(read_all(), Error);
    bytes[at + 8] ^= 0x01;
  }
  spit(path, bytes);
  EXPECT_NO_THROW(read_all());

  // The older format, as shards written before this change: h5repack with the default bounds.
  const auto old_path = dir + "/old-format.h5";
  const std::string cmd = "h5repack --low=0 --high=2 '" + path + "' '" + old_path + "'";
  if (std::system(("command -v h5repack >/dev/null && " + cmd).c_str()) != 0)
    GTEST_SKIP() << "h5repack (Debian hdf5-tools) not found or failed: " << cmd;
  EXPECT_EQ(slurp(old_path)[8], 0) << "superblock version of the repacked file";
  data::ShardReader old_reader(old_path), reader(path);
  EXPECT_EQ(old_reader.header().vocab_sha256, reader.header().vocab_sha256);
  EXPECT_EQ(old_reader.read_pairs().tokens, reader.read_pairs().tokens);
  std::vector<uint8_t> x(image_bytes), y(image_bytes);
  old_reader.read_images(1, 1, x.data());
  reader.read_images(1, 1, y.data());
  EXPECT_EQ(x, y);
}

TEST(ShardFormat, WrongSchemaVersionIsRejectedByName) {
  const auto dir = tmpdir("schema");
  testutil::write_test_dataset(dir);
  const auto path = dir + "/shard-00000.h5";
  {
    h5::Handle f = h5::open_file(path, true);
    H5Adelete(f, "fnvlp_schema");
    h5::write_attr_int(f, "fnvlp_schema", 99);
  }
  try {
    data::ShardReader r(path);
    FAIL() << "schema 99 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("schema version 99"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

// A jpeg shard's image tables are checked before any byte range is read: offsets that do not
// ascend inside image_bytes (even ones whose difference would overflow) are refused by name.
TEST(ShardFormat, JpegImageTablesAreCheckedBeforeUse) {
  const auto dir = tmpdir("jpeg_tables");
  std::vector<std::vector<uint8_t>> jpegs;
  for (int i = 0; i < 3; ++i)
    jpegs.push_back(data::encode_jpeg(testutil::gradient_image(20 + i, 10), 90));
  testutil::write_jpeg_dataset(dir, jpegs, {{10, 20}, {10, 21}, {10, 22}}, 32);
  const auto path = dir + "/shard-00000.h5";
  {
    const data::ShardReader r(path);
    EXPECT_EQ(r.header().codec, data::ImageCodec::kJpeg);
    EXPECT_EQ(r.num_images(), 3);
    data::EncodedImages e;
    r.read_jpegs(1, 2, e);
    ASSERT_EQ(e.size(), 2u);
    EXPECT_EQ(std::vector<uint8_t>(e.data(1), e.data(1) + e.bytes_of(1)), jpegs[2]);
    EXPECT_EQ(e.width[0], 21);
  }
  const int64_t end = static_cast<int64_t>(jpegs[0].size() + jpegs[1].size() + jpegs[2].size());
  const std::vector<std::vector<int64_t>> bad = {
      {0, 500, 100, end},                                 // descends
      {0, 10, 20, end + 1},                               // past image_bytes
      {0, std::numeric_limits<int64_t>::min(), 20, end},  // would overflow hi - lo
      {1, 10, 20, end}};                                  // does not start at 0
  for (const auto& off : bad) {
    {
      h5::Handle f = h5::open_file(path, true);
      h5::Handle ds = h5::open_dataset(f, "image_offset", path);
      h5::write_rows(ds, H5T_NATIVE_INT64, off.data(), 0, off.size(), false, path);
    }
    try {
      data::ShardReader r(path);
      ADD_FAILURE() << "offsets " << off[1] << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path + ":/image_offset"), std::string::npos) << e.what();
    }
  }
}

TEST(Verify, AcceptsAValidDataset) {
  const auto dir = tmpdir("verify_ok");
  testutil::write_test_dataset(dir);
  const auto rep = data::verify_dataset(dir);
  EXPECT_TRUE(rep.ok()) << verify_text(dir);
  EXPECT_EQ(rep.pairs_checked, 20);
  EXPECT_EQ(rep.images_checked, 10);
}

TEST(Verify, FlippedBitInAnImageChunkNamesFileAndDataset) {
  const auto dir = tmpdir("verify_bitflip");
  testutil::write_test_dataset(dir);
  const auto path = dir + "/shard-00000.h5";
  auto bytes = slurp(path);
  // Find image 3's pixels (written raw: no compression) and flip one bit in the middle.
  std::vector<char> needle;
  for (size_t k = 0; k < 24; ++k) needle.push_back(static_cast<char>(testutil::pixel(3, k)));
  auto it = std::search(bytes.begin(), bytes.end(), needle.begin(), needle.end());
  ASSERT_NE(it, bytes.end());
  *(it + 10) ^= 0x10;
  spit(path, bytes);
  // --verify fails closed: the checksum mismatch is reported and the file is not opened.
  const auto text = verify_text(dir);
  EXPECT_NE(text.find("shard-00000.h5: sha256 "), std::string::npos) << text;
  EXPECT_NE(text.find("(not opened)"), std::string::npos) << text;
  EXPECT_EQ(text.find("shard-00000.h5:/images"), std::string::npos) << text;
  // The reader itself refuses the chunk (Fletcher32), not only the checksum of the whole file.
  data::ShardReader r(path);
  std::vector<uint8_t> img(2 * testutil::kImageSize * testutil::kImageSize * 3);
  EXPECT_THROW(r.read_images(2, 2, img.data()), Error);
  EXPECT_NO_THROW(r.read_images(0, 2, img.data()));  // other chunks still read
}

TEST(Verify, MissingShardManifestMismatchAndTruncation) {
  const auto dir = tmpdir("verify_faults");
  testutil::write_test_dataset(dir);
  fs::remove(dir + "/shard-00001.h5");
  EXPECT_NE(verify_text(dir).find("shard-00001.h5: missing"), std::string::npos)
      << verify_text(dir);

  testutil::write_test_dataset(dir);
  auto bytes = slurp(dir + "/shard-00000.h5");
  bytes.resize(bytes.size() / 2);
  spit(dir + "/shard-00000.h5", bytes);
  auto text = verify_text(dir);
  EXPECT_NE(text.find("shard-00000.h5: size"), std::string::npos) << text;

  // The manifest claims a pair count the shard does not hold.
  testutil::write_test_dataset(dir);
  auto m = data::Manifest::load(dir);
  m.shards[1].num_pairs = 11;
  m.num_pairs = 21;
  m.save(dir);
  text = verify_text(dir);
  EXPECT_NE(text.find("shard-00001.h5: num_pairs 10, manifest says 11"), std::string::npos) << text;

  fs::remove(dir + "/manifest.json");
  text = verify_text(dir);
  EXPECT_NE(text.find("manifest.json: missing"), std::string::npos) << text;
}

TEST(Verify, AFileThatFailsItsChecksumNeverReachesLibhdf5) {
  const auto dir = tmpdir("verify_closed");
  testutil::write_test_dataset(dir);
  // The right size, none of the structure: libhdf5 would fail on it (or worse, on a crafted
  // one); --verify must say only that the checksum differs.
  const auto path = dir + "/shard-00001.h5";
  std::vector<char> junk(fs::file_size(path), '\x5a');
  spit(path, junk);
  const auto rep = data::verify_dataset(dir);
  ASSERT_EQ(rep.problems.size(), 1u) << verify_text(dir);
  EXPECT_NE(rep.problems[0].find("shard-00001.h5: sha256 "), std::string::npos) << rep.problems[0];
  EXPECT_NE(rep.problems[0].find("(not opened)"), std::string::npos) << rep.problems[0];
  // A directory in the shard's place is refused without being opened either.
  fs::remove(path);
  fs::create_directory(path);
  EXPECT_NE(verify_text(dir).find("shard-00001.h5: not a regular file"), std::string::npos)
      << verify_text(dir);
}

TEST(Verify, ManifestShardFilesStayInTheShardDirectory) {
  const auto dir = tmpdir("verify_confined");
  testutil::write_test_dataset(dir);
  for (const std::string bad : {"../shard-00000.h5", "/etc/passwd", "sub/shard.h5", "..", ""}) {
    SCOPED_TRACE(bad);
    auto m = data::Manifest::load(dir);
    const std::string good = m.shards[0].file;
    m.shards[0].file = bad;
    m.save(dir);
    const auto text = verify_text(dir);
    EXPECT_NE(text.find("shard file '" + bad + "' is not a plain file name"), std::string::npos)
        << text;
    EXPECT_THROW(data::Manifest::load(dir), Error);
    m.shards[0].file = good;
    m.save(dir);
  }
  EXPECT_TRUE(data::verify_dataset(dir).ok()) << verify_text(dir);
}

// Issue 28: a manifest cannot make a reader allocate more than its shards hold.
TEST(Verify, ManifestCountsAreBoundedBeforeTheyAreUsed) {
  const auto dir = tmpdir("verify_bounds");
  testutil::write_test_dataset(dir);
  const auto good = data::Manifest::load(dir);
  const std::vector<std::pair<std::string, std::function<void(data::Manifest&)>>> cases = {
      {"num_images is 1000000000000000", [](auto& m) { m.num_images = 1'000'000'000'000'000; }},
      {"num_pairs is -1", [](auto& m) { m.num_pairs = -1; }},
      {"num_pairs is 1000000000000", [](auto& m) { m.shards[0].num_pairs = 1'000'000'000'000; }},
      {"num_images is 100000", [](auto& m) { m.shards[1].num_images = 100'000; }},
      {"image_size is 100000", [](auto& m) { m.image_size = 100'000; }},
      {"max_len is 1,", [](auto& m) { m.max_len = 1; }},
  };
  for (const auto& [expected, mutate] : cases) {
    SCOPED_TRACE(expected);
    auto m = good;
    mutate(m);
    m.save(dir);
    try {
      data::Manifest::load(dir);
      ADD_FAILURE() << "loaded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
  good.save(dir);
  EXPECT_TRUE(data::verify_dataset(dir).ok()) << verify_text(dir);
}

TEST(Verify, PairIdsThatDoNotTileAreReported) {
  const auto dir = tmpdir("verify_tiling");
  testutil::write_test_dataset(dir);
  auto m = data::Manifest::load(dir);
  m.shards[1].first_pair_id = 12;
  m.save(dir);
  const auto text = verify_text(dir);
  EXPECT_NE(text.find("expected 10"), std::string::npos) << text;
  EXPECT_NE(text.find("/pair_id is not the contiguous range"), std::string::npos) << text;
}

}  // namespace
