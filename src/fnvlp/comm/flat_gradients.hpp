#pragma once
// The gradients of a model as one flat buffer, averaged over the ranks in place: the data-parallel
// gradient average of fnvlp-pretrain (train/trainer.cpp, train/grad_buckets.hpp).
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "fnvlp/comm/comm.hpp"

namespace fnvlp {

// The gradients of a fixed parameter list as views of one flat float buffer, so that averaging
// them over ranks is one in-place allreduce on that buffer: no packing into buckets and back (two
// passes over every gradient) and no fresh bucket memory to fault in at every step. Autograd
// accumulates into a gradient that is already defined in place (`grad += new`, libtorch's
// AccumulateGrad without create_graph), so once bound the views stay the gradients; a gradient
// that was replaced anyway (set to a new tensor by other code) is copied back into its slot and
// re-bound before the allreduce, so the result never depends on that.
class FlatGradients {
 public:
  // Binds every parameter's gradient to its slice (zeros); the parameters must be float32.
  explicit FlatGradients(std::vector<torch::Tensor> params);
  // Zeroes every gradient (the optimizer's zero_grad, as one pass over the buffer).
  void zero();
  // Averages the gradients over the ranks of `comm`, in place, with allreduce calls of at most
  // `chunk_elems` floats each (MPI counts are int). Deterministic for a fixed rank count, like
  // the per-tensor sum and division. Returns the number of allreduce calls (0 on one rank).
  int allreduce_mean(const Comm& comm, size_t chunk_elems = size_t(1) << 28);
  // torch::nn::utils::clip_grad_norm_ over every gradient as one pass over the buffer: scales
  // them in place by max_norm / (norm + 1e-6) where that is below 1, with `norm` their global L2
  // norm, which it returns (the norm before clipping). libtorch's takes one norm per parameter
  // (93 tensors for `tiny`) and a scale per parameter.
  double clip_in_place(double max_norm);
  // The factor clip_in_place would scale by (1 where it would not clip), without scaling: for an
  // optimizer step that applies it on the fly (adamw_step_cpu's grad_scale). `norm`, if given,
  // receives the global L2 norm.
  float clip_scale(double max_norm, double* norm = nullptr);
  // 1 / clip_scale as a 0-dim float tensor on the buffer's device, max(1, (norm + 1e-6) /
  // max_norm), computed there: no host read of the norm, so a CUDA step does not wait for its
  // backward here (adamw_step_cuda's grad_divisor).
  torch::Tensor clip_divisor(double max_norm);
  // How many gradients were found replaced and re-bound so far (0 in a normal run).
  int64_t rebinds() const { return rebinds_; }
  const torch::Tensor& buffer() const { return flat_; }

 private:
  void rebind_replaced();
  torch::Tensor slot(size_t i) const;  // parameter i's view of the buffer

  std::vector<torch::Tensor> params_;
  std::vector<int64_t> offsets_;
  torch::Tensor flat_;
  int64_t rebinds_ = 0;
};

}  // namespace fnvlp
