#include "fnvlp/data/embeddings.hpp"

#include <algorithm>
#include <cstdio>

#include "fnvlp/data/h5.hpp"

namespace fnvlp::data {

namespace {

// Chunks of at most 4096 rows: a function of the export's size, never of who writes it.
hsize_t chunk_rows(int64_t total) {
  return std::min<hsize_t>(std::max<hsize_t>(static_cast<hsize_t>(total), 1), 4096);
}

void check_columns(const std::string& path, const Embeddings& e) {
  const auto n = static_cast<size_t>(e.size());
  const auto d = static_cast<size_t>(e.dim);
  FNVLP_CHECK(e.first >= 0 && e.image_emb.size() == n * d && e.text_emb.size() == n * d &&
                  e.image_id.size() == n && e.label.size() == n,
              path << ": inconsistent embedding columns");
  for (size_t i = 0; i < n; ++i)
    FNVLP_CHECK(e.pair_id[i] == e.first + static_cast<int64_t>(i),
                path << ": rows must be in pair_id order from " << e.first);
  FNVLP_CHECK(e.glofnd_lambda_image.empty() ||
                  (e.glofnd_lambda_image.size() == n && e.glofnd_lambda_text.size() == n),
              path << ": GloFND thresholds must cover every pair");
}

}  // namespace

void create_embeddings(const std::string& path, int64_t total, int64_t dim, bool lambdas,
                       int64_t epoch, int64_t step) {
  FNVLP_CHECK(total >= 0 && dim > 0, path << ": cannot create " << total << " x " << dim);
  std::lock_guard<std::mutex> lock(h5::global_mutex());
  h5::Handle f = h5::create_file(path);
  const hsize_t hn = static_cast<hsize_t>(total), hd = static_cast<hsize_t>(dim);
  const hsize_t rows = chunk_rows(total);
  const auto make = [&](const char* name, hid_t type, std::vector<hsize_t> shape,
                        std::vector<hsize_t> chunk) {
    h5::DatasetSpec spec{std::move(shape), std::move(chunk)};
    spec.early_alloc = true;
    h5::create_dataset(f, name, type, spec, path).close(path + ":/" + name);
  };
  make("image_emb", H5T_NATIVE_FLOAT, {hn, hd}, {rows, hd});
  make("text_emb", H5T_NATIVE_FLOAT, {hn, hd}, {rows, hd});
  make("pair_id", H5T_NATIVE_INT64, {hn}, {rows});
  make("image_id", H5T_NATIVE_INT64, {hn}, {rows});
  make("label", H5T_NATIVE_INT32, {hn}, {rows});
  if (lambdas) {
    make("glofnd_lambda_image", H5T_NATIVE_FLOAT, {hn}, {rows});
    make("glofnd_lambda_text", H5T_NATIVE_FLOAT, {hn}, {rows});
  }
  h5::write_attr_int(f, "fnvlp_schema", kEmbeddingsSchemaVersion);
  h5::write_attr_int(f, "epoch", epoch);
  h5::write_attr_int(f, "step", step);
  f.close(path);
}

void write_embedding_rows(const std::string& path, const Embeddings& e) {
  check_columns(path, e);
  std::lock_guard<std::mutex> lock(h5::global_mutex());
  h5::Handle f = h5::open_file(path, true);
  const bool lambdas = !e.glofnd_lambda_image.empty();
  const bool has = h5::exists(f, "glofnd_lambda_image");
  FNVLP_CHECK(!lambdas || has, path << ": has no GloFND thresholds for rows " << e.first << "..");
  FNVLP_CHECK(lambdas || !has,
              path << ": GloFND thresholds of rows " << e.first << ".. are missing");
  const auto n = static_cast<hsize_t>(e.size());
  const auto first = static_cast<hsize_t>(e.first);
  const auto put = [&](const char* name, hid_t type, const void* data) {
    h5::Handle ds = h5::open_dataset(f, name, path);
    const std::string ctx = path + ":/" + name;
    const std::vector<hsize_t> shape = h5::dims(ds, ctx);
    FNVLP_CHECK(first + n <= shape[0] && (shape.size() == 1 || shape[1] == hsize_t(e.dim)),
                ctx << ": rows " << first << ".." << first + n << " of width " << e.dim
                    << " do not fit its " << shape[0] << " rows");
    h5::write_rows(ds, type, data, first, n, false, ctx);
    ds.close(ctx);
  };
  put("image_emb", H5T_NATIVE_FLOAT, e.image_emb.data());
  put("text_emb", H5T_NATIVE_FLOAT, e.text_emb.data());
  put("pair_id", H5T_NATIVE_INT64, e.pair_id.data());
  put("image_id", H5T_NATIVE_INT64, e.image_id.data());
  put("label", H5T_NATIVE_INT32, e.label.data());
  if (lambdas) {
    put("glofnd_lambda_image", H5T_NATIVE_FLOAT, e.glofnd_lambda_image.data());
    put("glofnd_lambda_text", H5T_NATIVE_FLOAT, e.glofnd_lambda_text.data());
  }
  f.close(path);
}

void write_embeddings(const std::string& path, const Embeddings& e) {
  FNVLP_CHECK(e.first == 0, path << ": a whole export starts at pair 0, not " << e.first);
  check_columns(path, e);
  const std::string tmp = path + ".tmp";
  create_embeddings(tmp, e.size(), e.dim, !e.glofnd_lambda_image.empty(), e.epoch, e.step);
  write_embedding_rows(tmp, e);
  FNVLP_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0,
              "cannot rename " << tmp << " to " << path);
}

