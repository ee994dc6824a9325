#pragma once
// DIR/manifest.json: the table of contents of a sharded dataset, written last by rank 0 (so a
// directory without one was never completed) and checked whole by `fnvlp-shard --verify`.
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fnvlp/data/image_codec.hpp"
#include "fnvlp/data/tokenizer.hpp"

namespace fnvlp::data {

inline constexpr int64_t kManifestSchemaVersion = 1;
inline constexpr const char* kManifestName = "manifest.json";
inline constexpr const char* kRejectsName = "rejects.jsonl";

struct ManifestShard {
  std::string file;           // relative to the dataset directory
  int64_t first_pair_id = 0;  // pairs [first_pair_id, first_pair_id + num_pairs)
  int64_t num_pairs = 0;
  int64_t num_images = 0;  // image rows stored in this shard
  int64_t bytes = 0;
  std::string sha256;
};

struct Manifest {
  int64_t schema = kManifestSchemaVersion;
  std::string created_by;
  std::string created_at;  // UTC, ISO 8601 (informational; shards themselves are reproducible)
  // raw: decoded squares of image_size; jpeg: JPEG streams, longer side <= image_size
  ImageCodec image_codec = ImageCodec::kRaw;
  int64_t image_size = 0;
  int64_t max_len = 0;
  std::string vocab_path;
  std::string vocab_sha256;
  int64_t vocab_size = 0;
  // The vocabulary's special token ids (vocab.special_tokens); not known in manifests written
  // before they were recorded: PairDataset::special_tokens() then reads them from vocab_path.
  SpecialTokens special_tokens;
  int64_t num_pairs = 0;
  int64_t num_images = 0;  // distinct images (= number of distinct image_id values)
  int64_t records_total = 0;
  int64_t records_filtered_by_split = 0;
  int64_t rejects_total = 0;
  std::map<std::string, int64_t> rejects_by_reason;
  nlohmann::json source;  // what was sharded: input, format, image_root, split, options
  std::vector<ManifestShard> shards;

  nlohmann::json to_json() const;
  static Manifest from_json(const nlohmann::json& j, const std::string& context);
  static Manifest load(const std::string& dir);  // throws naming the file on any fault
  void save(const std::string& dir) const;       // temp file + rename
};

// Result of checking a dataset directory: every problem found (not only the first), each naming
// the file and, where it applies, the dataset.
struct VerifyReport {
  std::vector<std::string> problems;
  int64_t pairs_checked = 0;
  int64_t images_checked = 0;
  int64_t bytes_read = 0;
  std::vector<uint8_t> image_id_seen;  // per global image_id: referenced by a checked pair
  bool ok() const { return problems.empty(); }
};

// Checks manifest <-> shards: file presence, sizes, sha256, schema version and attributes, dataset
// shapes, token layout, pair_id coverage 0..N-1, image references; reads every chunk of every
// dataset (Fletcher32). A shard whose size or sha256 differs is reported and not opened. With
// parts > 1 only shards i with i % parts == part are read (MPI ranks split the work); image_id
// coverage needs every shard read, so it is checked only when parts == 1 and nothing else was
// found, and MPI callers combine image_id_seen and call check_image_coverage themselves.
VerifyReport verify_dataset(const std::string& dir, int part = 0, int parts = 1);
void check_image_coverage(const std::vector<uint8_t>& image_id_seen, VerifyReport& report);

}  // namespace fnvlp::data
