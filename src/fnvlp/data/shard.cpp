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
  const bool jpeg = h.codec == ImageCodec::kJpeg;
  if (name == shard_ds::kImages) {
    FNVLP_CHECK(!jpeg, "a jpeg shard has no dataset 'images'");
    return {H5T_NATIVE_UINT8, -1, {s, s, 3}, kMaxImageChunk, true};
  }
  if (name == shard_ds::kImageBytes || name == shard_ds::kImageOffset ||
      name == shard_ds::kImageHw) {
    FNVLP_CHECK(jpeg, "a raw shard has no dataset '" << name << "'");
    if (name == shard_ds::kImageBytes) return {H5T_NATIVE_UINT8, -1, {}, kJpegChunkBytes, true};
    if (name == shard_ds::kImageOffset) return {H5T_NATIVE_INT64, -1, {}, kMaxColumnChunk, true};
    return {H5T_NATIVE_INT32, -1, {2}, kMaxColumnChunk, true};
  }
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
  if (header.codec == ImageCodec::kJpeg) {
    images_ = h5::create_dataset(file_, shard_ds::kImageBytes, H5T_STD_U8LE,
                                 {{0}, {kJpegChunkBytes}, true, true}, path);
    return;
  }
  images_ = h5::create_dataset(
      file_, shard_ds::kImages, H5T_STD_U8LE,
      {{0, s, s, 3}, {static_cast<hsize_t>(image_chunk), s, s, 3}, true, true}, path);
}

int64_t ShardWriter::append_jpeg(const uint8_t* jpeg, size_t size, int32_t height, int32_t width) {
  FNVLP_CHECK(header_.codec == ImageCodec::kJpeg, path_ << ": append_jpeg on a raw shard");
  FNVLP_CHECK(
      size > 0 && static_cast<int64_t>(size) <= kMaxStoredJpegBytes,
      path_ << ": a stored JPEG of " << size << " bytes (1.." << kMaxStoredJpegBytes << ")");
  FNVLP_CHECK(
      height >= 1 && width >= 1 && height <= header_.image_size && width <= header_.image_size,
      path_ << ": a " << width << "x" << height << " image above the maximum side "
            << header_.image_size);
  pending_.insert(pending_.end(), jpeg, jpeg + size);
  offset_.push_back(offset_.back() + static_cast<int64_t>(size));
  hw_.push_back(height);
  hw_.push_back(width);
  if (pending_.size() >= (size_t{4} << 20)) flush_jpeg_bytes();
  return num_images_++;
}

void ShardWriter::flush_jpeg_bytes() {
  if (pending_.empty()) return;
  const auto first = static_cast<hsize_t>(offset_.back()) - pending_.size();
  h5::write_rows(images_, H5T_NATIVE_UINT8, pending_.data(), first, pending_.size(), true,
                 path_ + ":/" + shard_ds::kImageBytes);
  pending_.clear();
}

