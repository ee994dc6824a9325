#include "fnvlp/train/grad_sync.hpp"

#include <algorithm>
#include <limits>

namespace fnvlp::train {

namespace {
void bcast_tensor(const Comm& comm, torch::Tensor t, int root) {
  FNVLP_CHECK(t.is_contiguous() && t.device().is_cpu(), "broadcast needs contiguous CPU tensors");
  torch::NoGradGuard no_grad;
  if (t.scalar_type() == torch::kFloat) {
    comm.bcast(t.data_ptr<float>(), static_cast<size_t>(t.numel()), root);
  } else if (t.scalar_type() == torch::kDouble) {
    comm.bcast(t.data_ptr<double>(), static_cast<size_t>(t.numel()), root);
  } else if (t.scalar_type() == torch::kLong) {
    comm.bcast(t.data_ptr<int64_t>(), static_cast<size_t>(t.numel()), root);
  } else {
    FNVLP_FAIL("broadcast_module: unsupported dtype " << t.scalar_type());
  }
}
}  // namespace

void broadcast_module(const Comm& comm, torch::nn::Module& module, int root) {
  for (auto& p : module.parameters()) bcast_tensor(comm, p.data(), root);
  for (auto& b : module.buffers()) bcast_tensor(comm, b, root);
}

int allreduce_gradients(const Comm& comm, const std::vector<torch::Tensor>& params,
                        size_t bucket_bytes) {
  torch::NoGradGuard no_grad;
  const bool single = comm.size() == 1;
  const size_t bucket_elems = std::max<size_t>(1, bucket_bytes / sizeof(float));
  std::vector<float> bucket;
  if (!single) bucket.reserve(bucket_elems);
  std::vector<torch::Tensor> members;
  int calls = 0;
  const float inv = 1.0f / static_cast<float>(comm.size());
  auto flush = [&] {
    if (members.empty()) return;
    comm.allreduce_sum(bucket);
    ++calls;
    size_t off = 0;
    for (auto& g : members) {
      const auto n = static_cast<size_t>(g.numel());
      auto src = torch::from_blob(bucket.data() + off, g.sizes(), torch::kFloat);
      g.copy_(src).mul_(inv);
      off += n;
    }
    bucket.clear();
    members.clear();
  };
  for (const auto& p : params) {
    FNVLP_CHECK(p.scalar_type() == torch::kFloat, "gradient averaging expects float32 parameters");
    auto& grad = p.mutable_grad();
    if (!grad.defined()) grad = torch::zeros_like(p);
    if (single) continue;  // the average over one rank is the gradient itself: no copies
    const auto n = static_cast<size_t>(grad.numel());
    if (!bucket.empty() && bucket.size() + n > bucket_elems) flush();
    auto g = grad.contiguous();
    if (!grad.is_contiguous()) grad = g;  // keep writing into the tensor the optimizer reads
    const float* src = g.data_ptr<float>();
    bucket.insert(bucket.end(), src, src + n);
    members.push_back(grad);
  }
  flush();
  return calls;
}

FlatGradients::FlatGradients(std::vector<torch::Tensor> params) : params_(std::move(params)) {
  int64_t total = 0;
  for (const auto& p : params_) {
    FNVLP_CHECK(p.scalar_type() == torch::kFloat && p.device().is_cpu(),
                "flat gradients expect float32 CPU parameters, got " << p.scalar_type());
    offsets_.push_back(total);
    total += p.numel();
  }
  flat_ = torch::zeros({total}, torch::kFloat);
  for (size_t i = 0; i < params_.size(); ++i) params_[i].mutable_grad() = slot(i);
}

torch::Tensor FlatGradients::slot(size_t i) const {
  return flat_.narrow(0, offsets_[i], params_[i].numel()).view_as(params_[i]);
}

void FlatGradients::zero() {
  rebind_replaced();
  flat_.zero_();
}

double FlatGradients::clip_norm(double max_norm) {
  double norm = 0;
  const float factor = clip_factor(max_norm, &norm);
  torch::NoGradGuard no_grad;
  if (factor != 1.0f) flat_.mul_(factor);
  return norm;
}

float FlatGradients::clip_factor(double max_norm, double* norm_out) {
  rebind_replaced();
  torch::NoGradGuard no_grad;
  const double norm = flat_.norm().item<double>();
  if (norm_out) *norm_out = norm;
  const double coef = max_norm / (norm + 1e-6);
  // The float libtorch's in-place mul_ by the double coef multiplies with.
  return coef < 1.0 ? static_cast<float>(coef) : 1.0f;
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

torch::Tensor allgather_rows(const Comm& comm, const torch::Tensor& local, int64_t* offset) {
  auto t = local.detach().to(torch::kFloat).contiguous();
  const int64_t rows = t.size(0);
  int64_t row_elems = 1;
  for (int64_t d = 1; d < t.dim(); ++d) row_elems *= t.size(d);
  std::vector<float> mine(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
  std::vector<float> all = comm.allgatherv(mine);
  const auto counts = comm.allgather<int64_t>(rows);
  if (offset) {
    *offset = 0;
    for (int r = 0; r < comm.rank(); ++r) *offset += counts[static_cast<size_t>(r)];
  }
  std::vector<int64_t> shape = t.sizes().vec();
  shape[0] = static_cast<int64_t>(all.size()) / std::max<int64_t>(row_elems, 1);
  if (all.empty()) return torch::zeros(shape, torch::kFloat);
  return torch::from_blob(all.data(), shape, torch::kFloat).clone();
}

}  // namespace fnvlp::train
