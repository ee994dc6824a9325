#pragma once
// The shard file format (ARCHITECTURE.md §2): one HDF5 file per shard, read-only once written.
//   root attributes: fnvlp_schema, created_by, image_size, max_len, vocab_sha256, num_pairs;
//                    image_codec (schema 2 only)
// Each distinct image of the shard is stored once, as one of:
//   schema 1, raw:   images       uint8 [n_images, S, S, 3]  decoded, S = image_size
//   schema 2, jpeg:  image_bytes  uint8 [total]              the JPEG streams, one after another
//                    image_offset int64 [n_images + 1]       image r is bytes [off[r], off[r+1])
//                    image_hw     int32 [n_images, 2]        its height and width, longer side
//                                                            <= image_size (the maximum side)
//   (image_bytes is one flat dataset rather than an HDF5 variable-length type: Fletcher32 then
//   covers the bytes themselves, not only pointers into a heap)
// and the per-pair columns:
//   pair_image int64 [n_pairs]             row in images
//   tokens     int32 [n_pairs, L]          [CLS] ... [SEP], [PAD]=0
//   lengths    int16 [n_pairs]
//   pair_id    int64 [n_pairs]             global, dense 0..N-1 across all shards
//   image_id   int64 [n_pairs]             global; equal image_id = known positives
//   label      int32 [n_pairs]             semantic class, -1 unknown
// All datasets are chunked with Fletcher32, so a flipped bit fails the read of its chunk. Readers
// open them through open_shard_dataset, which refuses any other stored form before a read.
#include <cstdint>
#include <string>
#include <vector>

#include "fnvlp/data/h5.hpp"
#include "fnvlp/data/image_codec.hpp"

namespace fnvlp::data {

namespace shard_ds {
inline constexpr const char* kImages = "images";
inline constexpr const char* kImageBytes = "image_bytes";
inline constexpr const char* kImageOffset = "image_offset";
inline constexpr const char* kImageHw = "image_hw";
inline constexpr const char* kPairImage = "pair_image";
inline constexpr const char* kTokens = "tokens";
inline constexpr const char* kLengths = "lengths";
inline constexpr const char* kPairId = "pair_id";
inline constexpr const char* kImageId = "image_id";
inline constexpr const char* kLabel = "label";
}  // namespace shard_ds

// Rows per chunk the writer uses at most (images: chosen 1..64; per-pair columns: min(n, bound)).
inline constexpr hsize_t kMaxImageChunk = 64;
inline constexpr hsize_t kMaxTokenChunk = 4096;
inline constexpr hsize_t kMaxColumnChunk = 65536;  // 1-D per-pair columns
// image_bytes chunks: a read of one ~30 KB JPEG decodes (and checksums) one or two of them.
inline constexpr hsize_t kJpegChunkBytes = 65536;
// The largest stored JPEG a reader accepts (a 4096 x 4096 image at quality 100 is ~10 MB).
inline constexpr int64_t kMaxStoredJpegBytes = int64_t{64} << 20;

struct ShardHeader {
  ImageCodec codec = ImageCodec::kRaw;
  std::string created_by;
  int64_t image_size = 0;  // raw: the square's side; jpeg: the longest stored side
  int64_t max_len = 0;
  std::string vocab_sha256;
  int64_t num_pairs = 0;
};

// The stored form ShardWriter gives dataset `name` in a shard with this header (image_size,
// max_len and num_pairs are used): type, shape, chunk bounds, Fletcher32.
h5::StoredLayout shard_layout(const std::string& name, const ShardHeader& header);

// Opens dataset `name` of shard `path` and refuses it, naming file, dataset and reason, unless it
// is stored as shard_layout says (h5::check_stored_layout: metadata only, no chunk is read). Every
// reader of shard datasets goes through here: libhdf5 1.10 overflows its own buffers on chunks
// that do not match their metadata.
h5::Handle open_shard_dataset(hid_t file, const std::string& path, const std::string& name,
                              const ShardHeader& header, hid_t dapl = H5P_DEFAULT);

// A whole per-pair column (num_pairs rows), checked by open_shard_dataset first.
template <typename T>
std::vector<T> read_shard_column(hid_t file, const std::string& path, const std::string& name,
                                 const ShardHeader& header) {
  const std::string ctx = path + ":/" + name;
  FNVLP_CHECK(H5Tequal(h5::native_type<T>(), shard_layout(name, header).mem_type) > 0,
              ctx << ": read as a type other than the schema's");
  h5::Handle ds = open_shard_dataset(file, path, name, header);
  const std::vector<hsize_t> shape = h5::dims(ds, ctx);
  size_t n = 1;
  for (hsize_t d : shape) n *= static_cast<size_t>(d);  // bounded by the file's size (checked)
  std::vector<T> out(n);
  if (n > 0) h5::read_rows(ds, h5::native_type<T>(), out.data(), 0, shape[0], ctx);
  return out;
}

// Per-pair columns of a shard, all of length num_pairs (tokens: num_pairs * max_len).
struct PairColumns {
  std::vector<int64_t> pair_image;
  std::vector<int32_t> tokens;
  std::vector<int16_t> lengths;
  std::vector<int64_t> pair_id;
  std::vector<int64_t> image_id;
  std::vector<int32_t> label;
  size_t size() const { return pair_image.size(); }
};

// Writes one shard in two steps so that global ids can be assigned after every rank has decoded
// its images: open() + append_images() (raw) or append_jpeg() (jpeg) + write_pairs() stream the
// content, then
// write_global_ids() adds pair_id/image_id, and close() flushes. The caller writes to a temporary
// name and renames only a closed, complete file.
class ShardWriter {
 public:
  ShardWriter(const std::string& path, const ShardHeader& header, int image_chunk);
  // raw: appends decoded images (n * H * W * 3 bytes, H = W = image_size); returns the first row.
  int64_t append_images(const uint8_t* rgb, int64_t n);
  // jpeg: appends one JPEG stream of a height x width image; returns its row. The bytes are not
  // decoded here: the caller encoded them (tests write hostile ones on purpose).
  int64_t append_jpeg(const uint8_t* jpeg, size_t size, int32_t height, int32_t width);
  int64_t num_images() const { return num_images_; }
  // pair_image, tokens, lengths, label (pair_id/image_id ignored here).
  void write_pairs(const PairColumns& pairs);
  void write_global_ids(const std::vector<int64_t>& pair_id, const std::vector<int64_t>& image_id);
  void close();  // raw and jpeg: writes the image tables, attributes, and flushes

