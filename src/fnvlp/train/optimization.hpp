#pragma once
// The optimizer and its gradient buffers, from optim.* and comm.*: AdamW over the model's
// parameters (weight decay on the >= 2-d ones), their gradients in one flat buffer, the buckets
// that all-reduce it during the backward, and the static step's AdamW that reads a device flag.
#include <torch/torch.h>

#include <memory>
#include <vector>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/comm/flat_gradients.hpp"
#include "fnvlp/train/pretrain_config.hpp"

namespace fnvlp {
class NcclComm;
}

namespace fnvlp::train {

class FlaggedAdamW;
class GradBuckets;

struct Optimization {
  // comm.bucket_mb auto (-1): buckets of 25 MiB on NCCL only; over MPI the overlap measured slower
  // (tests/bench/README.md, "Communication overlap"). Buckets only where they apply (more than one
  // rank). Root logs how the gradients are averaged.
  Optimization(const Comm& comm, std::vector<torch::Tensor> params, const OptimConfig& optim,
               const CommConfig& cfg, const NcclComm* nccl);
  ~Optimization();
  Optimization(const Optimization&) = delete;
  Optimization& operator=(const Optimization&) = delete;

  std::vector<torch::Tensor> params;
  std::unique_ptr<FlatGradients> grads;  // params' gradients, one buffer for the all-reduce
  std::unique_ptr<GradBuckets> buckets;  // null: one all-reduce after the backward
  std::unique_ptr<torch::optim::AdamW> adamw;
  std::unique_ptr<FlaggedAdamW> flagged;  // the static step's, once AdamW has its state
};

}  // namespace fnvlp::train
