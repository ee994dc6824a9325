#include "fnvlp/negatives/quantile_profile.hpp"

#include <limits>

#include "fnvlp/core/error.hpp"
#include "fnvlp/negatives/quantile_pick.hpp"

namespace fnvlp::negatives {

torch::Tensor quantile_values(const torch::Tensor& S, int64_t m) {
  FNVLP_CHECK(S.dim() == 2 && S.size(0) == S.size(1),
              "quantile profile needs a square similarity matrix, got " << S.sizes());
  const int64_t M = S.size(0);
  FNVLP_CHECK(M >= 2, "quantile profile of a search space of " << M << " pairs (needs 2)");
  FNVLP_CHECK(m >= 2, "quantile profile needs m >= 2 quantiles, got " << m);
  torch::NoGradGuard no_grad;
  // The diagonal (a pair against itself) goes to +inf, so after an ascending sort the first
  // M − 1 columns are exactly the off-diagonal entries in order.
  auto masked = S.to(torch::kFloat).clone();
  masked.fill_diagonal_(std::numeric_limits<float>::infinity());
  auto sorted = std::get<0>(masked.sort(/*dim=*/1)).narrow(1, 0, M - 1);
  std::vector<int64_t> ranks(static_cast<size_t>(m));
  for (int64_t l = 0; l < m; ++l)
    ranks[static_cast<size_t>(l)] =
        quantile_rank(static_cast<double>(l) / static_cast<double>(m - 1), M - 1);
  auto idx = torch::tensor(ranks, torch::dtype(torch::kLong).device(S.device()));
  return sorted.index_select(1, idx).contiguous();
}

torch::Tensor quantile_softmax(const torch::Tensor& values) {
  FNVLP_CHECK(values.dim() == 2, "quantile values must be [M, m], got " << values.sizes());
  return torch::softmax(values.to(torch::kFloat), /*dim=*/1);
}

torch::Tensor quantile_profile(const torch::Tensor& S, int64_t m) {
  return quantile_softmax(quantile_values(S, m));
}

}  // namespace fnvlp::negatives