  // Reopens a closed shard to add the global ids (the two-phase write of fnvlp-shard).
  static void add_global_ids(const std::string& path, const std::vector<int64_t>& pair_id,
                             const std::vector<int64_t>& image_id);

 private:
  void flush_jpeg_bytes();

  std::string path_;
  ShardHeader header_;
  h5::Handle file_;
  h5::Handle images_;  // raw: images; jpeg: image_bytes
  int64_t num_images_ = 0;
  int64_t num_pairs_ = -1;
  std::vector<uint8_t> pending_;    // jpeg bytes not yet written
  std::vector<int64_t> offset_{0};  // jpeg: image_offset so far
  std::vector<int32_t> hw_;         // jpeg: image_hw so far
};

// Reads a shard; the constructor validates the schema version and the attributes.
class ShardReader {
 public:
  explicit ShardReader(const std::string& path);
  const ShardHeader& header() const { return header_; }
  const std::string& path() const { return path_; }
  int64_t num_pairs() const { return header_.num_pairs; }
  int64_t num_images() const { return num_images_; }

  PairColumns read_pairs() const;  // every per-pair dataset, whole
  // raw: image rows [row, row + n) into out (n * image_size^2 * 3 bytes).
  void read_images(int64_t row, int64_t n, uint8_t* out) const;
  // jpeg: the stored JPEGs of image rows [row, row + n), appended to `out`.
  void read_jpegs(int64_t row, int64_t n, EncodedImages& out) const;

 private:
  std::string path_;
  ShardHeader header_;
  h5::Handle file_;
  h5::Handle images_;  // raw: images; jpeg: image_bytes
  int64_t num_images_ = 0;
  std::vector<int64_t> offset_;  // jpeg: image_offset, checked (check_jpeg_tables)
  std::vector<int32_t> hw_;      // jpeg: image_hw, checked
};

// A shard's codec from its fnvlp_schema (and, for schema 2, image_codec) attributes.
ImageCodec read_shard_codec(hid_t file, const std::string& path);

// The image tables of a jpeg shard, read and checked: offsets start at 0, never decrease, end at
// image_bytes' length, no image above kMaxStoredJpegBytes; every height and width in
// 1..image_size. Throws naming `path` and the first bad row.
void read_jpeg_tables(hid_t file, const std::string& path, const ShardHeader& header,
                      hid_t image_bytes, std::vector<int64_t>& offset, std::vector<int32_t>& hw);
// Reads bytes [offset[first], offset[last]) of image_bytes into `out` (one hyperslab).
void read_jpeg_bytes(hid_t image_bytes, const std::vector<int64_t>& offset, int64_t first,
                     int64_t last, uint8_t* out, const std::string& path);

}  // namespace fnvlp::data
