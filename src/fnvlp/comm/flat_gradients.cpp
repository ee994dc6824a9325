#include "fnvlp/comm/flat_gradients.hpp"

#include <algorithm>
#include <limits>

#include "fnvlp/comm/tensors.hpp"
#include "fnvlp/core/error.hpp"

namespace fnvlp {

FlatGradients::FlatGradients(std::vector<torch::Tensor> params) : params_(std::move(params)) {
  int64_t total = 0;
  const torch::Device device = params_.empty() ? torch::Device(torch::kCPU) : params_[0].device();
  for (const auto& p : params_) {
    FNVLP_CHECK(p.scalar_type() == torch::kFloat && p.device() == device,
                "flat gradients expect float32 parameters on one device, got "
                    << p.scalar_type() << " on " << p.device() << " beside " << device);
    offsets_.push_back(total);
    total += p.numel();
  }
  flat_ = torch::zeros({total}, torch::dtype(torch::kFloat).device(device));
  for (size_t i = 0; i < params_.size(); ++i) params_[i].mutable_grad() = slot(i);
}

torch::Tensor FlatGradients::slot(size_t i) const {
  return flat_.narrow(0, offsets_[i], params_[i].numel()).view_as(params_[i]);
}

void FlatGradients::zero() {
  rebind_replaced();
  flat_.zero_();
}

double FlatGradients::clip_in_place(double max_norm) {
  double norm = 0;
  const float factor = clip_scale(max_norm, &norm);
  torch::NoGradGuard no_grad;
  if (factor != 1.0f) flat_.mul_(factor);
  return norm;
}

float FlatGradients::clip_scale(double max_norm, double* norm_out) {
  rebind_replaced();
  torch::NoGradGuard no_grad;
  const double norm = flat_.norm().item<double>();
  if (norm_out) *norm_out = norm;
  const double coef = max_norm / (norm + 1e-6);
  // The float libtorch's in-place mul_ by the double coef multiplies with.
  return coef < 1.0 ? static_cast<float>(coef) : 1.0f;
}

torch::Tensor FlatGradients::clip_divisor(double max_norm) {
  rebind_replaced();
  torch::NoGradGuard no_grad;
  return ((flat_.norm() + 1e-6) / max_norm).clamp_min(1.0);
}

void FlatGradients::rebind_replaced() {
  torch::NoGradGuard no_grad;
  const float* base = flat_.data_ptr<float>();
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& grad = params_[i].mutable_grad();
    // Runs twice per step: the bound case must cost a pointer compare, no tensor.
    if (grad.defined() && grad.data_ptr() == static_cast<const void*>(base + offsets_[i]) &&
        grad.is_contiguous())
      continue;
    auto own = slot(i);
    if (grad.defined())
      own.copy_(grad);
    else
      own.zero_();
    grad = own;
    ++rebinds_;
  }
}

int FlatGradients::allreduce_mean(const Comm& comm, size_t chunk_elems) {
  rebind_replaced();
  if (comm.size() == 1) return 0;
  torch::NoGradGuard no_grad;
  if (flat_.is_cuda()) {  // one collective of the whole buffer (NCCL pipelines it itself)
    allreduce_sum(comm, flat_);
    flat_.mul_(1.0f / static_cast<float>(comm.size()));
    return 1;
  }
  FNVLP_CHECK(chunk_elems > 0 && chunk_elems <= size_t(std::numeric_limits<int>::max()),
              "allreduce chunk of " << chunk_elems << " floats: must be in [1, 2^31)");
  float* data = flat_.data_ptr<float>();
  const auto n = static_cast<size_t>(flat_.numel());
  int calls = 0;
  for (size_t off = 0; off < n; off += chunk_elems, ++calls)
    comm.allreduce(data + off, std::min(chunk_elems, n - off), ReduceOp::kSum);
  flat_.mul_(1.0f / static_cast<float>(comm.size()));
  return calls;
}

}  // namespace fnvlp
