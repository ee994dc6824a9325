#pragma once
// RUN/embeddings/epoch-EEE.h5 (ARCHITECTURE.md §2), the file fnvlp-simstat reads: one row per pair
// in pair_id order, image_emb / text_emb float32 [N, D] (L2-normalised projected [CLS]), pair_id,
// image_id, label, and the GloFND thresholds when that method ran.
#include <cstdint>
#include <string>
#include <vector>

namespace fnvlp::data {

inline constexpr int64_t kEmbeddingsSchemaVersion = 1;

// Rows [first, first + size()) of an export: every pair (first = 0), or one rank's block.
struct Embeddings {
  int64_t epoch = 0;
  int64_t step = 0;
  int64_t dim = 0;
  int64_t first = 0;
  std::vector<float> image_emb;  // N * dim
  std::vector<float> text_emb;   // N * dim
  std::vector<int64_t> pair_id;
  std::vector<int64_t> image_id;
  std::vector<int32_t> label;
  std::vector<float> glofnd_lambda_image;  // empty, or size()
  std::vector<float> glofnd_lambda_text;   // empty, or size()
  int64_t size() const { return static_cast<int64_t>(pair_id.size()); }
};

// Streaming access for readers that must not hold N x D in memory (fnvlp-simstat): validates the
// schema, shapes and pair_id order on open; embeddings are read a block of rows at a time.
// image_id and label are read whole on open (offline tools), or, with kStreamed, never whole:
// pair_id is validated in pieces and read_columns() reads the rows asked for (a training rank,
// which must hold O(N / R) only).
class EmbeddingsFile {
 public:
  enum class Columns { kInMemory, kStreamed };
  explicit EmbeddingsFile(const std::string& path, Columns columns = Columns::kInMemory);
  ~EmbeddingsFile();
  EmbeddingsFile(const EmbeddingsFile&) = delete;
  EmbeddingsFile& operator=(const EmbeddingsFile&) = delete;

  const std::string& path() const { return path_; }
  int64_t size() const { return n_; }
  int64_t dim() const { return dim_; }
  int64_t epoch() const { return epoch_; }
  int64_t step() const { return step_; }
  // Every row's image_id / label (kInMemory; empty when kStreamed).
  const std::vector<int64_t>& image_id() const { return image_id_; }
  const std::vector<int32_t>& label() const { return label_; }
  // Rows [row, row + n) of image_id and label into image_id and label (n each), either mode.
  void read_columns(int64_t row, int64_t n, int64_t* image_id, int32_t* label) const;
  bool has_lambda() const { return has_lambda_; }
  // Rows row, row + stride, ... (n rows) of image_emb (image = true) or text_emb into out
  // (n * dim floats).
  void read_emb(bool image, int64_t row, int64_t n, float* out, int64_t stride = 1) const;
  // Rows [row, row + n) of glofnd_lambda_image / glofnd_lambda_text.
  void read_lambda(bool image, int64_t row, int64_t n, float* out) const;

 private:
  struct Impl;
  Impl* impl_ = nullptr;
  std::string path_;
  int64_t n_ = 0, dim_ = 0, epoch_ = 0, step_ = 0;
  bool has_lambda_ = false;
  bool in_memory_ = true;
  std::vector<int64_t> image_id_;
  std::vector<int32_t> label_;
};

// Writes under a temporary name and renames. Rows must already be in pair_id order 0..N-1.
void write_embeddings(const std::string& path, const Embeddings& e);
// Reads and validates (schema, shapes, pair_id order).
Embeddings read_embeddings(const std::string& path);

// An export written by several writers, each its own rows, one after another: create() makes
// the file with every dataset of `total` rows and its chunks allocated; write_rows() fills rows
// [e.first, e.first + e.size()) (pair_id first..); the bytes equal write_embeddings' of the
// concatenation, whatever the split.
void create_embeddings(const std::string& path, int64_t total, int64_t dim, bool lambdas,
                       int64_t epoch, int64_t step);
void write_embedding_rows(const std::string& path, const Embeddings& e);
// Rows [first, first + n) of every column (O(n) memory), validated as read_embeddings does;
// `total` (if given) gets the file's row count.
Embeddings read_embedding_rows(const std::string& path, int64_t first, int64_t n,
                               int64_t* total = nullptr);

}  // namespace fnvlp::data
