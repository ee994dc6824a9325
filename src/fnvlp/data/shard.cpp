#include "fnvlp/data/shard.hpp"

#include <algorithm>

namespace fnvlp::data {

namespace {

void write_ids(hid_t file, const std::string& path, int64_t num_pairs,
               const std::vector<int64_t>& pair_id, const std::vector<int64_t>& image_id) {
  FNVLP_CHECK(static_cast<int64_t>(pair_id.size()) == num_pairs &&
                  static_cast<int64_t>(image_id.size()) == num_pairs,
              path << ": " << num_pairs << " pairs but " << pair_id.size() << " pair ids and "
                   << image_id.size() << " image ids");
  const hsize_t n = static_cast<hsize_t>(num_pairs);
  const hsize_t chunk = std::min<hsize_t>(std::max<hsize_t>(n, 1), kMaxColumnChunk);
  h5::write_dataset(file, shard_ds::kPairId, pair_id, {n}, {chunk}, path);
  h5::write_dataset(file, shard_ds::kImageId, image_id, {n}, {chunk}, path);
}

}  // namespace

h5::StoredLayout shard_layout(const std::string& name, const ShardHeader& h) {
  // Types as ShardWriter stores them: native types of the columns, U8LE pixels.
  const auto s = static_cast<hsize_t>(std::max<int64_t>(h.image_size, 0));
  const auto L = static_cast<hsize_t>(std::max<int64_t>(h.max_len, 0));
  if (name == shard_ds::kImages) return {H5T_NATIVE_UINT8, -1, {s, s, 3}, kMaxImageChunk, true};
  if (name == shard_ds::kTokens) return {H5T_NATIVE_INT32, h.num_pairs, {L}, kMaxTokenChunk, true};
  if (name == shard_ds::kLengths) return {H5T_NATIVE_INT16, h.num_pairs, {}, kMaxColumnChunk, true};
  if (name == shard_ds::kLabel) return {H5T_NATIVE_INT32, h.num_pairs, {}, kMaxColumnChunk, true};
  FNVLP_CHECK(
      name == shard_ds::kPairImage || name == shard_ds::kPairId || name == shard_ds::kImageId,
      "no shard dataset '" << name << "'");
  return {H5T_NATIVE_INT64, h.num_pairs, {}, kMaxColumnChunk, true};
}

h5::Handle open_shard_dataset(hid_t file, const std::string& path, const std::string& name,
                              const ShardHeader& header, hid_t dapl) {
  const std::string ctx = path + ":/" + name;
  FNVLP_CHECK(h5::exists(file, name), ctx << " is missing");
  h5::Handle ds(H5_CHECK(H5Dopen2(file, name.c_str(), dapl), ctx), H5Dclose);
  h5::check_stored_layout(ds, shard_layout(name, header), ctx);
  return ds;
}

ShardWriter::ShardWriter(const std::string& path, const ShardHeader& header, int image_chunk)
    : path_(path), header_(header) {
  FNVLP_CHECK(header.image_size > 0 && header.max_len >= 2, path << ": bad shard header");
  FNVLP_CHECK(image_chunk >= 1 && static_cast<hsize_t>(image_chunk) <= kMaxImageChunk,
              "image chunk must hold 1.." << kMaxImageChunk << " images, got " << image_chunk);
  file_ = h5::create_file(path);
  const hsize_t s = static_cast<hsize_t>(header.image_size);
  images_ = h5::create_dataset(
      file_, shard_ds::kImages, H5T_STD_U8LE,
      {{0, s, s, 3}, {static_cast<hsize_t>(image_chunk), s, s, 3}, true, true}, path);
}

int64_t ShardWriter::append_images(const uint8_t* rgb, int64_t n) {
  const int64_t first = num_images_;
  h5::write_rows(images_, H5T_NATIVE_UINT8, rgb, static_cast<hsize_t>(first),
                 static_cast<hsize_t>(n), true, path_ + ":/images");
  num_images_ += n;
  return first;
}

void ShardWriter::write_pairs(const PairColumns& p) {
  const int64_t n = static_cast<int64_t>(p.pair_image.size());
  const auto un = static_cast<size_t>(n);
  FNVLP_CHECK(p.lengths.size() == un && p.label.size() == un &&
                  p.tokens.size() == un * static_cast<size_t>(header_.max_len),
              path_ << ": inconsistent pair columns");
  for (int64_t row : p.pair_image)
    FNVLP_CHECK(row >= 0 && row < num_images_,
                path_ << ": pair_image " << row << " outside " << num_images_ << " images");
  const hsize_t hn = static_cast<hsize_t>(n);
  const hsize_t chunk = std::min<hsize_t>(std::max<hsize_t>(hn, 1), kMaxColumnChunk);
  const hsize_t tok_chunk = std::min<hsize_t>(std::max<hsize_t>(hn, 1), kMaxTokenChunk);
  h5::write_dataset(file_, shard_ds::kPairImage, p.pair_image, {hn}, {chunk}, path_);
  h5::write_dataset(file_, shard_ds::kTokens, p.tokens, {hn, static_cast<hsize_t>(header_.max_len)},
                    {tok_chunk, static_cast<hsize_t>(header_.max_len)}, path_);
  h5::write_dataset(file_, shard_ds::kLengths, p.lengths, {hn}, {chunk}, path_);
  h5::write_dataset(file_, shard_ds::kLabel, p.label, {hn}, {chunk}, path_);
  num_pairs_ = n;
}

void ShardWriter::write_global_ids(const std::vector<int64_t>& pair_id,
                                   const std::vector<int64_t>& image_id) {
  FNVLP_CHECK(num_pairs_ >= 0, path_ << ": write_pairs must come before the global ids");
  write_ids(file_, path_, num_pairs_, pair_id, image_id);
}

void ShardWriter::close() {
  FNVLP_CHECK(num_pairs_ >= 0, path_ << ": closing a shard without pairs written");
  h5::write_attr_int(file_, "fnvlp_schema", header_.schema);
  h5::write_attr_string(file_, "created_by", header_.created_by);
  h5::write_attr_int(file_, "image_size", header_.image_size);
  h5::write_attr_int(file_, "max_len", header_.max_len);
  h5::write_attr_string(file_, "vocab_sha256", header_.vocab_sha256);
  h5::write_attr_int(file_, "num_pairs", num_pairs_);
  images_.close(path_ + ":/images");
  H5_CHECK(H5Fflush(file_, H5F_SCOPE_GLOBAL), path_ << ": flush");
  file_.close(path_);
}

void ShardWriter::add_global_ids(const std::string& path, const std::vector<int64_t>& pair_id,
                                 const std::vector<int64_t>& image_id) {
  h5::Handle file = h5::open_file(path, /*writable=*/true);
  const int64_t n = h5::read_attr_int(file, "num_pairs", path);
  write_ids(file, path, n, pair_id, image_id);
  H5_CHECK(H5Fflush(file, H5F_SCOPE_GLOBAL), path << ": flush");
  file.close(path);
}

ShardReader::ShardReader(const std::string& path) : path_(path) {
  file_ = h5::open_file(path);
  header_.schema = h5::read_attr_int(file_, "fnvlp_schema", path);
  FNVLP_CHECK(header_.schema == kShardSchemaVersion,
              path << ": shard schema version " << header_.schema << ", this build reads version "
                   << kShardSchemaVersion);
  header_.created_by = h5::read_attr_string(file_, "created_by", path);
  header_.image_size = h5::read_attr_int(file_, "image_size", path);
  header_.max_len = h5::read_attr_int(file_, "max_len", path);
  header_.vocab_sha256 = h5::read_attr_string(file_, "vocab_sha256", path);
  header_.num_pairs = h5::read_attr_int(file_, "num_pairs", path);
  FNVLP_CHECK(header_.image_size > 0 && header_.max_len >= 2 && header_.num_pairs >= 0,
              path << ": bad header (image_size " << header_.image_size << ", max_len "
                   << header_.max_len << ", num_pairs " << header_.num_pairs << ")");
  images_ = open_shard_dataset(file_, path, shard_ds::kImages, header_);
  num_images_ = static_cast<int64_t>(h5::dims(images_, path + ":/images")[0]);
}

PairColumns ShardReader::read_pairs() const {
  // Lengths are checked against num_pairs (and max_len) before each read.
  PairColumns p;
  p.pair_image = read_shard_column<int64_t>(file_, path_, shard_ds::kPairImage, header_);
  p.tokens = read_shard_column<int32_t>(file_, path_, shard_ds::kTokens, header_);
  p.lengths = read_shard_column<int16_t>(file_, path_, shard_ds::kLengths, header_);
  p.pair_id = read_shard_column<int64_t>(file_, path_, shard_ds::kPairId, header_);
  p.image_id = read_shard_column<int64_t>(file_, path_, shard_ds::kImageId, header_);
  p.label = read_shard_column<int32_t>(file_, path_, shard_ds::kLabel, header_);
  return p;
}

void ShardReader::read_images(int64_t row, int64_t n, uint8_t* out) const {
  h5::read_rows(images_, H5T_NATIVE_UINT8, out, static_cast<hsize_t>(row), static_cast<hsize_t>(n),
                path_ + ":/images");
}

}  // namespace fnvlp::data
