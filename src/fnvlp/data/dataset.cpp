#include "fnvlp/data/dataset.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "fnvlp/core/error.hpp"
#include "fnvlp/core/fault.hpp"
#include "fnvlp/core/sha256.hpp"
#include "fnvlp/data/h5.hpp"
#include "fnvlp/data/shard.hpp"
#include "fnvlp/data/tokenizer.hpp"

namespace fnvlp::data {

namespace fs = std::filesystem;

struct PairDataset::Shard {
  std::string path;
  int64_t first_pair = 0;
  int64_t num_pairs = 0;
  int64_t num_images = 0;
  h5::Handle file;
  h5::Handle images;  // raw: images; jpeg: image_bytes
  std::once_flag loaded;
  // jpeg: image_offset and image_hw (read_jpeg_tables), loaded with the columns.
  std::vector<int64_t> image_offset;
  std::vector<int32_t> image_hw;
  // Per-pair columns, row i = pair first_pair + i.
  std::vector<int64_t> pair_image;
  std::vector<int32_t> tokens;
  std::vector<int16_t> lengths;
  std::vector<int64_t> image_id;
  std::vector<int32_t> label;
};

namespace {

// Opens /images (raw) or /image_bytes (jpeg), checked against the schema (open_shard_dataset),
// with a chunk cache of `cache_bytes` (0: room for `chunks_hint` chunks).
h5::Handle open_images(hid_t file, const std::string& path, const ShardHeader& header,
                       int64_t cache_bytes, int64_t chunks_hint) {
  const bool jpeg = header.codec == ImageCodec::kJpeg;
  const char* name = jpeg ? shard_ds::kImageBytes : shard_ds::kImages;
  const std::string ctx = path + ":/" + name;
  hsize_t chunk_bytes = 0;
  {
    h5::Handle ds = open_shard_dataset(file, path, name, header);
    h5::Handle dcpl(H5_CHECK(H5Dget_create_plist(ds), ctx), H5Pclose);
    hsize_t chunk[4] = {0, 0, 0, 0};
    H5_CHECK(H5Pget_chunk(dcpl, jpeg ? 1 : 4, chunk), ctx);  // rank checked above
    chunk_bytes = jpeg ? chunk[0] : chunk[0] * chunk[1] * chunk[2] * chunk[3];
  }
  const size_t nbytes =
      cache_bytes > 0 ? static_cast<size_t>(cache_bytes)
                      : std::max<size_t>(1 << 20, chunk_bytes * static_cast<size_t>(chunks_hint));
  h5::Handle dapl(H5_CHECK(H5Pcreate(H5P_DATASET_ACCESS), ctx), H5Pclose);
  // w0 = 1: chunks read whole (we never write) are evicted first.
  H5_CHECK(H5Pset_chunk_cache(dapl, 12421, nbytes, 1.0), ctx);
  // The same object as checked above: only the access properties differ.
  return h5::Handle(H5_CHECK(H5Dopen2(file, name, dapl), ctx), H5Dclose);
}

template <typename T>
std::vector<T> read_column(hid_t file, const char* name, const std::string& path,
                           const ShardHeader& header, size_t expected) {
  std::vector<T> v = read_shard_column<T>(file, path, name, header);
  FNVLP_CHECK(v.size() == expected,
              path << ":/" << name << " has " << v.size() << " elements, expected " << expected);
  return v;
}

}  // namespace

PairDataset::PairDataset(const std::string& dir, const PairDatasetOptions& options)
    : dir_(dir), options_(options) {
  manifest_ = Manifest::load(dir);
  const std::string mpath = (fs::path(dir) / kManifestName).string();
  FNVLP_CHECK(
      manifest_.image_size > 0 && manifest_.max_len >= 1,
      mpath << ": bad image_size " << manifest_.image_size << " or max_len " << manifest_.max_len);
  FNVLP_CHECK(!manifest_.shards.empty(), mpath << ": lists no shards");
  int64_t next = 0;
  for (const auto& s : manifest_.shards) {
    FNVLP_CHECK(s.first_pair_id == next && s.num_pairs > 0,
                mpath << ": shard " << s.file << " holds pairs from " << s.first_pair_id
                      << " (count " << s.num_pairs << "), expected the next range to start at "
                      << next);
    next += s.num_pairs;
  }
  FNVLP_CHECK(next == manifest_.num_pairs,
              mpath << ": shards hold " << next << " pairs, num_pairs is " << manifest_.num_pairs);

  // Cheap checks of every file first, so a missing shard fails here and not mid-training.
  for (const auto& s : manifest_.shards) {
    const std::string path = (fs::path(dir) / s.file).string();
    FNVLP_CHECK(fs::exists(path), path << ": missing (listed in " << mpath << ")");
    const auto bytes = static_cast<int64_t>(fs::file_size(path));
    FNVLP_CHECK(bytes == s.bytes, path << ": " << bytes << " bytes, " << mpath << " says "
                                       << s.bytes << " (truncated or replaced?)");
    if (options_.verify_checksums)
      FNVLP_CHECK(sha256_file(path) == s.sha256, path << ": sha256 differs from " << mpath);
  }

  const int64_t chunks_hint = std::max<int64_t>(4, options_.batch_hint / 16);
  std::lock_guard<std::mutex> lock(h5::global_mutex());
  try {
    for (const auto& s : manifest_.shards) {
      auto sh = std::make_unique<Shard>();
      sh->path = (fs::path(dir) / s.file).string();
      sh->first_pair = s.first_pair_id;
      sh->num_pairs = s.num_pairs;
      sh->file = h5::open_file(sh->path);
      const std::string& p = sh->path;
      const ImageCodec codec = read_shard_codec(sh->file, p);
      FNVLP_CHECK(codec == manifest_.image_codec, p << ": image codec " << image_codec_name(codec)
                                                    << ", the manifest says "
                                                    << image_codec_name(manifest_.image_codec));
      const int64_t image_size = h5::read_attr_int(sh->file, "image_size", p);
      const int64_t max_len = h5::read_attr_int(sh->file, "max_len", p);
      const int64_t num_pairs = h5::read_attr_int(sh->file, "num_pairs", p);
      const std::string vocab = h5::read_attr_string(sh->file, "vocab_sha256", p);
      FNVLP_CHECK(image_size == manifest_.image_size && max_len == manifest_.max_len,
                  p << ": image_size " << image_size << " / max_len " << max_len
                    << " differ from the manifest's " << manifest_.image_size << " / "
                    << manifest_.max_len);
      FNVLP_CHECK(vocab == manifest_.vocab_sha256, p << ": vocab_sha256 differs from the manifest");
      FNVLP_CHECK(num_pairs == s.num_pairs,
                  p << ": num_pairs " << num_pairs << ", manifest says " << s.num_pairs);
      ShardHeader header;
      header.codec = codec;
      header.image_size = image_size;
      header.max_len = max_len;
      header.num_pairs = num_pairs;
      sh->images = open_images(sh->file, p, header, options_.chunk_cache_bytes, chunks_hint);
      if (codec == ImageCodec::kJpeg) {
        // The count from image_hw's metadata; its rows are read and checked with the columns.
        const h5::Handle hw = open_shard_dataset(sh->file, p, shard_ds::kImageHw, header);
        sh->num_images = static_cast<int64_t>(h5::dims(hw, p + ":/image_hw")[0]);
        FNVLP_CHECK(sh->num_images == s.num_images, p << ":/image_hw has " << sh->num_images
                                                      << " rows, manifest says " << s.num_images);
      } else {
        sh->num_images = static_cast<int64_t>(h5::dims(sh->images, p + ":/images")[0]);
        FNVLP_CHECK(sh->num_images == s.num_images, p << ":/images has " << sh->num_images
                                                      << " rows, manifest says " << s.num_images);
      }
      first_pair_.push_back(s.first_pair_id);
      shards_.push_back(std::move(sh));
    }
  } catch (...) {
    shards_.clear();  // close what was opened while still holding the lock
    throw;
  }
}

PairDataset::~PairDataset() {
  // Closing is an HDF5 call too: it must not overlap another thread's.
  std::lock_guard<std::mutex> lock(h5::global_mutex());
  shards_.clear();
}

std::pair<int64_t, int64_t> PairDataset::locate(int64_t pair_id) const {
  FNVLP_CHECK(
      pair_id >= 0 && pair_id < manifest_.num_pairs,
      "pair_id " << pair_id << " outside [0, " << manifest_.num_pairs << ") of dataset " << dir_);
  const auto it = std::upper_bound(first_pair_.begin(), first_pair_.end(), pair_id) - 1;
  return {it - first_pair_.begin(), pair_id - *it};
}

const PairDataset::Shard& PairDataset::columns(int64_t shard) const {
  Shard& sh = *shards_[static_cast<size_t>(shard)];
  // call_once: concurrent readers wait for one load; a throwing load is retried next time.
  std::call_once(sh.loaded, [&] {
    const auto n = static_cast<size_t>(sh.num_pairs);
    const auto L = static_cast<size_t>(manifest_.max_len);
    const std::string& p = sh.path;
    ShardHeader h;  // as checked against the manifest at open
    h.codec = manifest_.image_codec;
    h.image_size = manifest_.image_size;
    h.max_len = manifest_.max_len;
    h.num_pairs = sh.num_pairs;
    std::vector<int64_t> pair_id;
    {
      std::lock_guard<std::mutex> lock(h5::global_mutex());
      sh.pair_image = read_column<int64_t>(sh.file, shard_ds::kPairImage, p, h, n);
      sh.tokens = read_column<int32_t>(sh.file, shard_ds::kTokens, p, h, n * L);
      sh.lengths = read_column<int16_t>(sh.file, shard_ds::kLengths, p, h, n);
      pair_id = read_column<int64_t>(sh.file, shard_ds::kPairId, p, h, n);
      sh.image_id = read_column<int64_t>(sh.file, shard_ds::kImageId, p, h, n);
      sh.label = read_column<int32_t>(sh.file, shard_ds::kLabel, p, h, n);
      if (h.codec == ImageCodec::kJpeg) {
        read_jpeg_tables(sh.file, p, h, sh.images, sh.image_offset, sh.image_hw);
        FNVLP_CHECK(static_cast<int64_t>(sh.image_hw.size() / 2) == sh.num_images,
                    p << ":/image_hw changed its row count since the shard was opened");
      }
    }
    for (size_t i = 0; i < n; ++i) {
      FNVLP_CHECK(pair_id[i] == sh.first_pair + static_cast<int64_t>(i),
                  p << ":/pair_id row " << i << " is " << pair_id[i] << ", the manifest implies "
                    << sh.first_pair + static_cast<int64_t>(i));
      FNVLP_CHECK(sh.pair_image[i] >= 0 && sh.pair_image[i] < sh.num_images,
                  p << ":/pair_image row " << i << " is " << sh.pair_image[i] << ", outside "
                    << sh.num_images << " images");
      FNVLP_CHECK(sh.lengths[i] >= 1 && sh.lengths[i] <= static_cast<int64_t>(L),
                  p << ":/lengths row " << i << " is " << sh.lengths[i] << ", outside 1.." << L);
    }
  });
  return sh;
}

const SpecialTokens& PairDataset::special_tokens() const {
  std::call_once(special_once_, [this] {
    if (manifest_.special_tokens.known()) {
      special_ = manifest_.special_tokens;
      return;
    }
    const std::string mpath = (fs::path(dir_) / kManifestName).string();
    const std::string& vocab = manifest_.vocab_path;
    FNVLP_CHECK(fs::is_regular_file(vocab),
                mpath << " records no special token ids and its vocabulary " << vocab
                      << " is gone (re-shard, or restore it)");
    const WordPieceTokenizer tok = WordPieceTokenizer::from_file(vocab);
    FNVLP_CHECK(tok.vocab_sha256() == manifest_.vocab_sha256,
                vocab << ": sha256 differs from the vocabulary " << mpath << " was tokenized with");
    special_ = tok.special_tokens();
  });
  return special_;
}

void PairDataset::ids(const std::vector<int64_t>& pair_ids, std::vector<int64_t>* image_id,
                      std::vector<int32_t>* label) const {
  image_id->resize(pair_ids.size());
  label->resize(pair_ids.size());
  for (size_t i = 0; i < pair_ids.size(); ++i) {
    const auto [shard, row] = locate(pair_ids[i]);
    const Shard& sh = columns(shard);
    (*image_id)[i] = sh.image_id[static_cast<size_t>(row)];
    (*label)[i] = sh.label[static_cast<size_t>(row)];
  }
}

Batch PairDataset::read(const std::vector<int64_t>& pair_ids) const {
  const auto b = static_cast<int64_t>(pair_ids.size());
  const int64_t S = manifest_.image_size, L = manifest_.max_len;
  const bool jpeg = manifest_.image_codec == ImageCodec::kJpeg;
  const size_t image_bytes = jpeg ? 0 : static_cast<size_t>(S * S * 3);
  Batch out;
  if (!jpeg) out.images = torch::empty({b, S, S, 3}, torch::kUInt8);
  out.tokens = torch::empty({b, L}, torch::kInt64);
  out.attention_mask = torch::empty({b, L}, torch::kInt64);
  out.pair_id = torch::empty({b}, torch::kInt64);
  out.image_id = torch::empty({b}, torch::kInt64);
  out.label = torch::empty({b}, torch::kInt64);
  uint8_t* images = jpeg ? nullptr : out.images.data_ptr<uint8_t>();
  int64_t* tokens = out.tokens.data_ptr<int64_t>();
  int64_t* mask = out.attention_mask.data_ptr<int64_t>();
  int64_t* pid = out.pair_id.data_ptr<int64_t>();
  int64_t* iid = out.image_id.data_ptr<int64_t>();
  int64_t* lab = out.label.data_ptr<int64_t>();

  // (shard, image row, batch position), sorted so each shard is visited once, rows ascending.
  struct Want {
    int64_t shard, image_row, pos;
  };
  std::vector<Want> wants(static_cast<size_t>(b));
  for (int64_t i = 0; i < b; ++i) {
    const auto [shard, row] = locate(pair_ids[static_cast<size_t>(i)]);
    const Shard& sh = columns(shard);
    const auto r = static_cast<size_t>(row);
    wants[static_cast<size_t>(i)] = {shard, sh.pair_image[r], i};
    pid[i] = pair_ids[static_cast<size_t>(i)];
    iid[i] = sh.image_id[r];
    lab[i] = sh.label[r];
    const int32_t* t = &sh.tokens[r * static_cast<size_t>(L)];
    const int64_t len = sh.lengths[r];
    for (int64_t k = 0; k < L; ++k) {
      tokens[i * L + k] = t[k];
      mask[i * L + k] = k < len ? 1 : 0;
    }
  }
  std::sort(wants.begin(), wants.end(), [](const Want& x, const Want& y) {
    return x.shard != y.shard ? x.shard < y.shard : x.image_row < y.image_row;
  });
  if (jpeg) {
    // The stored bytes of each wanted image, one read per run of consecutive rows (as below), in
    // batch order; decoding is the consumer's (Augmenter), on its threads.
    auto enc = std::make_shared<EncodedImages>();
    enc->height.resize(static_cast<size_t>(b));
    enc->width.resize(static_cast<size_t>(b));
    enc->source.resize(static_cast<size_t>(b));
    std::vector<std::pair<int64_t, int64_t>> span(static_cast<size_t>(b));  // into `buf`
    std::vector<uint8_t> buf;
    for (size_t lo = 0; lo < wants.size();) {
      size_t hi = lo;
      while (hi < wants.size() && wants[hi].shard == wants[lo].shard) ++hi;
      const Shard& sh = *shards_[static_cast<size_t>(wants[lo].shard)];
      const std::vector<int64_t>& off = sh.image_offset;
      fault::point("shard.read", -1, sh.path + ":/" + shard_ds::kImageBytes);
      std::lock_guard<std::mutex> lock(h5::global_mutex());
      for (size_t k = lo; k < hi;) {
        size_t e = k + 1;
        while (e < hi && wants[e].image_row <= wants[e - 1].image_row + 1) ++e;
        const int64_t first = wants[k].image_row, last = wants[e - 1].image_row + 1;
        const size_t at = buf.size();
        buf.resize(at + static_cast<size_t>(off[static_cast<size_t>(last)] -
                                            off[static_cast<size_t>(first)]));
        read_jpeg_bytes(sh.images, off, first, last, buf.data() + at, sh.path);
        for (size_t w = k; w < e; ++w) {
          const auto r = static_cast<size_t>(wants[w].image_row);
          span[static_cast<size_t>(wants[w].pos)] = {
              static_cast<int64_t>(at) + off[r] - off[static_cast<size_t>(first)],
              off[r + 1] - off[r]};
        }
        k = e;
      }
      for (size_t w = lo; w < hi; ++w) {
        const auto r = static_cast<size_t>(wants[w].image_row);
        const auto pos = static_cast<size_t>(wants[w].pos);
        enc->height[pos] = sh.image_hw[2 * r];
        enc->width[pos] = sh.image_hw[2 * r + 1];
        enc->source[pos] = sh.path + ":/image_bytes row " + std::to_string(r) + " (pair_id " +
                           std::to_string(pid[pos]) + ")";
      }
      lo = hi;
    }
    for (int64_t i = 0; i < b; ++i) {
      const auto [at, n] = span[static_cast<size_t>(i)];
      enc->bytes.insert(enc->bytes.end(), buf.begin() + at, buf.begin() + at + n);
      enc->offset.push_back(enc->offset.back() + n);
    }
    out.encoded = std::move(enc);
    return out;
  }

  std::vector<uint8_t> buf;
  std::vector<int64_t> rows;  // distinct image rows of one shard, ascending
  for (size_t lo = 0; lo < wants.size();) {
    size_t hi = lo;
    rows.clear();
    while (hi < wants.size() && wants[hi].shard == wants[lo].shard) {
      if (rows.empty() || rows.back() != wants[hi].image_row) rows.push_back(wants[hi].image_row);
      ++hi;
    }
    const Shard& sh = *shards_[static_cast<size_t>(wants[lo].shard)];
    const std::string ctx = sh.path + ":/" + shard_ds::kImages;
    buf.resize(rows.size() * image_bytes);
    {
      // One read per run of consecutive rows. Rows ascend, so a chunk shared by two runs is used
      // by consecutive reads and stays in the chunk cache (>= 4 chunks): each chunk is decoded and
      // Fletcher32-checked once per batch. (A single read of the union of runs would do the same,
      // but HDF5 1.10 maps an irregular selection to chunks element by element: ~100x slower.)
      fault::point("shard.read", -1, ctx);
      std::lock_guard<std::mutex> lock(h5::global_mutex());
      h5::Handle fspace(H5_CHECK(H5Dget_space(sh.images), ctx), H5Sclose);
      const auto S_ = static_cast<hsize_t>(S);
      for (size_t k = 0; k < rows.size();) {
        size_t e = k + 1;
        while (e < rows.size() && rows[e] == rows[e - 1] + 1) ++e;
        const hsize_t start[4] = {static_cast<hsize_t>(rows[k]), 0, 0, 0};
        const hsize_t count[4] = {static_cast<hsize_t>(e - k), S_, S_, 3};
        H5_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, nullptr, count, nullptr),
                 ctx << ": select rows");
        h5::Handle mspace(H5_CHECK(H5Screate_simple(4, count, nullptr), ctx), H5Sclose);
        H5_CHECK(H5Dread(sh.images, H5T_NATIVE_UINT8, mspace, fspace, H5P_DEFAULT,
                         &buf[k * image_bytes]),
                 ctx << ": read of image rows [" << rows[k] << ", " << rows[e - 1] + 1 << ")");
        k = e;
      }
    }
    size_t k = 0;
    for (size_t w = lo; w < hi; ++w) {
      while (rows[k] != wants[w].image_row) ++k;
      std::memcpy(images + static_cast<size_t>(wants[w].pos) * image_bytes, &buf[k * image_bytes],
                  image_bytes);
    }
    lo = hi;
  }
  return out;
}

}  // namespace fnvlp::data
