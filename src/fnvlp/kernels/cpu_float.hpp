#pragma once
#include <torch/torch.h>

namespace fnvlp {

// A defined, contiguous, strided float32 CPU tensor: what the hand-written kernels (Dense, the
// fused cross-entropy, AdamW) read through data_ptr<float>() as one flat array. Anything else
// takes the libtorch path.
inline bool is_dense_cpu_float(const torch::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.scalar_type() == torch::kFloat &&
         t.layout() == torch::kStrided && t.is_contiguous();
}

}  // namespace fnvlp
