#include "fnvlp/data/manifest.hpp"

#include <climits>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "fnvlp/core/error.hpp"
#include "fnvlp/core/json_int.hpp"
#include "fnvlp/core/progress.hpp"
#include "fnvlp/core/sha256.hpp"
#include "fnvlp/data/image.hpp"
#include "fnvlp/data/shard.hpp"

namespace fnvlp::data {

namespace fs = std::filesystem;
using json = nlohmann::json;

json Manifest::to_json() const {
  json shards_j = json::array();
  for (const auto& s : shards)
    shards_j.push_back({{"file", s.file},
                        {"first_pair_id", s.first_pair_id},
                        {"num_pairs", s.num_pairs},
                        {"num_images", s.num_images},
                        {"bytes", s.bytes},
                        {"sha256", s.sha256}});
  json vocab = {{"path", vocab_path}, {"sha256", vocab_sha256}, {"size", vocab_size}};
  if (special_tokens.known())
    vocab["special_tokens"] = {{"pad", special_tokens.pad},
                               {"cls", special_tokens.cls},
                               {"sep", special_tokens.sep},
                               {"mask", special_tokens.mask}};
  return {{"fnvlp_manifest_schema", schema},
          {"shard_schema", shard_schema(image_codec)},
          {"image_codec", image_codec_name(image_codec)},
          {"created_by", created_by},
          {"created_at", created_at},
          {"image_size", image_size},
          {"max_len", max_len},
          {"vocab", vocab},
          {"num_pairs", num_pairs},
          {"num_images", num_images},
          {"records", {{"total", records_total}, {"filtered_by_split", records_filtered_by_split}}},
          {"rejects", {{"total", rejects_total}, {"by_reason", rejects_by_reason}}},
          {"source", source},
          {"shards", shards_j}};
}

namespace {
int64_t integer(const json& v) { return json_integer<int64_t>(v); }

void in_range(const std::string& context, const std::string& key, int64_t v, int64_t lo,
              int64_t hi) {
  FNVLP_CHECK(v >= lo && v <= hi,
              context << ": " << key << " is " << v << ", outside [" << lo << ", " << hi << "]");
}

// The values that size allocations (pair and image tables, coverage bitmaps) are bounded before
// anything uses them: by the schema's limits, and the pairs and images a shard claims by the bytes
// they need in it, where `bytes` must equal the file's size before the file is opened. So a
// manifest cannot make a reader allocate more than the shards on disk hold.
void check_sizes(const Manifest& m, const std::string& context) {
  in_range(context, "image_size", m.image_size, 1, 4096);
  in_range(context, "max_len", m.max_len, 2, 32767);
  in_range(context, "vocab.size", m.vocab_size, 1, INT32_MAX);
  const int64_t pair_bytes = 4 * m.max_len + 30;  // tokens, pair_image/id, image_id, length, label
  // A stored JPEG takes more than its offset and size entries plus the ~100 bytes of the smallest
  // JPEG stream; a raw image its pixels.
  const int64_t image_bytes =
      m.image_codec == ImageCodec::kJpeg ? 16 + 100 : 3 * m.image_size * m.image_size;
  int64_t total_bytes = 0;
  for (const auto& s : m.shards) {
    const std::string key = "shard " + s.file;
    in_range(context, key + " bytes", s.bytes, 0, INT64_MAX / 2);
    in_range(context, key + " first_pair_id", s.first_pair_id, 0, INT64_MAX / 2);
    in_range(context, key + " num_pairs", s.num_pairs, 0, s.bytes / pair_bytes);
    in_range(context, key + " num_images", s.num_images, 0, s.bytes / image_bytes);
    total_bytes += s.bytes;
    FNVLP_CHECK(total_bytes <= INT64_MAX / 2, context << ": shard bytes overflow");
  }
  in_range(context, "num_pairs", m.num_pairs, 0, total_bytes / pair_bytes);
  in_range(context, "num_images", m.num_images, 0, total_bytes / image_bytes);
}

}  // namespace

Manifest Manifest::from_json(const json& j, const std::string& context) {
  Manifest m;
  try {
    m.schema = integer(j.at("fnvlp_manifest_schema"));
    FNVLP_CHECK(m.schema == kManifestSchemaVersion, context << ": manifest schema " << m.schema
                                                            << ", this build reads "
                                                            << kManifestSchemaVersion);
    m.image_codec = codec_of_schema(integer(j.at("shard_schema")), context);
    // Manifests written before the codec was recorded are raw (schema 1).
    if (j.contains("image_codec"))
      FNVLP_CHECK(j.at("image_codec").get<std::string>() == image_codec_name(m.image_codec),
                  context << ": image_codec " << j.at("image_codec").dump() << " but shard schema "
                          << shard_schema(m.image_codec));
    m.created_by = j.at("created_by").get<std::string>();
    m.created_at = j.at("created_at").get<std::string>();
    m.image_size = integer(j.at("image_size"));
    m.max_len = integer(j.at("max_len"));
    m.vocab_path = j.at("vocab").at("path").get<std::string>();
    m.vocab_sha256 = j.at("vocab").at("sha256").get<std::string>();
    m.vocab_size = integer(j.at("vocab").at("size"));
    if (j.at("vocab").contains("special_tokens")) {
      const json& st = j.at("vocab").at("special_tokens");
      m.special_tokens = {integer(st.at("pad")), integer(st.at("cls")), integer(st.at("sep")),
                          integer(st.at("mask"))};
      for (const int64_t id : {m.special_tokens.pad, m.special_tokens.cls, m.special_tokens.sep,
                               m.special_tokens.mask})
        FNVLP_CHECK(id >= 0 && id < m.vocab_size, context << ": special token id " << id
                                                          << " outside the vocabulary of "
                                                          << m.vocab_size);
    }
    m.num_pairs = integer(j.at("num_pairs"));
    m.num_images = integer(j.at("num_images"));
    m.records_total = integer(j.at("records").at("total"));
    m.records_filtered_by_split = integer(j.at("records").at("filtered_by_split"));
    m.rejects_total = integer(j.at("rejects").at("total"));
    m.rejects_by_reason = {};
    for (const auto& [reason, n] : j.at("rejects").at("by_reason").items())
      m.rejects_by_reason[reason] = integer(n);
    m.source = j.at("source");
    for (const auto& s : j.at("shards")) {
      const auto file = s.at("file").get<std::string>();
      // Shards live in the manifest's directory: a path elsewhere is never followed.
      FNVLP_CHECK(!file.empty() && file != "." && file != ".." &&
                      file.find('/') == std::string::npos && file.find('\0') == std::string::npos,
                  context << ": shard file '" << file
                          << "' is not a plain file name in the shard directory");
      m.shards.push_back({file, integer(s.at("first_pair_id")), integer(s.at("num_pairs")),
                          integer(s.at("num_images")), integer(s.at("bytes")),
                          s.at("sha256").get<std::string>()});
    }
  } catch (const json::exception& e) {
    FNVLP_FAIL(context << ": malformed manifest: " << e.what());
  } catch (const std::invalid_argument& e) {
    FNVLP_FAIL(context << ": malformed manifest: " << e.what());
  }
  check_sizes(m, context);
  return m;
}

Manifest Manifest::load(const std::string& dir) {
  const std::string path = (fs::path(dir) / kManifestName).string();
  std::ifstream in(path);
  FNVLP_CHECK(in.good(), path << ": missing (the dataset was never completed, or DIR is wrong)");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    FNVLP_FAIL(path << ": not valid JSON: " << e.what());
  }
  return from_json(j, path);
}

