#pragma once
// A training batch's copy to the GPU, started by the loader one or more steps ahead of the step
// that uses it: on the loader's thread, pinned, on a CUDA stream of its own, so that the copy
// engine moves it while the GPU computes the step before. The step's stream then waits for the
// copy on the device (an event), never the host. On the CPU both ends hand the batch through.
#include <torch/torch.h>

#include "fnvlp/data/dataset.hpp"

namespace fnvlp::train {

class BatchUpload {
 public:
  explicit BatchUpload(torch::Device device) : device_(device) {}
  // Loader side (any thread): pins the batch's tensors and starts their copies (CUDA builds and
  // devices only; the batch keeps the copy in flight in Batch::upload).
  void start(data::Batch& b) const;
  // Step side: the batch on the device. A batch with a copy in flight gets its device tensors once
  // the current stream has been told to wait for them; any other is copied now (non-blocking).
  data::Batch finish(const data::Batch& b) const;

 private:
  torch::Device device_;
};

}  // namespace fnvlp::train
