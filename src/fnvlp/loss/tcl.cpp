#include "fnvlp/loss/tcl.hpp"

#include <cmath>
#include <limits>

#include "fnvlp/core/error.hpp"

namespace fnvlp::loss {

namespace {

// Off-diagonal pairs sharing an image_id: known positives, removed from the candidates.
torch::Tensor same_image_offdiag(const torch::Tensor& image_id) {
  const auto id = image_id.to(torch::kLong);
  const auto same = id.unsqueeze(1) == id.unsqueeze(0);
  return same &
         ~torch::eye(id.size(0), torch::TensorOptions().dtype(torch::kBool).device(id.device()));
}

}  // namespace

torch::Tensor imc_loss(const torch::Tensor& a, const torch::Tensor& b,
                       const torch::Tensor& image_id, const torch::Tensor& temp) {
  FNVLP_CHECK(a.dim() == 2 && a.sizes() == b.sizes() && image_id.size(0) == a.size(0),
              "imc_loss: expected two [n, E] views and [n] image ids, got " << a.sizes() << ", "
                                                                            << b.sizes());
  const int64_t n = a.size(0);
  const auto blocked = same_image_offdiag(image_id).to(a.device());
  const auto logits = (torch::matmul(a, b.t()) / temp).masked_fill(blocked, -1e4);
  const auto target =
      torch::arange(n, torch::TensorOptions().dtype(torch::kLong).device(a.device()));
  return 0.5 * (torch::nn::functional::cross_entropy(logits, target) +
                torch::nn::functional::cross_entropy(logits.t(), target));
}

torch::Tensor lmi_loss(const torch::Tensor& global_emb, const torch::Tensor& local_emb,
                       const torch::Tensor& valid, const torch::Tensor& image_id,
                       const torch::Tensor& temp) {
  FNVLP_CHECK(global_emb.dim() == 2 && local_emb.dim() == 3 &&
                  local_emb.size(0) == global_emb.size(0) &&
                  local_emb.size(2) == global_emb.size(1),
              "lmi_loss: expected global [n, E] and local [n, P, E], got "
                  << global_emb.sizes() << " and " << local_emb.sizes());
  const int64_t n = global_emb.size(0), p = local_emb.size(1);
  // logits[p, i, j] = <g_i, l_{j,p}> / τ: anchor i against position p of every sample j.
  auto logits = torch::einsum("ie,jpe->pij", {global_emb, local_emb}) / temp;
  auto blocked = same_image_offdiag(image_id).to(logits.device()).unsqueeze(0).expand({p, n, n});
  torch::Tensor rows_valid;
  if (valid.defined()) {
    FNVLP_CHECK(valid.sizes() == torch::IntArrayRef({n, p}), "lmi_loss: valid must be [n, P]");
    const auto v = valid.to(torch::kBool).to(logits.device());
    blocked = blocked | ~v.t().unsqueeze(1).expand({p, n, n});  // column j invalid at p
    rows_valid = v.t().reshape({-1});                           // term (i, p) exists
  }
  logits = logits.masked_fill(blocked, -1e4);
  const auto target =
      torch::arange(n, torch::TensorOptions().dtype(torch::kLong).device(logits.device()))
          .repeat({p});
  auto per_term = torch::nn::functional::cross_entropy(
      logits.reshape({p * n, n}), target,
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  if (!rows_valid.defined()) return per_term.mean();
  const auto w = rows_valid.to(per_term.dtype());
  return (per_term * w).sum() / w.sum().clamp_min(1);
}

torch::Tensor pool_patch_tokens(const torch::Tensor& image_tokens, int64_t grid) {
  FNVLP_CHECK(image_tokens.dim() == 3, "pool_patch_tokens: expected [n, 1 + P, D]");
  const int64_t n = image_tokens.size(0), d = image_tokens.size(2);
  const int64_t patches = image_tokens.size(1) - 1;
  const auto g0 = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(patches))));
  FNVLP_CHECK(g0 * g0 == patches && grid > 0 && g0 % grid == 0,
              "pool_patch_tokens: a " << g0 << "x" << g0 << " patch grid (" << patches
                                      << " patches) does not pool to " << grid << "x" << grid);
  const auto x = image_tokens.narrow(1, 1, patches).transpose(1, 2).reshape({n, d, g0, g0});
  const auto pooled = torch::nn::functional::adaptive_avg_pool2d(
      x, torch::nn::functional::AdaptiveAvgPool2dFuncOptions({grid, grid}));
  return pooled.reshape({n, d, grid * grid}).transpose(1, 2);
}

}  // namespace fnvlp::loss