void Manifest::save(const std::string& dir) const {
  const fs::path final_path = fs::path(dir) / kManifestName;
  const fs::path tmp = fs::path(dir) / (std::string(".") + kManifestName + ".tmp");
  {
    std::ofstream out(tmp);
    FNVLP_CHECK(out.good(), "cannot write " << tmp.string());
    out << to_json().dump(2) << "\n";
    out.flush();
    FNVLP_CHECK(out.good(), "write failed: " << tmp.string() << " (disk full?)");
  }
  fs::rename(tmp, final_path);
}

namespace {

// Checks one shard against its manifest entry; appends problems instead of stopping at the first.
void verify_shard(const std::string& dir, const Manifest& m, const ManifestShard& entry,
                  VerifyReport& report) {
  const std::string path = (fs::path(dir) / entry.file).string();
  auto problem = [&](const std::string& what) { report.problems.push_back(path + ": " + what); };
  if (!fs::exists(path)) return problem("missing");
  if (!fs::is_regular_file(path)) return problem("not a regular file");
  // Fail closed: a file whose size or sha256 differs from the manifest is reported and never
  // handed to libhdf5, whose decoders are not hardened against crafted or rotten metadata.
  const auto bytes = static_cast<int64_t>(fs::file_size(path));
  if (bytes != entry.bytes)
    return problem("size " + std::to_string(bytes) + " bytes, manifest says " +
                   std::to_string(entry.bytes) + " (not opened)");
  const std::string sha = sha256_file(path);
  report.bytes_read += bytes;
  if (sha != entry.sha256)
    return problem("sha256 " + sha + " does not match the manifest's " + entry.sha256 +
                   " (not opened)");
  try {
    ShardReader reader(path);
    const auto& h = reader.header();
    if (h.codec != m.image_codec)
      problem(std::string("image codec ") + image_codec_name(h.codec) + ", the manifest says " +
              image_codec_name(m.image_codec));
    if (h.image_size != m.image_size) problem("image_size differs from the manifest");
    if (h.max_len != m.max_len) problem("max_len differs from the manifest");
    if (h.vocab_sha256 != m.vocab_sha256) problem("vocab_sha256 differs from the manifest");
    if (h.num_pairs != entry.num_pairs)
      problem("num_pairs " + std::to_string(h.num_pairs) + ", manifest says " +
              std::to_string(entry.num_pairs));
    if (reader.num_images() != entry.num_images)
      problem("holds " + std::to_string(reader.num_images()) + " images, manifest says " +
              std::to_string(entry.num_images));
    const PairColumns p = reader.read_pairs();
    std::vector<uint8_t> row_used(static_cast<size_t>(reader.num_images()), 0);
    const auto L = static_cast<size_t>(h.max_len);
    for (size_t i = 0; i < p.size(); ++i) {
      const std::string at = " at pair row " + std::to_string(i);
      if (p.pair_id[i] != entry.first_pair_id + static_cast<int64_t>(i)) {
        problem("/pair_id is not the contiguous range [" + std::to_string(entry.first_pair_id) +
                ", ...)" + at);
        break;
      }
      if (p.pair_image[i] < 0 || p.pair_image[i] >= reader.num_images()) {
        problem("/pair_image out of range" + at);
        break;
      }
      row_used[static_cast<size_t>(p.pair_image[i])] = 1;
      if (p.image_id[i] < 0 || p.image_id[i] >= m.num_images) {
        problem("/image_id out of range" + at);
        break;
      }
      report.image_id_seen[static_cast<size_t>(p.image_id[i])] = 1;
      const int32_t* t = &p.tokens[i * L];
      const int len = p.lengths[i];
      bool layout_ok = len >= 2 && static_cast<size_t>(len) <= L && t[0] != 0 && t[len - 1] != 0;
      for (size_t k = static_cast<size_t>(std::max(len, 0)); layout_ok && k < L; ++k)
        layout_ok = t[k] == 0;
      for (int k = 0; layout_ok && k < len; ++k) layout_ok = t[k] > 0 && t[k] < m.vocab_size;
      if (!layout_ok) {
        problem("/tokens or /lengths do not hold [CLS] ... [SEP] [PAD]..." + at);
        break;
      }
    }
    for (size_t r = 0; r < row_used.size(); ++r)
      if (!row_used[r]) {
        problem("image row " + std::to_string(r) + " is referenced by no pair");
        break;
      }
    // Read every image chunk: a flipped bit anywhere fails its Fletcher32 check here. A stored
    // JPEG is also decoded: its header, colour space and every scan, as the loader will.
    const int64_t block = 64;
    if (h.codec == ImageCodec::kJpeg) {
      for (int64_t row = 0; row < reader.num_images(); row += block) {
        progress("verify: reading and decoding the stored JPEGs");
        EncodedImages enc;
        reader.read_jpegs(row, std::min(block, reader.num_images() - row), enc);
        for (size_t i = 0; i < enc.size(); ++i) {
          try {
            decode_stored_jpeg(enc.data(i), enc.bytes_of(i), enc.width[i], enc.height[i],
                               enc.source[i]);
          } catch (const ImageError& e) {
            report.problems.push_back(std::string(e.what()) + " (" + e.reason() + ")");
          }
        }
      }
    } else {
      std::vector<uint8_t> buf(static_cast<size_t>(block * h.image_size * h.image_size * 3));
      for (int64_t row = 0; row < reader.num_images(); row += block) {
        progress("verify: reading image chunks");
        reader.read_images(row, std::min(block, reader.num_images() - row), buf.data());
      }
    }
    report.pairs_checked += static_cast<int64_t>(p.size());
    report.images_checked += reader.num_images();
  } catch (const std::exception& e) {
    report.problems.push_back(e.what());
  }
}

}  // namespace

