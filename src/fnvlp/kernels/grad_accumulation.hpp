#pragma once
// Gradient accumulation fusion (Megatron-LM): a backward whose weight gradient is a GEMM adds it
// straight into the weight's dense .grad() (beta = 1) instead of returning a fresh tensor that
// autograd then adds there in another pass over a weight-sized buffer. Worth it most for the
// vocabulary-sized tied MLM decoder ([30522, 128] per step; in libtorch 1.13 the returned dense
// gradient was also copied once more where the embedding's sparse row gradients met it). The sum
// .grad() receives is the same; only a torch::autograd::grad() taken with respect to such a weight
// itself would miss the term, and nothing here takes one.
#include <torch/torch.h>

#include <cstdint>

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

// acc[j] += sum_r g[r, j] over the rows of g [rows, cols] (a bias gradient): each column's sum is
// formed first and then added, as autograd adds a returned gradient, so a layer used twice in one
// step accumulates the same way.
void add_column_sums(const float* g, int64_t rows, int64_t cols, float* acc);
// The same over the first `cols` columns of rows `ld` apart (a column block of a wider matrix).
void add_column_sums(const float* g, int64_t rows, int64_t cols, int64_t ld, float* acc);

}  // namespace fnvlp
