#include "fnvlp/train/fused_adamw.hpp"

#include <ATen/Parallel.h>
#include <c10/util/C++17.h>
#include <torch/version.h>

#include <cmath>
#include <vector>

#include "fnvlp/core/intraop_loops.hpp"
#include "fnvlp/kernels/cpu_float.hpp"

namespace fnvlp::train {

namespace {

struct Item {
  torch::Tensor p, g;
  torch::optim::AdamWParamState* state;
  const torch::optim::AdamWOptions* options;
};

// The element-wise update; the float casts of the scalars are the ones libtorch's tensor ops make.
// g_i * grad_scale is the float clip_grad_norm_'s in-place scaling would have stored.
void update(float* p, const float* g, float* m, float* v, int64_t n, float grad_scale, float decay,
            float b1, float one_minus_b1, float b2, float one_minus_b2, float inv_sqrt_bc2,
            float eps, float neg_step) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * grad_scale;
    const float pi = p[i] * decay;
    const float mi = m[i] * b1 + one_minus_b1 * gi;
    const float vi = v[i] * b2 + one_minus_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi + neg_step * (mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps));
  }
}

}  // namespace

bool adamw_step_cpu(torch::optim::AdamW& opt, float grad_scale) {
  torch::NoGradGuard no_grad;
  auto& states = opt.state();
  std::vector<Item> items;
  bool fused = true;
  for (auto& group : opt.param_groups()) {
    const auto& options = static_cast<const torch::optim::AdamWOptions&>(group.options());
    if (options.amsgrad()) fused = false;
    for (auto& p : group.params()) {
      const torch::Tensor& g = p.grad();
      if (!g.defined()) continue;  // libtorch skips it too
      // The state map's key, as libtorch's optimizers and their serialisation form it.
      auto it = states.find(optimizer_state_key(opt, p));
      if (it == states.end() || !is_dense_cpu_float(p) || !is_dense_cpu_float(g)) {
        fused = false;
        continue;
      }
      auto* st = static_cast<torch::optim::AdamWParamState*>(it->second.get());
      if (!is_dense_cpu_float(st->exp_avg()) || !is_dense_cpu_float(st->exp_avg_sq()))
        fused = false;
      items.push_back({p, g, st, &options});
    }
  }
  if (!fused) {
    if (grad_scale != 1.0f)
      for (auto& group : opt.param_groups())
        for (auto& p : group.params())
          if (p.grad().defined()) p.mutable_grad().mul_(grad_scale);
    opt.step();
    return false;
  }
  for (auto& it : items) {
    auto& st = *it.state;
    const auto& o = *it.options;
    st.step(st.step() + 1);
    const double b1 = std::get<0>(o.betas()), b2 = std::get<1>(o.betas());
    const double bc1 = 1.0 - std::pow(b1, static_cast<double>(st.step()));
    const double bc2 = 1.0 - std::pow(b2, static_cast<double>(st.step()));
    const float decay = static_cast<float>(1.0 - o.lr() * o.weight_decay());
    const float neg_step = static_cast<float>(-(o.lr() / bc1));
    const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
    float* p = it.p.data_ptr<float>();
    const float* g = it.g.data_ptr<float>();
    float* m = st.exp_avg().data_ptr<float>();
    float* v = st.exp_avg_sq().data_ptr<float>();
    at::parallel_for(0, it.p.numel(), 1 << 15, [&](int64_t begin, int64_t end) {
      update(p + begin, g + begin, m + begin, v + begin, end - begin, grad_scale, decay,
             static_cast<float>(b1), static_cast<float>(1.0 - b1), static_cast<float>(b2),
             static_cast<float>(1.0 - b2), inv_sqrt_bc2, static_cast<float>(o.eps()), neg_step);
    });
  }
  return true;
}

bool multi_tensor_adamw_available() {
#if TORCH_VERSION_MAJOR >= 2
  return true;
#else
  return false;
#endif
}

bool adamw_step_cuda(torch::optim::AdamW& opt, const torch::Tensor& grad_divisor) {
  torch::NoGradGuard no_grad;
  auto& states = opt.state();
  struct Group {
    std::vector<torch::Tensor> p, g, m, v;
    std::vector<torch::optim::AdamWParamState*> st;
    const torch::optim::AdamWOptions* options;
  };
  std::vector<Group> groups;
  bool fused = multi_tensor_adamw_available();
  for (auto& group : opt.param_groups()) {
    Group gr;
    gr.options = &static_cast<const torch::optim::AdamWOptions&>(group.options());
    if (gr.options->amsgrad()) fused = false;
    for (auto& p : group.params()) {
      const torch::Tensor& g = p.grad();
      if (!g.defined()) continue;  // libtorch skips it too
      auto it = states.find(optimizer_state_key(opt, p));
      if (it == states.end() || p.scalar_type() != torch::kFloat || g.is_sparse()) {
        fused = false;
        continue;
      }
      auto* st = static_cast<torch::optim::AdamWParamState*>(it->second.get());
      if (!gr.st.empty() && st->step() != gr.st[0]->step()) fused = false;
      gr.p.push_back(p);
      gr.g.push_back(g);
      gr.m.push_back(st->exp_avg());
      gr.v.push_back(st->exp_avg_sq());
      gr.st.push_back(st);
    }
    groups.push_back(std::move(gr));
  }
  if (!fused) {
    if (grad_divisor.defined())
      for (auto& group : opt.param_groups())
        for (auto& p : group.params())
          if (p.grad().defined()) p.mutable_grad().div_(grad_divisor);
    opt.step();
    return false;
  }
#if TORCH_VERSION_MAJOR >= 2
  std::optional<at::Tensor> divisor;
  if (grad_divisor.defined()) divisor = grad_divisor;
  for (auto& gr : groups) {
    if (gr.p.empty()) continue;
    const int64_t t = gr.st[0]->step() + 1;
    for (auto* st : gr.st) st->step(t);
    // The kernel reads each parameter's step from a float tensor on its device: one fill for
    // the group, one view per parameter.
    const std::vector<torch::Tensor> steps =
        torch::full({static_cast<int64_t>(gr.p.size())}, static_cast<double>(t),
                    gr.p[0].options().dtype(torch::kFloat))
            .unbind(0);
    const auto& o = *gr.options;
    at::_fused_adamw_(gr.p, gr.g, gr.m, gr.v, /*max_exp_avg_sqs=*/{}, steps, o.lr(),
                      std::get<0>(o.betas()), std::get<1>(o.betas()), o.weight_decay(), o.eps(),
                      /*amsgrad=*/false, /*maximize=*/false, divisor, /*found_inf=*/std::nullopt);
  }
  return true;
#else
  return false;
#endif
}

