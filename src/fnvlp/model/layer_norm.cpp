#include "fnvlp/model/layer_norm.hpp"

#include <ATen/Parallel.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "fnvlp/core/intraop_loops.hpp"
#include "fnvlp/kernels/add_layer_norm.hpp"
#include "fnvlp/kernels/simd_math.hpp"

namespace fnvlp::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Rows [begin, end) of x [rows, w]: y, and each row's mean and 1/σ for the backward.
FNVLP_SIMD_CLONES void forward_rows(const float* x, const float* gamma, const float* beta,
                                    float eps, int64_t w, int64_t begin, int64_t end, float* y,
                                    float* mean, float* rstd) {
  const float inv_w = 1.0f / static_cast<float>(w);
  for (int64_t r = begin; r < end; ++r) {
    const float* xr = x + r * w;
    float* yr = y + r * w;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < w; ++j) sum += xr[j];
    const float mu = sum * inv_w;
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int64_t j = 0; j < w; ++j) sq += (xr[j] - mu) * (xr[j] - mu);
    const float rs = 1.0f / std::sqrt(sq * inv_w + eps);
#pragma omp simd
    for (int64_t j = 0; j < w; ++j) yr[j] = (xr[j] - mu) * rs * gamma[j] + beta[j];
    mean[r] = mu;
    rstd[r] = rs;
  }
}

// dx for rows [begin, end), and their contributions to dγ and dβ added into dgamma / dbeta.
FNVLP_SIMD_CLONES void backward_rows(const float* x, const float* g, const float* gamma,
                                     const float* mean, const float* rstd, int64_t w, int64_t begin,
                                     int64_t end, float* dx, float* dgamma, float* dbeta) {
  const float inv_w = 1.0f / static_cast<float>(w);
  for (int64_t r = begin; r < end; ++r) {
    const float *xr = x + r * w, *gr = g + r * w;
    float* dr = dx + r * w;
    const float mu = mean[r], rs = rstd[r];
    float su = 0.0f, sux = 0.0f;
#pragma omp simd reduction(+ : su, sux)
    for (int64_t j = 0; j < w; ++j) {
      const float xh = (xr[j] - mu) * rs, u = gr[j] * gamma[j];
      su += u;
      sux += u * xh;
      dgamma[j] += gr[j] * xh;
      dbeta[j] += gr[j];
    }
    const float a = su * inv_w, b = sux * inv_w;
#pragma omp simd
    for (int64_t j = 0; j < w; ++j) {
      const float xh = (xr[j] - mu) * rs;
      dr[j] = rs * (gr[j] * gamma[j] - a - xh * b);
    }
  }
}

struct LayerNormFn : public torch::autograd::Function<LayerNormFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& in,
                               const torch::Tensor& gamma, const torch::Tensor& beta, double eps) {
    const torch::Tensor x = in.contiguous();
    const int64_t w = x.size(-1), rows = x.numel() / w;
    torch::Tensor y = torch::empty_like(x);
    torch::Tensor mean = torch::empty({rows}, x.options()),
                  rstd = torch::empty({rows}, x.options());
    const torch::Tensor gc = gamma.contiguous(), bc = beta.contiguous();
    const float *xp = x.data_ptr<float>(), *gp = gc.data_ptr<float>(), *bp = bc.data_ptr<float>();
    float *yp = y.data_ptr<float>(), *mp = mean.data_ptr<float>(), *rp = rstd.data_ptr<float>();
    const auto e = static_cast<float>(eps);
    at::parallel_for(0, rows, 256, [&](int64_t b, int64_t end) {
      forward_rows(xp, gp, bp, e, w, b, end, yp, mp, rp);
    });
    ctx->save_for_backward({x, gc, mean, rstd});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &gamma = saved[1], &mean = saved[2], &rstd = saved[3];
    const torch::Tensor g = grads[0].contiguous();
    const int64_t w = x.size(-1), rows = x.numel() / w;
    torch::Tensor dx = torch::empty_like(x);
    // Per-task partial sums of dγ and dβ, added in task order: the same result for any thread
    // count that splits the rows the same way (one thread: one task).
    const int64_t tasks = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), rows));
    const int64_t per = (rows + tasks - 1) / tasks;
    torch::Tensor partial = torch::zeros({tasks, 2, w}, x.options());
    const float *xp = x.data_ptr<float>(), *gp = g.data_ptr<float>(),
                *gam = gamma.data_ptr<float>(), *mp = mean.data_ptr<float>(),
                *rp = rstd.data_ptr<float>();
    float *dp = dx.data_ptr<float>(), *pp = partial.data_ptr<float>();
    at::parallel_for(0, tasks, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        backward_rows(xp, gp, gam, mp, rp, w, t * per, std::min(rows, (t + 1) * per), dp,
                      pp + t * 2 * w, pp + t * 2 * w + w);
    });
    const torch::Tensor sums = partial.sum(0);
    return {dx, sums[0], sums[1], torch::Tensor()};
  }
};

