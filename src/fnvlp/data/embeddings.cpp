#include "fnvlp/data/embeddings.hpp"

#include <algorithm>
#include <cstdio>

#include "fnvlp/data/h5.hpp"

namespace fnvlp::data {

void write_embeddings(const std::string& path, const Embeddings& e) {
  const auto n = static_cast<size_t>(e.size());
  const auto d = static_cast<size_t>(e.dim);
  FNVLP_CHECK(e.image_emb.size() == n * d && e.text_emb.size() == n * d && e.image_id.size() == n &&
                  e.label.size() == n,
              path << ": inconsistent embedding columns");
  for (size_t i = 0; i < n; ++i)
    FNVLP_CHECK(e.pair_id[i] == static_cast<int64_t>(i), path << ": rows must be in pair_id order");
  const bool lambdas = !e.glofnd_lambda_image.empty();
  FNVLP_CHECK(!lambdas || (e.glofnd_lambda_image.size() == n && e.glofnd_lambda_text.size() == n),
              path << ": GloFND thresholds must cover every pair");
  std::lock_guard<std::mutex> lock(h5::global_mutex());
  const std::string tmp = path + ".tmp";
  {
    h5::Handle f = h5::create_file(tmp);
    const hsize_t hn = n, hd = d;
    const hsize_t rows = std::min<hsize_t>(std::max<hsize_t>(hn, 1), 4096);
    h5::write_dataset(f, "image_emb", e.image_emb, {hn, hd}, {rows, hd}, tmp);
    h5::write_dataset(f, "text_emb", e.text_emb, {hn, hd}, {rows, hd}, tmp);
    h5::write_dataset(f, "pair_id", e.pair_id, {hn}, {rows}, tmp);
    h5::write_dataset(f, "image_id", e.image_id, {hn}, {rows}, tmp);
    h5::write_dataset(f, "label", e.label, {hn}, {rows}, tmp);
    if (lambdas) {
      h5::write_dataset(f, "glofnd_lambda_image", e.glofnd_lambda_image, {hn}, {rows}, tmp);
      h5::write_dataset(f, "glofnd_lambda_text", e.glofnd_lambda_text, {hn}, {rows}, tmp);
    }
    h5::write_attr_int(f, "fnvlp_schema", kEmbeddingsSchemaVersion);
    h5::write_attr_int(f, "epoch", e.epoch);
    h5::write_attr_int(f, "step", e.step);
    f.close(tmp);
  }
  FNVLP_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0,
              "cannot rename " << tmp << " to " << path);
}

Embeddings read_embeddings(const std::string& path) {
  std::lock_guard<std::mutex> lock(h5::global_mutex());
  h5::Handle f = h5::open_file(path);
  const int64_t schema = h5::read_attr_int(f, "fnvlp_schema", path);
  FNVLP_CHECK(schema == kEmbeddingsSchemaVersion, path << ": embeddings schema " << schema
                                                       << ", this build reads "
                                                       << kEmbeddingsSchemaVersion);
  Embeddings e;
  e.epoch = h5::read_attr_int(f, "epoch", path);
  e.step = h5::read_attr_int(f, "step", path);
  std::vector<hsize_t> shape, tshape;
  e.image_emb = h5::read_dataset<float>(f, "image_emb", path, &shape);
  e.text_emb = h5::read_dataset<float>(f, "text_emb", path, &tshape);
  FNVLP_CHECK(shape.size() == 2 && shape == tshape,
              path << ": image_emb and text_emb shapes differ");
  e.dim = static_cast<int64_t>(shape[1]);
  e.pair_id = h5::read_dataset<int64_t>(f, "pair_id", path);
  e.image_id = h5::read_dataset<int64_t>(f, "image_id", path);
  e.label = h5::read_dataset<int32_t>(f, "label", path);
  const size_t n = shape[0];
  FNVLP_CHECK(e.pair_id.size() == n && e.image_id.size() == n && e.label.size() == n,
              path << ": per-pair datasets do not match " << n << " rows");
  for (size_t i = 0; i < n; ++i)
    FNVLP_CHECK(e.pair_id[i] == static_cast<int64_t>(i),
                path << ":/pair_id is not 0..N-1 at row " << i);
  if (h5::exists(f, "glofnd_lambda_image")) {
    e.glofnd_lambda_image = h5::read_dataset<float>(f, "glofnd_lambda_image", path);
    e.glofnd_lambda_text = h5::read_dataset<float>(f, "glofnd_lambda_text", path);
    FNVLP_CHECK(e.glofnd_lambda_image.size() == n && e.glofnd_lambda_text.size() == n,
                path << ": GloFND thresholds do not match " << n << " rows");
  }
  return e;
}

