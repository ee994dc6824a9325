#include "fnvlp/train/fused_adamw.hpp"

#include <ATen/Parallel.h>
#include <c10/util/C++17.h>

#include <cmath>
#include <vector>

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

bool fused_adamw_step(torch::optim::AdamW& opt, float grad_scale) {
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

}  // namespace fnvlp::train
