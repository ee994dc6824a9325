#pragma once
// The gradient all-reduce overlapped with the backward pass (comm.bucket_mb > 0), as PyTorch DDP
// does it: FlatGradients' buffer cut into buckets of about bucket_mb MiB in the reverse order of
// the parameters (the order in which the backward produces their gradients), each bucket summed
// over the ranks as soon as every parameter in it has its gradient for the step, while the
// backward goes on. A parameter is done when its gradient accumulator has run (a post hook on
// autograd's AccumulateGrad node: after every use of the parameter in the step). Buckets start in
// their fixed order on every rank (a ready bucket waits for the ones before it); the buckets of
// parameters the step did not use are started when the backward has returned (finish), so none
// waits forever. finish() then waits for every bucket and averages the buffer once: the result is
// FlatGradients::allreduce_mean's (bitwise at 2 ranks, where a sum of two has one order).
//
// Where: CPU tensors over MPI (MPI_Iallreduce, progressed at every hook); CUDA tensors over NCCL
// (each bucket on a communication stream that first waits for the gradients' stream, the step's
// stream waiting for it at finish: no host wait). CUDA tensors over MPI keep the single
// all-reduce after the backward (the host copies would serialise anyway).
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fnvlp/comm/async_allreduce.hpp"
#include "fnvlp/comm/comm.hpp"
#include "fnvlp/comm/flat_gradients.hpp"
#include "fnvlp/comm/tensors.hpp"

namespace fnvlp {
class NcclComm;
}

namespace fnvlp::train {

class GradBuckets {
 public:
  // params: FlatGradients' parameters in its order (their gradients are its buffer's slices).
  // nccl: the device collectives of CUDA parameters (null: MPI). timeout_s bounds finish's wait.
  GradBuckets(const Comm& comm, FlatGradients& grads, const std::vector<torch::Tensor>& params,
              double bucket_mb, double timeout_s, const NcclComm* nccl);
  ~GradBuckets();
  GradBuckets(const GradBuckets&) = delete;
  GradBuckets& operator=(const GradBuckets&) = delete;

  // Whether buckets apply here (more than one rank; CPU, or CUDA with NCCL).
  static bool applies(const Comm& comm, const torch::Tensor& buffer, const NcclComm* nccl);

  // Before the step's backward: every bucket waits for its parameters again.
  void begin();
  // After the backward: starts the buckets not yet started, waits for all, divides the buffer
  // by the rank count. Returns the seconds the host waited for communication here.
  double finish();

  // The buckets as [begin, end) element ranges of the flat buffer, in the order they start.
  const std::vector<std::pair<int64_t, int64_t>>& ranges() const { return ranges_; }
  // Buckets started during the last backward (before finish): the overlapped ones.
  int64_t started_in_backward() const { return started_in_backward_; }
  // Bytes the MPI buckets have summed so far (NcclComm counts its own).
  uint64_t mpi_bytes() const { return mpi_ ? mpi_->bytes() : 0; }

 private:
  struct Device;
  void ready(size_t param);
  void launch(size_t bucket);

  const Comm& comm_;
  FlatGradients& grads_;
  double timeout_s_;
  std::vector<std::pair<int64_t, int64_t>> ranges_;  // per bucket, in start order
  std::vector<size_t> bucket_of_;                    // per parameter
  std::vector<int64_t> members_;                     // parameters per bucket
  std::vector<int64_t> waiting_;                     // per bucket, parameters not yet done
  std::vector<char> done_;                           // per parameter, this step
  size_t next_ = 0;                                  // the next bucket to start
  bool armed_ = false;
  int64_t started_in_backward_ = 0;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // keep the hooks alive
  std::shared_ptr<GradBuckets*> owner_;  // the hooks' way to this object (null once destroyed)
  std::unique_ptr<AsyncAllreduce> mpi_;
  std::unique_ptr<Device> device_;
};

}  // namespace fnvlp::train
