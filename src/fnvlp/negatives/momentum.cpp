#include "fnvlp/negatives/momentum.hpp"

#include <algorithm>
#include <vector>

#include "fnvlp/core/error.hpp"

namespace fnvlp::negatives {

namespace {

// Parameters then buffers, each in registration order, checked pairwise by name and shape.
std::vector<std::pair<torch::Tensor, torch::Tensor>> paired_tensors(
    torch::nn::Module& momentum, const torch::nn::Module& online) {
  const auto mp = momentum.named_parameters(true), op = online.named_parameters(true);
  const auto mb = momentum.named_buffers(true), ob = online.named_buffers(true);
  FNVLP_CHECK(mp.size() == op.size() && mb.size() == ob.size(),
              "momentum model: " << mp.size() << " parameters and " << mb.size()
                                 << " buffers, the online model has " << op.size() << " and "
                                 << ob.size());
  std::vector<std::pair<torch::Tensor, torch::Tensor>> out;
  auto add = [&](const auto& m, const auto& o) {
    for (size_t i = 0; i < m.size(); ++i) {
      const auto& a = m[i];
      const auto& b = o[i];
      FNVLP_CHECK(a.key() == b.key() && a.value().sizes() == b.value().sizes(),
                  "momentum model: '" << a.key() << "' " << a.value().sizes() << " vs online '"
                                      << b.key() << "' " << b.value().sizes());
      out.emplace_back(a.value(), b.value());
    }
  };
  add(mp, op);
  add(mb, ob);
  return out;
}

}  // namespace

void ema_update(torch::nn::Module& momentum, const torch::nn::Module& online, double m) {
  FNVLP_CHECK(m >= 0 && m <= 1, "momentum must be in [0, 1], got " << m);
  torch::NoGradGuard no_grad;
  for (auto& [pm, p] : paired_tensors(momentum, online)) {
    if (!pm.is_floating_point()) {  // integer buffers (counters) follow the online model
      pm.copy_(p);
      continue;
    }
    // ALBEF: param_m.data = param_m.data * m + param.data * (1 - m)
    pm.mul_(m).add_(p.detach(), 1.0 - m);
  }
}

void ema_update(torch::nn::Module& momentum, const torch::nn::Module& online, double m,
                const torch::Tensor& finite) {
  FNVLP_CHECK(m >= 0 && m <= 1, "momentum must be in [0, 1], got " << m);
  torch::NoGradGuard no_grad;
  // Taken: theta_m * m + theta * (1 - m), the scalars rounded as ema_update's; skipped:
  // theta_m * 1 + theta * 0, theta_m exactly (the online weights are finite: the step was skipped).
  const torch::Tensor taken = finite.to(torch::kBool);
  const auto f = finite.options().dtype(torch::kFloat);
  const torch::Tensor keep = torch::where(taken, torch::full({}, m, f), torch::ones({}, f));
  const torch::Tensor take = torch::where(taken, torch::full({}, 1.0 - m, f), torch::zeros({}, f));
  for (auto& [pm, p] : paired_tensors(momentum, online)) {
    if (!pm.is_floating_point()) {
      pm.copy_(torch::where(taken, p, pm));
      continue;
    }
    pm.mul_(keep.to(pm.dtype())).addcmul_(p.detach(), take.to(pm.dtype()));
  }
}

void copy_module(torch::nn::Module& momentum, const torch::nn::Module& online) {
  torch::NoGradGuard no_grad;
  for (auto& [pm, p] : paired_tensors(momentum, online)) pm.copy_(p.detach());
}

FeatureQueueImpl::FeatureQueueImpl(int64_t capacity, int64_t dim) {
  FNVLP_CHECK(capacity >= 0 && dim > 0,
              "feature queue: capacity " << capacity << " and dim " << dim << " are invalid");
  img_ = register_buffer("img", torch::zeros({capacity, dim}));
  txt_ = register_buffer("txt", torch::zeros({capacity, dim}));
  image_id_ = register_buffer("image_id", torch::full({capacity}, -1, torch::kLong));
  pair_id_ = register_buffer("pair_id", torch::full({capacity}, -1, torch::kLong));
  state_ = register_buffer("state", torch::zeros({2}, torch::kLong));
}

void FeatureQueueImpl::enqueue(const torch::Tensor& img, const torch::Tensor& txt,
                               const torch::Tensor& image_id, const torch::Tensor& pair_id) {
  const int64_t k = capacity(), n = img.size(0);
  FNVLP_CHECK(img.dim() == 2 && img.size(1) == dim() && txt.sizes() == img.sizes() &&
                  image_id.dim() == 1 && image_id.size(0) == n &&
                  pair_id.sizes() == image_id.sizes(),
              "feature queue: enqueue of img " << img.sizes() << ", txt " << txt.sizes() << ", ids "
                                               << image_id.sizes() << " and " << pair_id.sizes()
                                               << " into [" << k << ", " << dim() << "]");
  if (k == 0 || n == 0) return;
  torch::NoGradGuard no_grad;
  const int64_t p = ptr(), f = fill(), keep = std::min(n, k), skip = n - keep;
  // Row skip + j goes where a row-by-row enqueue puts it: (p + skip + j) mod k.
  const torch::Tensor dst =
      (torch::arange(keep, img_.options().dtype(torch::kLong)) + (p + skip)).remainder(k);
  img_.index_copy_(0, dst, img.detach().narrow(0, skip, keep).to(img_.dtype()));
  txt_.index_copy_(0, dst, txt.detach().narrow(0, skip, keep).to(txt_.dtype()));
  image_id_.index_copy_(0, dst, image_id.narrow(0, skip, keep).to(torch::kLong));
  pair_id_.index_copy_(0, dst, pair_id.narrow(0, skip, keep).to(torch::kLong));
  host_ = {(p + n) % k, std::min(k, f + n)};
  state_[0] = host_[0];
  state_[1] = host_[1];
  host_version_ = state_._version();
}

torch::Tensor FeatureQueueImpl::valid() const {
  return torch::arange(capacity(), state_.options()) < state_[1];
}

void FeatureQueueImpl::enqueue_flagged(const torch::Tensor& img, const torch::Tensor& txt,
                                       const torch::Tensor& image_id, const torch::Tensor& pair_id,
                                       const torch::Tensor& finite) {
  const int64_t k = capacity(), n = img.size(0);
  FNVLP_CHECK(img.dim() == 2 && img.size(1) == dim() && txt.sizes() == img.sizes() &&
                  image_id.dim() == 1 && image_id.size(0) == n &&
                  pair_id.sizes() == image_id.sizes(),
              "feature queue: enqueue of img " << img.sizes() << ", txt " << txt.sizes() << ", ids "
                                               << image_id.sizes() << " and " << pair_id.sizes()
                                               << " into [" << k << ", " << dim() << "]");
  if (k == 0 || n == 0) return;
  torch::NoGradGuard no_grad;
  const int64_t keep = std::min(n, k), skip = n - keep;
  const torch::Tensor taken = finite.to(torch::kBool);
  // enqueue's destinations from the device pointer; a skipped step writes back what is there.
  const torch::Tensor dst =
      (torch::arange(keep, state_.options()) + (state_[0] + skip)).remainder(k);
  auto put = [&](torch::Tensor& buffer, const torch::Tensor& rows) {
    const torch::Tensor fresh = rows.detach().narrow(0, skip, keep).to(buffer.dtype());
    const torch::Tensor old = buffer.index_select(0, dst);
    buffer.index_copy_(0, dst, torch::where(taken, fresh, old));
  };
  put(img_, img);
  put(txt_, txt);
  put(image_id_, image_id.to(torch::kLong));
  put(pair_id_, pair_id.to(torch::kLong));
  const torch::Tensor next =
      torch::stack({(state_[0] + n).remainder(k), (state_[1] + n).clamp_max(k)});
  state_.copy_(torch::where(taken, next, state_));
  forget_host_state();
}

const std::array<int64_t, 2>& FeatureQueueImpl::host_state() const {
  if (state_.data_ptr() != host_of_ || state_._version() != host_version_) read_state();
  return host_;
}

void FeatureQueueImpl::read_state() const {
  const torch::Tensor h = state_.to(torch::kCPU, torch::kLong).contiguous();
  host_ = {h.data_ptr<int64_t>()[0], h.data_ptr<int64_t>()[1]};
  host_of_ = state_.data_ptr();
  host_version_ = state_._version();
}

void FeatureQueueImpl::check(int64_t capacity, int64_t dim) const {
  FNVLP_CHECK(img_.dim() == 2 && img_.size(0) == capacity && img_.size(1) == dim &&
                  txt_.sizes() == img_.sizes() && image_id_.numel() == capacity &&
                  pair_id_.numel() == capacity && state_.numel() == 2,
              "feature queue: holds " << img_.sizes() << ", expected [" << capacity << ", " << dim
                                      << "] (loss.queue_size / model.embed_dim changed?)");
  read_state();
  const int64_t p = ptr(), f = fill();
  FNVLP_CHECK(
      f >= 0 && f <= capacity && p >= 0 && (capacity == 0 ? p == 0 : p < capacity) &&
          (f == capacity || p == f),
      "feature queue: inconsistent pointer " << p << " and fill " << f << " of " << capacity);
}

}  // namespace fnvlp::negatives
