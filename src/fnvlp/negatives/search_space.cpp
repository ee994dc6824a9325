#include "fnvlp/negatives/search_space.hpp"

#include <algorithm>
#include <numeric>

#include "fnvlp/core/error.hpp"
#include "fnvlp/data/sampler.hpp"
#include "fnvlp/negatives/quantile_pick.hpp"

namespace fnvlp::negatives {

namespace {

torch::Tensor similarity_from_embeddings(const torch::Tensor& img, const torch::Tensor& txt) {
  FNVLP_CHECK(img.dim() == 2 && txt.dim() == 2 && img.sizes() == txt.sizes(),
              "search space embeddings must both be [M, E], got image " << img.sizes() << " text "
                                                                        << txt.sizes());
  torch::NoGradGuard no_grad;
  // S = S_i2t + S_t2i with S_i2t = I Tᵀ and S_t2i = T Iᵀ = (I Tᵀ)ᵀ (falcon.txt §3.2).
  auto a = torch::matmul(img.to(torch::kFloat), txt.to(torch::kFloat).t());
  return (a + a.t()).to(torch::kCPU).contiguous();
}

}  // namespace

SearchSpace::SearchSpace(std::vector<int64_t> pair_ids, const torch::Tensor& img,
                         const torch::Tensor& txt)
    : SearchSpace(std::move(pair_ids), similarity_from_embeddings(img, txt)) {}

SearchSpace::SearchSpace(std::vector<int64_t> pair_ids, torch::Tensor S)
    : pair_ids_(std::move(pair_ids)) {
  const auto M = static_cast<int64_t>(pair_ids_.size());
  FNVLP_CHECK(
      S.dim() == 2 && S.size(0) == M && S.size(1) == M,
      "search space of " << M << " pairs needs S [" << M << ", " << M << "], got " << S.sizes());
  S_ = S.detach().to(torch::kCPU, torch::kFloat).contiguous();
  // The picker orders by value: a NaN would break its strict ordering, so refuse it here once.
  FNVLP_CHECK(torch::isfinite(S_).all().item<bool>(),
              "search space similarity has non-finite entries (NaN/inf embeddings?)");
  unselected_.resize(static_cast<size_t>(M));
  std::iota(unselected_.begin(), unselected_.end(), 0);
}

void SearchSpace::select(int64_t local) {
  auto it = std::lower_bound(unselected_.begin(), unselected_.end(), local);
  FNVLP_CHECK(it != unselected_.end() && *it == local,
              "search space: member " << local << " selected twice");
  unselected_.erase(it);
}

ComposedBatch SearchSpace::next_batch(int64_t B, const std::function<double(int64_t)>& q_of_row,
                                      uint64_t draw) {
  FNVLP_CHECK(B >= 1, "batch size must be positive, got " << B);
  FNVLP_CHECK(B <= remaining(), "search space has " << remaining() << " unselected pairs left, "
                                                    << "fewer than a batch of " << B);
  ComposedBatch out;
  out.local.reserve(static_cast<size_t>(B));
  // Alg. 1 lines 4–6: the first member uniformly from U.
  int64_t last = unselected_[static_cast<size_t>(
      data::uniform_below(draw, static_cast<uint64_t>(unselected_.size())))];
  select(last);
  out.local.push_back(last);
  const float* S = S_.data_ptr<float>();
  const int64_t M = size();
  // Alg. 1 lines 7–11: i <- index of the q-quantile of {S[i, j] : j in U}, i the last member.
  for (int64_t t = 1; t < B; ++t) {
    const double q = q_of_row(last);
    const int64_t next = quantile_pick(S + last * M, unselected_.data(), remaining(), q, scratch_);
    out.q_rows.push_back(last);
    out.q.push_back(q);
    select(next);
    out.local.push_back(next);
    last = next;
  }
  out.pair_ids.reserve(out.local.size());
  for (int64_t k : out.local) out.pair_ids.push_back(pair_ids_[static_cast<size_t>(k)]);
  return out;
}

ComposedBatch SearchSpace::next_batch(int64_t B, double q, uint64_t draw) {
  return next_batch(
      B, [q](int64_t) { return q; }, draw);
}

std::string SearchSpace::unselected_mask() const {
  static const char* kHex = "0123456789abcdef";
  std::string mask(static_cast<size_t>((size() + 3) / 4), '0');
  std::vector<uint8_t> nibbles(mask.size(), 0);
  for (int64_t k : unselected_) nibbles[static_cast<size_t>(k / 4)] |= uint8_t(1u << (k % 4));
  for (size_t c = 0; c < mask.size(); ++c) mask[c] = kHex[nibbles[c]];
  return mask;
}

std::vector<int64_t> SearchSpace::decode_unselected_mask(const std::string& mask, int64_t size) {
  FNVLP_CHECK(static_cast<int64_t>(mask.size()) == (size + 3) / 4,
              "unselected mask of " << mask.size() << " hex digits for a search space of " << size
                                    << " pairs (needs " << (size + 3) / 4 << ")");
  std::vector<int64_t> u;
  for (size_t c = 0; c < mask.size(); ++c) {
    const char ch = mask[c];
    int v = -1;
    if (ch >= '0' && ch <= '9') v = ch - '0';
    if (ch >= 'a' && ch <= 'f') v = ch - 'a' + 10;
    FNVLP_CHECK(v >= 0, "unselected mask: '" << ch << "' at " << c << " is not a hex digit");
    for (int b = 0; b < 4; ++b) {
      if (!(v & (1 << b))) continue;
      const auto k = static_cast<int64_t>(4 * c) + b;
      FNVLP_CHECK(k < size, "unselected mask marks index " << k << " past the search space of "
                                                           << size << " pairs");
      u.push_back(k);
    }
  }
  return u;
}

void SearchSpace::set_unselected_mask(const std::string& mask) {
  unselected_ = decode_unselected_mask(mask, size());
}

}  // namespace fnvlp::negatives