namespace {

// Rows [first, first + n) of every column; n < 0: to the last row.
Embeddings read_rows_of(const std::string& path, int64_t first, int64_t n, int64_t* total_out) {
  std::lock_guard<std::mutex> lock(h5::global_mutex());
  h5::Handle f = h5::open_file(path);
  const int64_t schema = h5::read_attr_int(f, "fnvlp_schema", path);
  FNVLP_CHECK(schema == kEmbeddingsSchemaVersion, path << ": embeddings schema " << schema
                                                       << ", this build reads "
                                                       << kEmbeddingsSchemaVersion);
  Embeddings e;
  e.epoch = h5::read_attr_int(f, "epoch", path);
  e.step = h5::read_attr_int(f, "step", path);
  h5::Handle image = h5::open_dataset(f, "image_emb", path);
  h5::Handle text = h5::open_dataset(f, "text_emb", path);
  const auto shape = h5::dims(image, path + ":/image_emb");
  FNVLP_CHECK(shape.size() == 2 && shape == h5::dims(text, path + ":/text_emb"),
              path << ": image_emb and text_emb shapes differ");
  const auto total = static_cast<int64_t>(shape[0]);
  if (total_out) *total_out = total;
  e.dim = static_cast<int64_t>(shape[1]);
  if (n < 0) n = total - first;
  FNVLP_CHECK(first >= 0 && n >= 0 && first + n <= total,
              path << ": rows " << first << ".." << first + n << " outside its " << total);
  e.first = first;
  const auto un = static_cast<size_t>(n);
  const auto read = [&](const char* name, hid_t type, void* out, hid_t ds, size_t rank) {
    const std::string ctx = path + ":/" + name;
    const std::vector<hsize_t> d = h5::dims(ds, ctx);
    FNVLP_CHECK(d.size() == rank && static_cast<int64_t>(d[0]) == total,
                path << ": per-pair datasets do not match " << total << " rows (" << name << ")");
    h5::read_rows(ds, type, out, static_cast<hsize_t>(first), static_cast<hsize_t>(n), ctx);
  };
  const auto column = [&](const char* name, hid_t type, void* out) {
    h5::Handle ds = h5::open_dataset(f, name, path);
    read(name, type, out, ds, 1);
  };
  e.image_emb.resize(un * static_cast<size_t>(e.dim));
  e.text_emb.resize(e.image_emb.size());
  read("image_emb", H5T_NATIVE_FLOAT, e.image_emb.data(), image, 2);
  read("text_emb", H5T_NATIVE_FLOAT, e.text_emb.data(), text, 2);
  e.pair_id.resize(un);
  e.image_id.resize(un);
  e.label.resize(un);
  column("pair_id", H5T_NATIVE_INT64, e.pair_id.data());
  column("image_id", H5T_NATIVE_INT64, e.image_id.data());
  column("label", H5T_NATIVE_INT32, e.label.data());
  for (size_t i = 0; i < un; ++i)
    FNVLP_CHECK(e.pair_id[i] == first + static_cast<int64_t>(i),
                path << ":/pair_id is not 0..N-1 at row " << first + static_cast<int64_t>(i));
  if (h5::exists(f, "glofnd_lambda_image")) {
    e.glofnd_lambda_image.resize(un);
    e.glofnd_lambda_text.resize(un);
    column("glofnd_lambda_image", H5T_NATIVE_FLOAT, e.glofnd_lambda_image.data());
    column("glofnd_lambda_text", H5T_NATIVE_FLOAT, e.glofnd_lambda_text.data());
  }
  return e;
}

}  // namespace

