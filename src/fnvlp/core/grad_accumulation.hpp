#pragma once
// Gradient accumulation fusion (Megatron-LM): a backward whose weight gradient is a GEMM adds it
// straight into the weight's dense .grad() (beta = 1) instead of returning a fresh tensor that
// autograd then adds there in another pass over a weight-sized buffer. Worth it for the
// vocabulary-sized tied MLM decoder: [30522, 128] per step.
#include <torch/torch.h>

namespace fnvlp {

// The .grad() of `leaf` (a saved input of a custom autograd function: it unpacks as the leaf
// itself) when a backward may add its gradient there in place: an existing contiguous dense buffer
// of `like`'s dtype and device (FlatGradients binds one to every parameter), outside
// create_graph. Otherwise nullptr: the backward returns the gradient as usual.
inline torch::Tensor* bound_grad(torch::Tensor& leaf, const torch::Tensor& like) {
  torch::Tensor& acc = leaf.mutable_grad();
  if (torch::GradMode::is_enabled() || !acc.defined() || acc.layout() != torch::kStrided ||
      !acc.is_contiguous() || acc.sizes() != leaf.sizes() ||
      acc.scalar_type() != like.scalar_type() || acc.device() != like.device())
    return nullptr;
  return &acc;
}

}  // namespace fnvlp