struct EmbeddingsFile::Impl {
  h5::Handle file, image, text, lam_image, lam_text;
};

EmbeddingsFile::EmbeddingsFile(const std::string& path) : impl_(new Impl), path_(path) {
  try {
    std::lock_guard<std::mutex> lock(h5::global_mutex());
    impl_->file = h5::open_file(path);
    const hid_t f = impl_->file;
    const int64_t schema = h5::read_attr_int(f, "fnvlp_schema", path);
    FNVLP_CHECK(schema == kEmbeddingsSchemaVersion, path << ": embeddings schema " << schema
                                                         << ", this build reads "
                                                         << kEmbeddingsSchemaVersion);
    epoch_ = h5::read_attr_int(f, "epoch", path);
    step_ = h5::read_attr_int(f, "step", path);
    impl_->image = h5::open_dataset(f, "image_emb", path);
    impl_->text = h5::open_dataset(f, "text_emb", path);
    const auto shape = h5::dims(impl_->image, path + ":/image_emb");
    FNVLP_CHECK(shape.size() == 2 && shape == h5::dims(impl_->text, path + ":/text_emb"),
                path << ": image_emb and text_emb must both be [N, D] with the same shape");
    n_ = static_cast<int64_t>(shape[0]);
    dim_ = static_cast<int64_t>(shape[1]);
    const auto pair_id = h5::read_dataset<int64_t>(f, "pair_id", path);
    image_id_ = h5::read_dataset<int64_t>(f, "image_id", path);
    label_ = h5::read_dataset<int32_t>(f, "label", path);
    FNVLP_CHECK(static_cast<int64_t>(pair_id.size()) == n_ &&
                    static_cast<int64_t>(image_id_.size()) == n_ &&
                    static_cast<int64_t>(label_.size()) == n_,
                path << ": pair_id/image_id/label do not match " << n_ << " rows");
    for (int64_t i = 0; i < n_; ++i)
      FNVLP_CHECK(pair_id[static_cast<size_t>(i)] == i,
                  path << ":/pair_id is not 0..N-1 at row " << i);
    has_lambda_ = h5::exists(f, "glofnd_lambda_image");
    if (has_lambda_) {
      impl_->lam_image = h5::open_dataset(f, "glofnd_lambda_image", path);
      impl_->lam_text = h5::open_dataset(f, "glofnd_lambda_text", path);
      for (const char* name : {"glofnd_lambda_image", "glofnd_lambda_text"}) {
        const auto d = h5::dims(
            std::string(name) == "glofnd_lambda_image" ? impl_->lam_image : impl_->lam_text,
            path + ":/" + name);
        FNVLP_CHECK(d.size() == 1 && static_cast<int64_t>(d[0]) == n_,
                    path << ":/" << name << " must be [" << n_ << "]");
      }
    }
  } catch (...) {
    delete impl_;
    throw;
  }
}

EmbeddingsFile::~EmbeddingsFile() {
  std::lock_guard<std::mutex> lock(h5::global_mutex());
  delete impl_;
}

void EmbeddingsFile::read_emb(bool image, int64_t row, int64_t n, float* out,
                              int64_t stride) const {
  FNVLP_CHECK(row >= 0 && n >= 0 && stride >= 1 && (n == 0 || row + (n - 1) * stride < n_),
              path_ << ": " << n << " rows from " << row << " every " << stride << " outside [0, "
                    << n_ << ")");
  if (n == 0) return;
  std::lock_guard<std::mutex> lock(h5::global_mutex());
  h5::read_rows(image ? impl_->image : impl_->text, H5T_NATIVE_FLOAT, out,
                static_cast<hsize_t>(row), static_cast<hsize_t>(n),
                path_ + (image ? ":/image_emb" : ":/text_emb"), static_cast<hsize_t>(stride));
}

void EmbeddingsFile::read_lambda(bool image, int64_t row, int64_t n, float* out) const {
  FNVLP_CHECK(has_lambda_, path_ << ": has no glofnd_lambda_image/glofnd_lambda_text");
  FNVLP_CHECK(row >= 0 && n >= 0 && row + n <= n_, path_ << ": rows outside the file");
  if (n == 0) return;
  std::lock_guard<std::mutex> lock(h5::global_mutex());
  h5::read_rows(image ? impl_->lam_image : impl_->lam_text, H5T_NATIVE_FLOAT, out,
                static_cast<hsize_t>(row), static_cast<hsize_t>(n),
                path_ + (image ? ":/glofnd_lambda_image" : ":/glofnd_lambda_text"));
}

}  // namespace fnvlp::data
