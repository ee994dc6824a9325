#include "fnvlp/kernels/add_layer_norm.hpp"

#include <stdexcept>
#include <string>

#if FNVLP_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "fnvlp/kernels/add_layer_norm_launch.hpp"
#endif

namespace fnvlp::kernels {

namespace {

torch::ScalarType stat_type(const torch::Tensor& a) {
  return a.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
}

#if FNVLP_WITH_CUDA
cuda::Dtype launch_type(torch::ScalarType t) {
  if (t == torch::kFloat) return cuda::Dtype::kFloat;
  if (t == torch::kBFloat16) return cuda::Dtype::kBFloat16;
  throw std::invalid_argument(std::string("add_layer_norm: the CUDA kernels take b as float32 or "
                                          "bfloat16, not ") +
                              c10::toString(t));
}
#endif

}  // namespace

bool add_layer_norm_cuda_built() {
#if FNVLP_WITH_CUDA
  return true;
#else
  return false;
#endif
}

bool add_layer_norm_cuda_applies(const torch::Tensor& a, const torch::Tensor& b,
                                 const torch::Tensor& gamma, const torch::Tensor& beta) {
  if (!add_layer_norm_cuda_built() || !a.defined() || !b.defined() || !a.is_cuda() ||
      b.device() != a.device() || a.layout() != torch::kStrided || b.layout() != torch::kStrided ||
      a.sizes() != b.sizes() || a.dim() < 1 || a.size(-1) == 0)
    return false;
  if (a.scalar_type() != torch::kFloat ||
      (b.scalar_type() != torch::kFloat && b.scalar_type() != torch::kBFloat16))
    return false;
  const int64_t w = a.size(-1);
  for (const torch::Tensor* p : {&gamma, &beta})
    if (!p->defined() || p->device() != a.device() || p->scalar_type() != torch::kFloat ||
        p->dim() != 1 || p->size(0) != w)
      return false;
  return true;
}

AddLayerNormForward add_layer_norm_forward_cuda(const torch::Tensor& a, const torch::Tensor& b,
                                                const torch::Tensor& gamma,
                                                const torch::Tensor& beta, double eps) {
  if (!add_layer_norm_cuda_applies(a, b, gamma, beta))
    throw std::invalid_argument(
        "add_layer_norm_forward_cuda: needs a CUDA build and float32 a, float32 or bfloat16 b of "
        "a's shape, float32 gamma and beta of its last dimension, all on one CUDA device");
#if FNVLP_WITH_CUDA
  const c10::cuda::CUDAGuard guard(a.device());
  const torch::Tensor ac = a.contiguous(), bc = b.contiguous(), gc = gamma.contiguous(),
                      betac = beta.contiguous();
  const int64_t w = ac.size(-1), rows = ac.numel() / w;
  const auto f32 = ac.options().dtype(torch::kFloat);
  AddLayerNormForward out{torch::empty_like(ac), torch::empty_like(ac), torch::empty({rows}, f32),
                          torch::empty({rows}, f32)};
  cuda::add_layer_norm_forward(ac.data_ptr<float>(), bc.data_ptr(), launch_type(bc.scalar_type()),
                               gc.data_ptr<float>(), betac.data_ptr<float>(),
                               static_cast<float>(eps), rows, w, out.sum.data_ptr<float>(),
                               out.y.data_ptr<float>(), out.mean.data_ptr<float>(),
                               out.rstd.data_ptr<float>(), c10::cuda::getCurrentCUDAStream());
  return out;
#else
  (void)eps;
  return {};
#endif
}

AddLayerNormBackward add_layer_norm_backward_cuda(const torch::Tensor& g_y,
                                                  const torch::Tensor& g_sum,
                                                  const AddLayerNormForward& fwd,
                                                  const torch::Tensor& gamma,
                                                  torch::ScalarType b_dtype) {
  if (!add_layer_norm_cuda_applies(fwd.sum, fwd.sum, gamma, gamma) || !g_y.defined() ||
      g_y.sizes() != fwd.sum.sizes() || (g_sum.defined() && g_sum.sizes() != fwd.sum.sizes()))
    throw std::invalid_argument(
        "add_layer_norm_backward_cuda: needs a CUDA build, the forward's float32 tensors and "
        "gradients of the sum's shape");
#if FNVLP_WITH_CUDA
  const c10::cuda::CUDAGuard guard(fwd.sum.device());
  const cuda::Dtype bt = launch_type(b_dtype);
  const torch::Tensor g = g_y.to(torch::kFloat).contiguous();
  const torch::Tensor gs = g_sum.defined() ? g_sum.to(torch::kFloat).contiguous() : torch::Tensor();
  const torch::Tensor gc = gamma.contiguous();
  const int64_t w = fwd.sum.size(-1), rows = fwd.sum.numel() / w;
  const auto f32 = fwd.sum.options().dtype(torch::kFloat);
  AddLayerNormBackward out{torch::empty_like(fwd.sum),
                           torch::empty(fwd.sum.sizes(), f32.dtype(b_dtype)),
                           torch::empty({w}, f32), torch::empty({w}, f32)};
  torch::Tensor partial = torch::empty({2, cuda::add_layer_norm_chunks(rows), w}, f32);
  cuda::add_layer_norm_backward(
      g.data_ptr<float>(), gs.defined() ? gs.data_ptr<float>() : nullptr, fwd.sum.data_ptr<float>(),
      fwd.mean.data_ptr<float>(), fwd.rstd.data_ptr<float>(), gc.data_ptr<float>(), rows, w,
      out.da.data_ptr<float>(), out.db.data_ptr(), bt, partial.data_ptr<float>(),
      out.dgamma.data_ptr<float>(), out.dbeta.data_ptr<float>(), c10::cuda::getCurrentCUDAStream());
  return out;
#else
  (void)b_dtype;
  return {};
#endif
}

AddLayerNormForward add_layer_norm_forward_reference(const torch::Tensor& a, const torch::Tensor& b,
                                                     const torch::Tensor& gamma,
                                                     const torch::Tensor& beta, double eps) {
  const auto st = stat_type(a);
  const torch::Tensor s = a.to(st) + b.to(st);
  const int64_t w = s.size(-1);
  const torch::Tensor s2 = s.reshape({-1, w});
  const torch::Tensor mean = s2.mean(1);
  const torch::Tensor centred = s2 - mean.unsqueeze(1);
  const torch::Tensor rstd = 1.0 / ((centred * centred).mean(1) + eps).sqrt();
  const torch::Tensor y = centred * rstd.unsqueeze(1) * gamma.to(st) + beta.to(st);
  return {s.to(a.scalar_type()), y.reshape(s.sizes()).to(a.scalar_type()), mean, rstd};
}

AddLayerNormBackward add_layer_norm_backward_reference(const torch::Tensor& g_y,
                                                       const torch::Tensor& g_sum,
                                                       const AddLayerNormForward& fwd,
                                                       const torch::Tensor& gamma,
                                                       torch::ScalarType b_dtype) {
  const auto st = stat_type(fwd.sum);
  const int64_t w = fwd.sum.size(-1);
  const torch::Tensor s = fwd.sum.to(st).reshape({-1, w}), g = g_y.to(st).reshape({-1, w});
  const torch::Tensor xh = (s - fwd.mean.to(st).unsqueeze(1)) * fwd.rstd.to(st).unsqueeze(1);
  const torch::Tensor u = g * gamma.to(st);
  torch::Tensor ds =
      fwd.rstd.to(st).unsqueeze(1) * (u - u.mean(1, true) - xh * (u * xh).mean(1, true));
  if (g_sum.defined()) ds = ds + g_sum.to(st).reshape({-1, w});
  ds = ds.reshape(fwd.sum.sizes());
  return {ds.to(fwd.sum.scalar_type()), ds.to(b_dtype), (g * xh).sum(0), g.sum(0)};
}

}  // namespace fnvlp::kernels
