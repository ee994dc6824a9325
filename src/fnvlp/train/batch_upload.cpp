#include "fnvlp/train/batch_upload.hpp"

#include <array>
#include <memory>

#if FNVLP_WITH_CUDA
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace fnvlp::train {

namespace {

constexpr size_t kTensors = 7;
std::array<torch::Tensor*, kTensors> batch_tensors(data::Batch& b) {
  return {&b.prepared, &b.prepared2, &b.tokens, &b.attention_mask,
          &b.pair_id,  &b.image_id,  &b.label};
}

#if FNVLP_WITH_CUDA
// The device tensors of one batch (batch_tensors' order) and the event after their copies (the
// runtime's event: libtorch's wrapper moved from at::cuda to c10::cuda between versions).
struct InFlight {
  InFlight() { C10_CUDA_CHECK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming)); }
  ~InFlight() { cudaEventDestroy(copied); }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
  std::array<torch::Tensor, kTensors> tensors;
  cudaEvent_t copied = nullptr;
};
#endif

}  // namespace

void BatchUpload::start(data::Batch& b) const {
  if (!device_.is_cuda()) return;
  for (torch::Tensor* t : batch_tensors(b))
    if (t->defined()) *t = t->pin_memory();  // also what the step's host copies read
#if FNVLP_WITH_CUDA
  const c10::cuda::CUDAGuard on_device(device_);
  const c10::cuda::CUDAStreamGuard on_stream(c10::cuda::getStreamFromPool(false, device_.index()));
  auto flight = std::make_shared<InFlight>();
  const auto host = batch_tensors(b);
  for (size_t i = 0; i < kTensors; ++i)
    if (host[i]->defined()) flight->tensors[i] = host[i]->to(device_, /*non_blocking=*/true);
  C10_CUDA_CHECK(cudaEventRecord(flight->copied, c10::cuda::getCurrentCUDAStream(device_.index())));
  b.upload = std::move(flight);
#endif
}

data::Batch BatchUpload::finish(const data::Batch& b) const {
  if (device_.is_cpu()) return b;
  data::Batch d = b;
  d.upload.reset();
  const auto out = batch_tensors(d);
#if FNVLP_WITH_CUDA
  if (b.upload) {
    const auto& flight = *std::static_pointer_cast<const InFlight>(b.upload);
    const c10::cuda::CUDAStream step = c10::cuda::getCurrentCUDAStream(device_.index());
    C10_CUDA_CHECK(cudaStreamWaitEvent(step.stream(), flight.copied, 0));
    for (size_t i = 0; i < kTensors; ++i) {
      if (!flight.tensors[i].defined()) continue;
      // Allocated on the copy stream, used on the step's: the caching allocator must not hand the
      // memory to the next copy before the step's kernels are done with it.
      flight.tensors[i].record_stream(step);
      *out[i] = flight.tensors[i];
    }
    return d;
  }
#endif
  for (torch::Tensor* t : out)
    if (t->defined()) *t = t->to(device_, /*non_blocking=*/true);
  return d;
}

}  // namespace fnvlp::train
