#pragma once
#include <torch/torch.h>

namespace fnvlp {

// `device` with its index resolved: a CUDA device named without an index is the current one
// (cuda:N), which is what tensors created on it report, so devices compare equal to tensors'.
inline torch::Device resolved_device(const torch::Device& device) {
  if (device.has_index() || device.is_cpu()) return device;
  return torch::empty({0}, torch::TensorOptions().device(device)).device();
}

// `t` on `device`. A CPU tensor bound for a GPU is staged in page-locked memory and copied
// non-blocking: index tensors built on the host (MLM masks, ITM pairs, gathered ids) reach the
// GPU without a stream synchronisation, where a plain .to(device) waits for every queued kernel.
// The caching host allocator keeps the staging block until the copy has run.
inline torch::Tensor to_device_async(const torch::Tensor& t, const torch::Device& device) {
  if (!t.defined() || t.device() == device) return t;
  if (t.device().is_cpu() && device.is_cuda())
    return t.pin_memory().to(device, /*non_blocking=*/true);
  return t.to(device);
}

// Copies the host tensor `src` into `dst` (a tensor at a fixed address that a captured step reads:
// the static step's staged inputs) without waiting for the device: through page-locked memory
// into a GPU, as to_device_async.
inline void stage_into(torch::Tensor& dst, const torch::Tensor& src) {
  if (dst.is_cuda() && src.device().is_cpu())
    dst.copy_(src.pin_memory(), /*non_blocking=*/true);
  else
    dst.copy_(src);
}

}  // namespace fnvlp