bool adamw_step(torch::optim::AdamW& opt, FlatGradients& grads, double clip) {
  if (grads.buffer().is_cuda() && multi_tensor_adamw_available())
    return adamw_step_cuda(opt, clip > 0 ? grads.clip_divisor(clip) : torch::Tensor());
  return adamw_step_cpu(opt, clip > 0 ? grads.clip_scale(clip) : 1.0f);
}

bool FlaggedAdamW::ready(const torch::optim::AdamW& opt) {
  const auto& states = opt.state();
  for (const auto& group : opt.param_groups())
    for (const auto& p : group.params())
      if (p.grad().defined() && states.find(optimizer_state_key(opt, p)) == states.end())
        return false;
  return true;
}

FlaggedAdamW::FlaggedAdamW(torch::optim::AdamW& opt, FlatGradients& grads, double clip,
                           bool device_kernel)
    : opt_(opt),
      grads_(grads),
      clip_(clip),
      device_kernel_(device_kernel || grads.buffer().is_cuda()) {
  FNVLP_CHECK(ready(opt), "FlaggedAdamW: the optimizer has no state yet (take a first step)");
  FNVLP_CHECK(!device_kernel_ || multi_tensor_adamw_available(),
              "FlaggedAdamW: the device kernel needs libtorch >= 2.0 (at::_fused_adamw_)");
  if (!device_kernel_) return;
  std::vector<double> counts;
  for (auto& group : opt.param_groups()) {
    Group gr;
    gr.options = &static_cast<const torch::optim::AdamWOptions&>(group.options());
    FNVLP_CHECK(!gr.options->amsgrad(), "FlaggedAdamW: amsgrad is not supported");
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto* st = static_cast<torch::optim::AdamWParamState*>(
          opt.state().at(optimizer_state_key(opt, p)).get());
      gr.p.push_back(p);
      gr.g.push_back(p.grad());
      gr.m.push_back(st->exp_avg());
      gr.v.push_back(st->exp_avg_sq());
      gr.st.push_back(st);
      counts.push_back(static_cast<double>(st->step()));
    }
    groups_.push_back(std::move(gr));
  }
  const auto dev = grads.buffer().options();
  steps_ = torch::tensor(counts, torch::kDouble).to(dev.dtype(torch::kFloat));
  int64_t i = 0;
  for (auto& gr : groups_)
    for (size_t k = 0; k < gr.p.size(); ++k) gr.steps.push_back(steps_[i++]);
}

void FlaggedAdamW::step(const torch::Tensor& lr, const torch::Tensor& finite) {
  torch::NoGradGuard no_grad;
  if (!device_kernel_) {  // CPU tensors: reading them costs no wait
    if (finite.item<float>() == 0.0f) return;
    const double rate = lr.item<double>();
    for (auto& group : opt_.param_groups())
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(rate);
    adamw_step(opt_, grads_, clip_);
    return;
  }
#if TORCH_VERSION_MAJOR >= 2
  std::optional<at::Tensor> divisor;
  if (clip_ > 0) divisor = grads_.clip_divisor(clip_);
  const torch::Tensor found_inf = 1.0f - finite.to(torch::kFloat);
  steps_.add_(finite.to(torch::kFloat));  // a skipped step leaves the counts as they were
  for (auto& gr : groups_) {
    if (gr.p.empty()) continue;
    const auto& o = *gr.options;
    at::_fused_adamw_(gr.p, gr.g, gr.m, gr.v, /*max_exp_avg_sqs=*/{}, gr.steps, lr,
                      std::get<0>(o.betas()), std::get<1>(o.betas()), o.weight_decay(), o.eps(),
                      /*amsgrad=*/false, /*maximize=*/false, divisor, found_inf);
  }
#endif
}

void FlaggedAdamW::sync_host_steps() {
  if (!device_kernel_) return;
  const torch::Tensor counts = steps_.to(torch::kCPU, torch::kDouble);
  const double* c = counts.data_ptr<double>();
  int64_t i = 0;
  for (auto& gr : groups_)
    for (auto* st : gr.st) st->step(static_cast<int64_t>(c[i++]));
}

}  // namespace fnvlp::train
