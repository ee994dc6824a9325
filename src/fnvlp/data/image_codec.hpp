#pragma once
// How a shard stores its images (shard.hpp): decoded (raw, schema 1) or as JPEG streams (schema 2).
#include <cstdint>
#include <string>
#include <vector>

#include "fnvlp/core/error.hpp"

namespace fnvlp::data {

// Schema 1 stores decoded images; schema 2 adds image_codec and the jpeg datasets. Raw shards are
// still written as schema 1, byte for byte as before, so a build that reads only schema 1 reads
// them, and refuses a jpeg shard by its schema number.
inline constexpr int64_t kShardSchemaRaw = 1;
inline constexpr int64_t kShardSchemaJpeg = 2;

enum class ImageCodec { kRaw, kJpeg };

inline ImageCodec parse_image_codec(const std::string& name) {
  if (name == "raw") return ImageCodec::kRaw;
  if (name == "jpeg") return ImageCodec::kJpeg;
  FNVLP_FAIL("image codec '" << name << "': expected raw or jpeg");
}

inline const char* image_codec_name(ImageCodec codec) {
  return codec == ImageCodec::kJpeg ? "jpeg" : "raw";
}

inline int64_t shard_schema(ImageCodec codec) {
  return codec == ImageCodec::kJpeg ? kShardSchemaJpeg : kShardSchemaRaw;
}

// The codec of a shard schema number; throws naming `context` for an unknown one.
inline ImageCodec codec_of_schema(int64_t schema, const std::string& context) {
  FNVLP_CHECK(schema == kShardSchemaRaw || schema == kShardSchemaJpeg,
              context << ": shard schema version " << schema << ", this build reads versions "
                      << kShardSchemaRaw << " (raw images) and " << kShardSchemaJpeg << " (jpeg)");
  return schema == kShardSchemaJpeg ? ImageCodec::kJpeg : ImageCodec::kRaw;
}

// The stored JPEGs of some image rows of a jpeg shard, undecoded.
struct EncodedImages {
  std::vector<uint8_t> bytes;
  std::vector<int64_t> offset{0};  // image i is bytes [offset[i], offset[i + 1])
  std::vector<int32_t> height, width;
  std::vector<std::string> source;  // "FILE:/image_bytes row R", for errors
  size_t size() const { return height.size(); }
  const uint8_t* data(size_t i) const { return bytes.data() + offset[i]; }
  size_t bytes_of(size_t i) const { return static_cast<size_t>(offset[i + 1] - offset[i]); }
};

}  // namespace fnvlp::data