// kernels/add_layer_norm.hpp under autograd: outputs {a + b, LayerNorm(a + b)}.
struct AddLayerNormFn : public torch::autograd::Function<AddLayerNormFn> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& a, const torch::Tensor& b,
                               const torch::Tensor& gamma, const torch::Tensor& beta, double eps) {
    auto f = kernels::add_layer_norm_forward_cuda(a, b, gamma, beta, eps);
    ctx->save_for_backward({f.sum, f.mean, f.rstd, gamma});
    ctx->saved_data["b_dtype"] = static_cast<int64_t>(b.scalar_type());
    return {f.sum, f.y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto b_dtype = static_cast<torch::ScalarType>(ctx->saved_data["b_dtype"].toInt());
    const torch::Tensor &g_sum = grads[0], &g_y = grads[1];
    if (!g_y.defined()) {  // only the sum reached the loss
      if (!g_sum.defined())
        return {torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(),
                torch::Tensor()};
      return {g_sum, g_sum.to(b_dtype), torch::Tensor(), torch::Tensor(), torch::Tensor()};
    }
    const kernels::AddLayerNormForward f{saved[0], torch::Tensor(), saved[1], saved[2]};
    auto r = kernels::add_layer_norm_backward_cuda(g_y, g_sum, f, saved[3], b_dtype);
    return {r.da, r.db, r.dgamma, r.dbeta, torch::Tensor()};
  }
};

std::atomic<NormKernel> g_norm_kernel{NormKernel::kAten};

bool fused_add_norm_applies(const torch::Tensor& a, const torch::Tensor& b,
                            const torch::nn::LayerNorm& norm) {
  const auto& opt = norm->options;
  return g_norm_kernel.load() == NormKernel::kFnvlp && opt.elementwise_affine() &&
         opt.normalized_shape().size() == 1 &&
         kernels::add_layer_norm_cuda_applies(a, b, norm->weight, norm->bias);
}

}  // namespace

void set_norm_kernel(NormKernel kernel) { g_norm_kernel.store(kernel); }
NormKernel norm_kernel() { return g_norm_kernel.load(); }

torch::Tensor add_layer_norm(const torch::Tensor& a, const torch::Tensor& b,
                             torch::nn::LayerNorm& norm) {
  if (!fused_add_norm_applies(a, b, norm)) return layer_norm(a + b, norm);
  return AddLayerNormFn::apply(a, b, norm->weight, norm->bias, norm->options.eps())[1];
}

std::pair<torch::Tensor, torch::Tensor> add_and_layer_norm(const torch::Tensor& a,
                                                           const torch::Tensor& b,
                                                           torch::nn::LayerNorm& norm) {
  if (!fused_add_norm_applies(a, b, norm)) {
    auto s = a + b;
    auto y = layer_norm(s, norm);
    return {std::move(s), std::move(y)};
  }
  auto out = AddLayerNormFn::apply(a, b, norm->weight, norm->bias, norm->options.eps());
  return {std::move(out[0]), std::move(out[1])};
}

torch::Tensor layer_norm(const torch::Tensor& x, torch::nn::LayerNorm& norm) {
  const auto& opt = norm->options;
  const bool fused = x.device().is_cpu() && x.scalar_type() == torch::kFloat &&
                     x.layout() == torch::kStrided && opt.elementwise_affine() &&
                     opt.normalized_shape().size() == 1 && x.dim() >= 1 &&
                     x.size(-1) == opt.normalized_shape()[0] && x.numel() > 0 &&
                     norm->weight.scalar_type() == torch::kFloat;
  if (!fused) return norm(x);
  return LayerNormFn::apply(x, norm->weight, norm->bias, opt.eps());
}

}  // namespace fnvlp::model
