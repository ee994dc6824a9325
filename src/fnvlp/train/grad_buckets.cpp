#include "fnvlp/train/grad_buckets.hpp"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <chrono>
#include <utility>

#include "fnvlp/comm/nccl.hpp"
#include "fnvlp/core/error.hpp"
#include "fnvlp/core/fault.hpp"

#if FNVLP_WITH_CUDA
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace fnvlp::train {

#if FNVLP_WITH_CUDA
// The buckets' communication stream: each bucket waits there for the stream that produced its
// gradients (an event, no host wait), and the step's stream waits for the last one at finish.
struct GradBuckets::Device {
  const NcclComm* nccl;
  c10::cuda::CUDAStream stream;
  cudaEvent_t produced = nullptr, reduced = nullptr;

  Device(const NcclComm* n, c10::DeviceIndex index)
      : nccl(n), stream(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, index)) {
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming));
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&reduced, cudaEventDisableTiming));
  }
  ~Device() {
    cudaEventDestroy(produced);
    cudaEventDestroy(reduced);
  }
  void launch(torch::Tensor slice) {
    const auto current = c10::cuda::getCurrentCUDAStream(stream.device_index());
    C10_CUDA_CHECK(cudaEventRecord(produced, current.stream()));
    C10_CUDA_CHECK(cudaStreamWaitEvent(stream.stream(), produced, 0));
    const c10::cuda::CUDAStreamGuard on_comm(stream);
    nccl->allreduce_sum_async(slice);
  }
  void join() {
    C10_CUDA_CHECK(cudaEventRecord(reduced, stream.stream()));
    const auto current = c10::cuda::getCurrentCUDAStream(stream.device_index());
    C10_CUDA_CHECK(cudaStreamWaitEvent(current.stream(), reduced, 0));
  }
};
#else
struct GradBuckets::Device {
  void launch(const torch::Tensor&) { FNVLP_FAIL("GradBuckets: no CUDA in this build"); }
  void join() {}
};
#endif

bool GradBuckets::applies(const Comm& comm, const torch::Tensor& buffer, const NcclComm* nccl) {
  return comm.size() > 1 && (buffer.device().is_cpu() || (buffer.is_cuda() && nccl != nullptr));
}

GradBuckets::GradBuckets(const Comm& comm, FlatGradients& grads,
                         const std::vector<torch::Tensor>& params, double bucket_mb,
                         double timeout_s, const NcclComm* nccl)
    : comm_(comm),
      grads_(grads),
      timeout_s_(timeout_s),
      owner_(std::make_shared<GradBuckets*>(this)) {
  const torch::Tensor& buffer = grads.buffer();
  FNVLP_CHECK(bucket_mb > 0 && applies(comm, buffer, nccl),
              "GradBuckets: bucket_mb " << bucket_mb << " on " << buffer.device() << " with "
                                        << comm.size() << " ranks");
  const auto cap = std::max<int64_t>(1, static_cast<int64_t>(bucket_mb * 1024 * 1024 / 4));
  std::vector<int64_t> offset(params.size() + 1, 0);
  for (size_t k = 0; k < params.size(); ++k) offset[k + 1] = offset[k] + params[k].numel();
  FNVLP_CHECK(offset.back() == buffer.numel(),
              "GradBuckets: the parameters do not tile the gradient buffer");
  // Backwards from the last parameter: the backward produces the last layers' gradients first.
  bucket_of_.resize(params.size());
  int64_t end = offset.back(), members = 0;
  for (size_t k = params.size(); k-- > 0;) {
    bucket_of_[k] = ranges_.size();
    ++members;
    if (end - offset[k] >= cap || k == 0) {
      ranges_.emplace_back(offset[k], end);
      members_.push_back(members);
      end = offset[k];
      members = 0;
    }
  }
  done_.assign(params.size(), 0);
  waiting_ = members_;
  if (buffer.device().is_cpu()) {
    mpi_ = std::make_unique<AsyncAllreduce>(comm);
  } else {
#if FNVLP_WITH_CUDA
    device_ = std::make_unique<Device>(nccl, buffer.device().index());
#endif
  }
  // One hook per parameter on its gradient accumulator: it runs once per backward, after the
  // gradient of every use of the parameter has been added (or written in place by a fused kernel).
  const std::shared_ptr<GradBuckets*> owner = owner_;
  for (size_t k = 0; k < params.size(); ++k) {
    std::shared_ptr<torch::autograd::Node> acc = torch::autograd::impl::grad_accumulator(params[k]);
    FNVLP_CHECK(acc, "GradBuckets: parameter " << k << " is not a leaf that requires grad");
    acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [owner, k](const torch::autograd::variable_list& outputs,
                   const torch::autograd::variable_list&) {
          if (*owner) (*owner)->ready(k);
          return outputs;
        }));
    accumulators_.push_back(std::move(acc));
  }
}

GradBuckets::~GradBuckets() { *owner_ = nullptr; }  // the hooks outlive this object

void GradBuckets::begin() {
  std::fill(done_.begin(), done_.end(), 0);
  waiting_ = members_;
  next_ = 0;
  started_in_backward_ = 0;
  armed_ = true;
}

void GradBuckets::ready(size_t param) {
  if (!armed_ || done_[param]) return;
  done_[param] = 1;
  --waiting_[bucket_of_[param]];
  while (next_ < ranges_.size() && waiting_[next_] == 0) {  // in order: the same on every rank
    launch(next_++);
    ++started_in_backward_;
  }
  if (mpi_) mpi_->test();
}

void GradBuckets::launch(size_t bucket) {
  const auto [begin, end] = ranges_[bucket];
  torch::Tensor slice = grads_.buffer().narrow(0, begin, end - begin);
  if (mpi_)
    mpi_->start(slice.data_ptr<float>(), static_cast<size_t>(end - begin));
  else
    device_->launch(slice);
}

double GradBuckets::finish() {
  FNVLP_CHECK(armed_, "GradBuckets::finish without begin");
  armed_ = false;
  // FNVLP_FAULT comm.sleep (core/fault.hpp): a rank that stops before its last buckets.
  fault::point("comm.sleep");
  while (next_ < ranges_.size()) launch(next_++);  // buckets of parameters the step did not use
  const auto t0 = std::chrono::steady_clock::now();
  if (mpi_)
    mpi_->wait(timeout_s_, "the gradient all-reduce (" + std::to_string(ranges_.size()) +
                               " buckets, comm.bucket_mb)");
  else
    device_->join();
  torch::NoGradGuard no_grad;
  grads_.buffer().mul_(1.0f / static_cast<float>(comm_.size()));
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace fnvlp::train