void check_image_coverage(const std::vector<uint8_t>& seen, VerifyReport& report) {
  for (size_t i = 0; i < seen.size(); ++i)
    if (!seen[i]) {
      report.problems.push_back("image_id " + std::to_string(i) +
                                " is used by no pair: image ids are not dense");
      return;
    }
}

VerifyReport verify_dataset(const std::string& dir, int part, int parts) {
  VerifyReport report;
  Manifest m;
  try {
    m = Manifest::load(dir);
  } catch (const std::exception& e) {
    report.problems.push_back(e.what());
    return report;
  }
  const std::string mpath = (fs::path(dir) / kManifestName).string();
  report.image_id_seen.assign(static_cast<size_t>(std::max<int64_t>(m.num_images, 0)), 0);
  // The shards must tile [0, num_pairs) in order.
  int64_t next = 0;
  for (const auto& s : m.shards) {
    if (s.first_pair_id != next || s.num_pairs <= 0)
      report.problems.push_back(mpath + ": shard " + s.file + " starts at pair " +
                                std::to_string(s.first_pair_id) + ", expected " +
                                std::to_string(next) + " (pair ids must tile 0..N-1)");
    next = s.first_pair_id + s.num_pairs;
  }
  if (next != m.num_pairs)
    report.problems.push_back(mpath + ": shards hold " + std::to_string(next) +
                              " pairs, manifest num_pairs is " + std::to_string(m.num_pairs));
  FNVLP_CHECK(parts >= 1 && part >= 0 && part < parts,
              "bad verify partition " << part << "/" << parts);
  for (size_t i = static_cast<size_t>(part); i < m.shards.size(); i += static_cast<size_t>(parts))
    verify_shard(dir, m, m.shards[i], report);
  // With a shard unread (not opened, or a read error) coverage would only repeat that problem.
  if (parts == 1 && report.problems.empty()) check_image_coverage(report.image_id_seen, report);
  return report;
}

}  // namespace fnvlp::data
