// The reader's check of each shard dataset's stored form (open_shard_dataset ->
// h5::check_stored_layout), run before any H5Dread: libhdf5 1.10.8 reads past its own chunk buffer
// when a stored chunk is smaller than the dataset's datatype and chunk shape imply (found by
// fuzz_shard: a `lengths` datatype mutated from 2 to 66 bytes). Each bad dataset is built here with
// the HDF5 C API in place of the writer's; the error must name the file, the dataset and why.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "dataset_fixture.hpp"
#include "fnvlp/data/dataset.hpp"
#include "fnvlp/data/h5.hpp"

namespace fs = std::filesystem;
using namespace fnvlp;

namespace {

constexpr hsize_t kPairs = 10;  // per shard of testutil::write_test_dataset
constexpr hsize_t kImages = 5;

std::string tmpdir(const std::string& name) {
  return ::testing::TempDir() + "/fnvlp_guard_" + name;
}

// Creates dataset `name` (chunked when `chunk` is not empty; first dimension unlimited when
// `extendible`, as the writer's /images), without writing it.
h5::Handle create(hid_t file, const char* name, hid_t type, const std::vector<hsize_t>& dims,
                  const std::vector<hsize_t>& chunk, bool fletcher32, bool extendible = false) {
  std::vector<hsize_t> maxdims = dims;
  if (extendible) maxdims[0] = H5S_UNLIMITED;
  h5::Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), maxdims.data()),
                   H5Sclose);
  h5::Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (!chunk.empty()) H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
  if (fletcher32) H5Pset_fletcher32(dcpl);
  h5::Handle ds(H5Dcreate2(file, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT), H5Dclose);
  EXPECT_GE(ds.id(), 0) << name;
  return ds;
}

