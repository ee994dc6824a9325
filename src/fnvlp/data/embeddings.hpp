#pragma once
// RUN/embeddings/epoch-EEE.h5 (DESIGN.md §2), the file fnvlp-simstat reads: one row per pair in
// pair_id order, image_emb / text_emb float32 [N, D] (L2-normalised projected [CLS]), pair_id,
// image_id, label, and the GloFND thresholds when that method ran.
#include <cstdint>
#include <string>
#include <vector>

namespace fnvlp::data {

inline constexpr int64_t kEmbeddingsSchemaVersion = 1;

struct Embeddings {
  int64_t epoch = 0;
  int64_t step = 0;
  int64_t dim = 0;
  std::vector<float> image_emb;  // N * dim
  std::vector<float> text_emb;   // N * dim
  std::vector<int64_t> pair_id;
  std::vector<int64_t> image_id;
  std::vector<int32_t> label;
  std::vector<float> glofnd_lambda_image;  // empty, or N
  std::vector<float> glofnd_lambda_text;   // empty, or N
  int64_t size() const { return static_cast<int64_t>(pair_id.size()); }
};

// Writes under a temporary name and renames. Rows must already be in pair_id order 0..N-1.
void write_embeddings(const std::string& path, const Embeddings& e);
// Reads and validates (schema, shapes, pair_id order).
Embeddings read_embeddings(const std::string& path);

}  // namespace fnvlp::data