Embeddings read_embeddings(const std::string& path) { return read_rows_of(path, 0, -1, nullptr); }

Embeddings read_embedding_rows(const std::string& path, int64_t first, int64_t n, int64_t* total) {
  FNVLP_CHECK(n >= 0, path << ": cannot read " << n << " rows");
  return read_rows_of(path, first, n, total);
}

struct EmbeddingsFile::Impl {
  h5::Handle file, image, text, lam_image, lam_text, image_id, label;
};

EmbeddingsFile::EmbeddingsFile(const std::string& path, Columns columns)
    : impl_(new Impl), path_(path), in_memory_(columns == Columns::kInMemory) {
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
    impl_->image_id = h5::open_dataset(f, "image_id", path);
    impl_->label = h5::open_dataset(f, "label", path);
    h5::Handle pair_id = h5::open_dataset(f, "pair_id", path);
    for (const auto& [ds, name] : {std::pair<hid_t, const char*>{pair_id, "pair_id"},
                                   {impl_->image_id, "image_id"},
                                   {impl_->label, "label"}}) {
      const auto d = h5::dims(ds, path + ":/" + name);
      FNVLP_CHECK(
          d.size() == 1 && static_cast<int64_t>(d[0]) == n_,
          path << ": pair_id/image_id/label do not match " << n_ << " rows (/" << name << ")");
    }
    // pair_id in pieces: a streamed reader holds O(piece), not O(N).
    constexpr int64_t kPiece = int64_t{1} << 20;
    std::vector<int64_t> ids(static_cast<size_t>(std::min(n_, kPiece)));
    for (int64_t r0 = 0; r0 < n_; r0 += kPiece) {
      const int64_t rn = std::min(kPiece, n_ - r0);
      h5::read_rows(pair_id, H5T_NATIVE_INT64, ids.data(), static_cast<hsize_t>(r0),
                    static_cast<hsize_t>(rn), path + ":/pair_id");
      for (int64_t i = 0; i < rn; ++i)
        FNVLP_CHECK(ids[static_cast<size_t>(i)] == r0 + i,
                    path << ":/pair_id is not 0..N-1 at row " << r0 + i);
    }
    pair_id.close(path + ":/pair_id");
    if (in_memory_) {
      image_id_.resize(static_cast<size_t>(n_));
      label_.resize(static_cast<size_t>(n_));
      if (n_ > 0) {
        h5::read_rows(impl_->image_id, H5T_NATIVE_INT64, image_id_.data(), 0,
                      static_cast<hsize_t>(n_), path + ":/image_id");
        h5::read_rows(impl_->label, H5T_NATIVE_INT32, label_.data(), 0, static_cast<hsize_t>(n_),
                      path + ":/label");
      }
    }
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

void EmbeddingsFile::read_columns(int64_t row, int64_t n, int64_t* image_id, int32_t* label) const {
  FNVLP_CHECK(row >= 0 && n >= 0 && row + n <= n_,
              path_ << ": rows [" << row << ", " << row + n << ") outside [0, " << n_ << ")");
  if (n == 0) return;
  if (in_memory_) {
    std::copy_n(image_id_.data() + row, n, image_id);
    std::copy_n(label_.data() + row, n, label);
    return;
  }
  std::lock_guard<std::mutex> lock(h5::global_mutex());
  h5::read_rows(impl_->image_id, H5T_NATIVE_INT64, image_id, static_cast<hsize_t>(row),
                static_cast<hsize_t>(n), path_ + ":/image_id");
  h5::read_rows(impl_->label, H5T_NATIVE_INT32, label, static_cast<hsize_t>(row),
                static_cast<hsize_t>(n), path_ + ":/label");
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