// Fills a dataset through HDF5 (type conversion, filters): a consistent file, only its form is
// not the schema's.
template <typename T>
void fill(hid_t ds, const std::vector<T>& values) {
  ASSERT_GE(H5Dwrite(ds, h5::native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
}

// Stores raw chunk bytes as they are (H5Dwrite_chunk bypasses the filters and any size check).
void write_raw_chunk(hid_t ds, const std::vector<hsize_t>& offset, const std::vector<uint8_t>& raw,
                     uint32_t filter_mask) {
  ASSERT_GE(H5Dwrite_chunk(ds, H5P_DEFAULT, filter_mask, offset.data(), raw.size(), raw.data()), 0);
}

struct BadCase {
  const char* what;
  const char* dataset;                    // replaced in shard-00001.h5
  std::function<void(hid_t file)> build;  // creates the replacement
  const char* reason;                     // expected in the error
};

std::vector<BadCase> bad_cases() {
  const std::vector<int16_t> lengths(kPairs, 3);
  return {
      {"datatype size changed as in the fuzz finding (2 -> 66 bytes, 16-bit precision)", "lengths",
       [](hid_t f) {
         h5::Handle t(H5Tcopy(H5T_STD_I16LE), H5Tclose);
         H5Tset_size(t, 66);
         H5Tset_precision(t, 16);
         // Stored consistently (10 x 66 bytes + Fletcher32): the datatype alone is refused.
         h5::Handle ds = create(f, "lengths", t, {kPairs}, {kPairs}, true);
         write_raw_chunk(ds, {0}, std::vector<uint8_t>(kPairs * 66 + 4, 0), 0);
       },
       "stored datatype is signed integer of 66 bytes, little-endian, 16 bits of precision"},
      {"int32 where the schema has int16", "lengths",
       [=](hid_t f) {
         fill(create(f, "lengths", H5T_STD_I32LE, {kPairs}, {kPairs}, true), lengths);
       },
       "stored datatype is signed integer of 4 bytes"},
      {"float where the schema has int32", "label",
       [](hid_t f) {
         fill(create(f, "label", H5T_IEEE_F32LE, {kPairs}, {kPairs}, true),
              std::vector<int32_t>(kPairs, 1));
       },
       "stored datatype is float of 4 bytes"},
      {"stored chunk smaller than its shape and datatype (what libhdf5 overflows on)", "lengths",
       [](hid_t f) {
         h5::Handle ds = create(f, "lengths", H5T_STD_I16LE, {kPairs}, {kPairs}, true);
         write_raw_chunk(ds, {0}, std::vector<uint8_t>(14, 0), 0);
       },
       "chunk holds 14 bytes, its shape and datatype with Fletcher32 make 24"},
      {"chunk stored with Fletcher32 skipped (filter mask 1, no checksum)", "lengths",
       [](hid_t f) {
         h5::Handle ds = create(f, "lengths", H5T_STD_I16LE, {kPairs}, {kPairs}, true);
         write_raw_chunk(ds, {0}, std::vector<uint8_t>(20, 0), 1);
       },
       "chunk holds 20 bytes, its shape and datatype with Fletcher32 make 24"},
      {"chunk never written", "pair_id",
       [](hid_t f) { create(f, "pair_id", H5T_STD_I64LE, {kPairs}, {4}, true); },
       "chunk not stored (chunk at row 0)"},
      {"contiguous layout", "lengths",
       [=](hid_t f) { fill(create(f, "lengths", H5T_STD_I16LE, {kPairs}, {}, false), lengths); },
       "layout is not chunked"},
      {"no Fletcher32", "lengths",
       [=](hid_t f) {
         fill(create(f, "lengths", H5T_STD_I16LE, {kPairs}, {kPairs}, false), lengths);
       },
       "filter pipeline is not exactly Fletcher32"},
      {"chunk that splits a token row", "tokens",
       [](hid_t f) {
         const hsize_t L = testutil::kMaxLen;
         fill(create(f, "tokens", H5T_STD_I32LE, {kPairs, L}, {kPairs, 3}, true),
              std::vector<int32_t>(kPairs * L, 0));
       },
       "chunk dimension 1 is 3, not the whole row (6)"},
      {"more rows per chunk than the writer uses", "images",
       [](hid_t f) {
         const hsize_t s = testutil::kImageSize;
         fill(create(f, "images", H5T_STD_U8LE, {kImages, s, s, 3}, {65, s, s, 3}, true, true),
              std::vector<uint8_t>(kImages * s * s * 3, 7));
       },
       "chunk of 65 rows, the schema allows 1..64"},
      {"row count other than num_pairs", "image_id",
       [](hid_t f) {
         fill(create(f, "image_id", H5T_STD_I64LE, {kPairs - 1}, {kPairs - 1}, true),
              std::vector<int64_t>(kPairs - 1, 0));
       },
       "9 rows, expected 10"},
      {"two-dimensional column", "lengths",
       [](hid_t f) {
         fill(create(f, "lengths", H5T_STD_I16LE, {kPairs, 1}, {kPairs, 1}, true),
              std::vector<int16_t>(kPairs, 3));
       },
       "rank 2, the schema has 1"},
  };
}

// A valid two-shard dataset whose shard-00001.h5 has `c.dataset` replaced; the manifest is updated
// to the new file's size and sha256, so only the dataset's form is wrong.
std::string build_bad(const std::string& name, const BadCase& c) {
  const std::string dir = tmpdir(name);
  testutil::write_test_dataset(dir);
  const std::string path = dir + "/shard-00001.h5";
  {
    h5::Handle f = h5::open_file(path, /*writable=*/true);
    EXPECT_GE(H5Ldelete(f, c.dataset, H5P_DEFAULT), 0);
    c.build(f);
  }
  auto m = data::Manifest::load(dir);
  m.shards[1].bytes = static_cast<int64_t>(fs::file_size(path));
  m.shards[1].sha256 = sha256_file(path);
  m.save(dir);
  return dir;
}

void expect_named(const std::string& what, const std::string& file, const std::string& dataset,
                  const std::string& reason) {
  EXPECT_NE(what.find(file + ":/" + dataset), std::string::npos) << what;
  EXPECT_NE(what.find(reason), std::string::npos) << what;
}

TEST(ShardGuard, ReaderRefusesDatasetsNotStoredAsTheWriterStoresThem) {
  int k = 0;
  for (const BadCase& c : bad_cases()) {
    SCOPED_TRACE(c.what);
    const std::string dir = build_bad("reader" + std::to_string(k++), c);
    const std::string path = dir + "/shard-00001.h5";
    try {
      data::ShardReader r(path);  // checks /images
      const auto p = r.read_pairs();
      std::vector<uint8_t> img(testutil::kImageSize * testutil::kImageSize * 3);
      for (int64_t row = 0; row < r.num_images(); ++row) r.read_images(row, 1, img.data());
      ADD_FAILURE() << "accepted: " << c.what;
    } catch (const Error& e) {
      expect_named(e.what(), path, c.dataset, c.reason);
    }
    // fnvlp-shard --verify reports it too; the other shard stays clean.
    std::string problems;
    for (const auto& p : data::verify_dataset(dir).problems) problems += p + "\n";
    expect_named(problems, path, c.dataset, c.reason);
    EXPECT_EQ(problems.find("shard-00000.h5"), std::string::npos) << problems;
  }
}

TEST(ShardGuard, TrainingReaderRefusesThemBeforeReading) {
  int k = 0;
  for (const BadCase& c : bad_cases()) {
    SCOPED_TRACE(c.what);
    const std::string dir = build_bad("dataset" + std::to_string(k++), c);
    const std::string path = dir + "/shard-00001.h5";
    try {
      data::PairDataset ds(dir);  // checks every shard's /images at open
      EXPECT_NO_THROW(ds.read({0, 1, 2}));
      ds.read({12, 13});  // shard 1: its columns, then its images
      ADD_FAILURE() << "accepted: " << c.what;
    } catch (const Error& e) {
      expect_named(e.what(), path, c.dataset, c.reason);
    }
  }
}

TEST(ShardGuard, WriterOutputPassesWithManyAndEdgeChunks) {
  // 70,000 pairs: 2 chunks of the 1-D columns (65,536 + an edge chunk), 18 of tokens (4,096 rows);
  // 11 images in chunks of 4 (edge chunk of 3). HDF5 stores edge chunks whole: the check's
  // stored-size rule must hold for them.
  const std::string dir = tmpdir("many_chunks");
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = dir + "/shard-00000.h5";
  data::ShardHeader h;
  h.created_by = "test";
  h.image_size = testutil::kImageSize;
  h.max_len = testutil::kMaxLen;
  h.vocab_sha256 = std::string(64, 'a');
  const int64_t n_images = 11, n = 70000;
  const size_t image_bytes = testutil::kImageSize * testutil::kImageSize * 3;
  {
    data::ShardWriter w(path, h, 4);
    std::vector<uint8_t> rgb(static_cast<size_t>(n_images) * image_bytes);
    for (size_t k = 0; k < rgb.size(); ++k) rgb[k] = testutil::pixel(0, k);
    w.append_images(rgb.data(), n_images);
    data::PairColumns c;
    std::vector<int64_t> pid(n), iid(n);
    for (int64_t i = 0; i < n; ++i) {
      c.pair_image.push_back(i % n_images);
      for (int64_t t = 0; t < testutil::kMaxLen; ++t) c.tokens.push_back(static_cast<int32_t>(t));
      c.lengths.push_back(2);
      c.label.push_back(-1);
      pid[static_cast<size_t>(i)] = i;
      iid[static_cast<size_t>(i)] = i % n_images;
    }
    w.write_pairs(c);
    w.write_global_ids(pid, iid);
    w.close();
  }
  data::ShardReader r(path);
  const auto p = r.read_pairs();
  ASSERT_EQ(p.size(), static_cast<size_t>(n));
  EXPECT_EQ(p.pair_id.back(), n - 1);
  EXPECT_EQ(p.tokens.back(), testutil::kMaxLen - 1);
  std::vector<uint8_t> img(image_bytes);
  r.read_images(n_images - 1, 1, img.data());
  EXPECT_EQ(img[0], testutil::pixel(0, (n_images - 1) * image_bytes));
  // Chunk bounds of the writer: 1 and 64 images per chunk both pass.
  for (int chunk : {1, 64}) {
    const std::string small = dir + "/chunk-" + std::to_string(chunk) + ".h5";
    data::ShardWriter w(small, h, chunk);
    std::vector<uint8_t> rgb(3 * image_bytes, 1);
    w.append_images(rgb.data(), 3);
    data::PairColumns c;
    c.pair_image = {0, 1, 2};
    c.tokens.assign(3 * testutil::kMaxLen, 0);
    c.lengths = {1, 1, 1};
    c.label = {0, 0, 0};
    w.write_pairs(c);
    w.write_global_ids({0, 1, 2}, {0, 1, 2});
    w.close();
    EXPECT_NO_THROW(data::ShardReader(small).read_pairs()) << chunk;
  }
}

}  // namespace

// An attribute stored as an array where the schema has a scalar is refused before it is read:
// reading it into the one value's buffer overflowed the stack (found by fuzz_shard_struct).
TEST(ShardGuard, ArrayAttributesWhereScalarsBelongAreRefused) {
  const std::string path = tmpdir("array_attr") + ".h5";
  h5::Handle file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  ASSERT_GE(file.id(), 0);
  const hsize_t n = 3;
  h5::Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
  const int64_t values[3] = {1, 2, 3};
  h5::Handle ints(H5Acreate2(file, "num_pairs", H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT),
                  H5Aclose);
  ASSERT_GE(H5Awrite(ints, H5T_NATIVE_INT64, values), 0);
  h5::Handle str(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(str, 4);
  h5::Handle strings(H5Acreate2(file, "created_by", str, space, H5P_DEFAULT, H5P_DEFAULT),
                     H5Aclose);
  ASSERT_GE(H5Awrite(strings, str, "abcdefghijkl"), 0);
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] {
              h5::read_attr_int(file, "num_pairs", path);
            }).find(path + ": attribute 'num_pairs' is not a scalar"),
            std::string::npos);
  EXPECT_NE(message([&] {
              h5::read_attr_string(file, "created_by", path);
            }).find(path + ": attribute 'created_by' is not a scalar"),
            std::string::npos);
}
