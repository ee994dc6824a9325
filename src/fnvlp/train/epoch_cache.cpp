#include "fnvlp/train/epoch_cache.hpp"

#include <algorithm>

#include "fnvlp/core/error.hpp"
#include "fnvlp/store/checkpoint.hpp"

namespace fnvlp::train {

namespace {
constexpr const char* kFile = "epoch_cache";
}

EpochCache::EpochCache(const data::PairRange& block, int64_t dim)
    : block_(block),
      dim_(dim),
      img_(torch::zeros({block.size(), dim})),
      txt_(torch::zeros({block.size(), dim})),
      seen_(static_cast<size_t>(block.size()), 0) {}

void EpochCache::record(const torch::Tensor& pair_id, const torch::Tensor& img,
                        const torch::Tensor& txt) {
  torch::NoGradGuard no_grad;
  const torch::Tensor ids = pair_id.to(torch::kCPU, torch::kLong).contiguous();
  const int64_t n = ids.numel();
  FNVLP_CHECK(
      img.dim() == 2 && img.size(0) == n && img.size(1) == dim_ && txt.sizes() == img.sizes(),
      "epoch cache: " << n << " pairs need image and text rows [" << n << ", " << dim_ << "], got "
                      << img.sizes() << " and " << txt.sizes());
  const int64_t* p = ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    FNVLP_CHECK(p[i] >= block_.begin && p[i] < block_.end,
                "epoch cache: pair " << p[i] << " is outside this rank's block [" << block_.begin
                                     << ", " << block_.end << ")");
  // Both in one copy to the host (from a GPU, each copy waits for the queued work).
  const torch::Tensor both =
      torch::stack({img.detach().to(torch::kFloat), txt.detach().to(torch::kFloat)})
          .to(torch::kCPU);
  // A step whose embeddings are not finite is skipped by the trainer: its rows keep their values.
  if (!torch::isfinite(both).all().item<bool>()) return;
  const torch::Tensor rows = ids - block_.begin;
  img_.index_copy_(0, rows, both[0]);
  txt_.index_copy_(0, rows, both[1]);
  for (int64_t i = 0; i < n; ++i) seen_[static_cast<size_t>(p[i] - block_.begin)] = 1;
}

std::vector<int64_t> EpochCache::unseen() const {
  std::vector<int64_t> out;
  for (size_t k = 0; k < seen_.size(); ++k)
    if (!seen_[k]) out.push_back(block_.begin + static_cast<int64_t>(k));
  return out;
}

void EpochCache::fill(const std::vector<int64_t>& pair_ids, const std::vector<float>& img,
                      const std::vector<float>& txt) {
  const auto n = static_cast<int64_t>(pair_ids.size());
  FNVLP_CHECK(static_cast<int64_t>(img.size()) == n * dim_ && txt.size() == img.size(),
              "epoch cache: " << n << " pairs need " << n * dim_ << " floats per side");
  const auto opts = torch::TensorOptions().dtype(torch::kFloat);
  record(torch::tensor(pair_ids, torch::kLong),
         torch::from_blob(const_cast<float*>(img.data()), {n, dim_}, opts),
         torch::from_blob(const_cast<float*>(txt.data()), {n, dim_}, opts));
  for (int64_t id : pair_ids) seen_[static_cast<size_t>(id - block_.begin)] = 0;
}

void EpochCache::save(const std::string& dir, const Comm& comm, int64_t num_pairs) const {
  const auto n = static_cast<size_t>(block_.size()), d = static_cast<size_t>(dim_);
  std::vector<int64_t> ids(n);
  std::vector<float> rows(n * (2 * d + 1));
  const float* img = img_.data_ptr<float>();
  const float* txt = txt_.data_ptr<float>();
  for (size_t k = 0; k < n; ++k) {
    ids[k] = block_.begin + static_cast<int64_t>(k);
    float* r = &rows[k * (2 * d + 1)];
    std::copy_n(img + k * d, d, r);
    std::copy_n(txt + k * d, d, r + d);
    r[2 * d] = seen_[k] ? 1.0f : 0.0f;
  }
  store::save_per_pair(dir, kFile, comm, ids, rows, static_cast<int64_t>(2 * d + 1), num_pairs);
}

void EpochCache::load(const std::string& dir, const Comm& comm) {
  const auto n = static_cast<size_t>(block_.size()), d = static_cast<size_t>(dim_);
  std::vector<int64_t> ids(n);
  for (size_t k = 0; k < n; ++k) ids[k] = block_.begin + static_cast<int64_t>(k);
  const store::PerPairRows got = store::load_per_pair(dir, kFile, comm, ids);
  comm.collective([&] {
    FNVLP_CHECK(got.cols == static_cast<int64_t>(2 * d + 1),
                dir << "/" << kFile << ".h5: " << got.cols << " columns, embeddings of width "
                    << dim_ << " need " << 2 * d + 1);
    const auto missing = std::count(got.valid.begin(), got.valid.end(), uint8_t{0});
    FNVLP_CHECK(missing == 0, dir << "/" << kFile << ".h5: " << missing
                                  << " pairs of this rank's block have no saved state");
  });
  float* img = img_.data_ptr<float>();
  float* txt = txt_.data_ptr<float>();
  for (size_t k = 0; k < n; ++k) {
    const float* r = &got.values[k * (2 * d + 1)];
    std::copy_n(r, d, img + k * d);
    std::copy_n(r + d, d, txt + k * d);
    seen_[k] = r[2 * d] != 0.0f ? 1 : 0;
  }
}

}  // namespace fnvlp::train