int64_t ShardWriter::append_images(const uint8_t* rgb, int64_t n) {
  FNVLP_CHECK(header_.codec == ImageCodec::kRaw, path_ << ": append_images on a jpeg shard");
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
  if (header_.codec == ImageCodec::kJpeg) {
    flush_jpeg_bytes();
    const auto n = static_cast<hsize_t>(num_images_);
    h5::write_dataset(file_, shard_ds::kImageOffset, offset_, {n + 1},
                      {std::min<hsize_t>(n + 1, kMaxColumnChunk)}, path_);
    h5::write_dataset(file_, shard_ds::kImageHw, hw_, {n, 2},
                      {std::min<hsize_t>(std::max<hsize_t>(n, 1), kMaxColumnChunk), 2}, path_);
    h5::write_attr_string(file_, "image_codec", image_codec_name(header_.codec));
  }
  h5::write_attr_int(file_, "fnvlp_schema", shard_schema(header_.codec));
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

ImageCodec read_shard_codec(hid_t file, const std::string& path) {
  const ImageCodec codec = codec_of_schema(h5::read_attr_int(file, "fnvlp_schema", path), path);
  if (codec == ImageCodec::kJpeg) {
    const std::string name = h5::read_attr_string(file, "image_codec", path);
    FNVLP_CHECK(name == "jpeg", path << ": schema " << kShardSchemaJpeg << " with image_codec '"
                                     << name << "', expected 'jpeg'");
  }
  return codec;
}

void read_jpeg_tables(hid_t file, const std::string& path, const ShardHeader& header,
                      hid_t image_bytes, std::vector<int64_t>& offset, std::vector<int32_t>& hw) {
  const hsize_t total = h5::dims(image_bytes, path + ":/image_bytes")[0];
  offset = read_shard_column<int64_t>(file, path, shard_ds::kImageOffset, header);
  hw = read_shard_column<int32_t>(file, path, shard_ds::kImageHw, header);
  FNVLP_CHECK(!offset.empty() && offset.size() == hw.size() / 2 + 1,
              path << ": image_offset has " << offset.size() << " entries for " << hw.size() / 2
                   << " images in image_hw (expected one more)");
  FNVLP_CHECK(offset.front() == 0, path << ":/image_offset does not start at 0");
  for (size_t r = 0; r + 1 < offset.size(); ++r) {
    // Compared before subtracting: hostile offsets must not overflow the difference.
    const int64_t lo = offset[r], hi = offset[r + 1];
    FNVLP_CHECK(
        lo >= 0 && hi > lo && static_cast<hsize_t>(hi) <= total && hi - lo <= kMaxStoredJpegBytes,
        path << ":/image_offset row " << r << ": bytes [" << lo << ", " << hi << ") of " << total
             << " (an image holds 1.." << kMaxStoredJpegBytes << ")");
    const int32_t h = hw[2 * r], w = hw[2 * r + 1];
    FNVLP_CHECK(h >= 1 && w >= 1 && h <= header.image_size && w <= header.image_size,
                path << ":/image_hw row " << r << ": " << w << "x" << h
                     << " outside the maximum side " << header.image_size);
  }
  FNVLP_CHECK(
      static_cast<hsize_t>(offset.back()) == total,
      path << ":/image_offset ends at " << offset.back() << ", image_bytes holds " << total);
}

void read_jpeg_bytes(hid_t image_bytes, const std::vector<int64_t>& offset, int64_t first,
                     int64_t last, uint8_t* out, const std::string& path) {
  FNVLP_CHECK(
      first >= 0 && first <= last && last < static_cast<int64_t>(offset.size()),
      path << ": image rows [" << first << ", " << last << ") outside " << offset.size() - 1);
  const auto begin = static_cast<hsize_t>(offset[static_cast<size_t>(first)]);
  const auto n = static_cast<hsize_t>(offset[static_cast<size_t>(last)]) - begin;
  if (n > 0)
    h5::read_rows(image_bytes, H5T_NATIVE_UINT8, out, begin, n,
                  path + ":/image_bytes of image rows [" + std::to_string(first) + ", " +
                      std::to_string(last) + ")");
}

ShardReader::ShardReader(const std::string& path) : path_(path) {
  file_ = h5::open_file(path);
  header_.codec = read_shard_codec(file_, path);
  header_.created_by = h5::read_attr_string(file_, "created_by", path);
  header_.image_size = h5::read_attr_int(file_, "image_size", path);
  header_.max_len = h5::read_attr_int(file_, "max_len", path);
  header_.vocab_sha256 = h5::read_attr_string(file_, "vocab_sha256", path);
  header_.num_pairs = h5::read_attr_int(file_, "num_pairs", path);
  FNVLP_CHECK(header_.image_size > 0 && header_.max_len >= 2 && header_.num_pairs >= 0,
              path << ": bad header (image_size " << header_.image_size << ", max_len "
                   << header_.max_len << ", num_pairs " << header_.num_pairs << ")");
  if (header_.codec == ImageCodec::kJpeg) {
    images_ = open_shard_dataset(file_, path, shard_ds::kImageBytes, header_);
    read_jpeg_tables(file_, path, header_, images_, offset_, hw_);
    num_images_ = static_cast<int64_t>(hw_.size() / 2);
    return;
  }
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

void ShardReader::read_jpegs(int64_t row, int64_t n, EncodedImages& out) const {
  FNVLP_CHECK(header_.codec == ImageCodec::kJpeg, path_ << ": read_jpegs of a raw shard");
  FNVLP_CHECK(row >= 0 && n >= 0 && row + n <= num_images_,
              path_ << ": image rows [" << row << ", " << row + n << ") outside " << num_images_);
  const size_t at = out.bytes.size();
  const int64_t first = offset_[static_cast<size_t>(row)];
  out.bytes.resize(at + static_cast<size_t>(offset_[static_cast<size_t>(row + n)] - first));
  read_jpeg_bytes(images_, offset_, row, row + n, out.bytes.data() + at, path_);
  for (int64_t r = row; r < row + n; ++r) {
    const auto ur = static_cast<size_t>(r);
    out.offset.push_back(out.offset.back() + offset_[ur + 1] - offset_[ur]);
    out.height.push_back(hw_[2 * ur]);
    out.width.push_back(hw_[2 * ur + 1]);
    out.source.push_back(path_ + ":/image_bytes row " + std::to_string(r));
  }
}

void ShardReader::read_images(int64_t row, int64_t n, uint8_t* out) const {
  FNVLP_CHECK(header_.codec == ImageCodec::kRaw, path_ << ": read_images of a jpeg shard");
  h5::read_rows(images_, H5T_NATIVE_UINT8, out, static_cast<hsize_t>(row), static_cast<hsize_t>(n),
                path_ + ":/images");
}

}  // namespace fnvlp::data
