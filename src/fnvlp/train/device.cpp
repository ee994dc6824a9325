#include "fnvlp/train/device.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>

#include "fnvlp/comm/job_main.hpp"
#include "fnvlp/comm/nccl.hpp"
#include "fnvlp/comm/node_local.hpp"
#include "fnvlp/comm/tensors.hpp"
#include "fnvlp/core/fault.hpp"
#include "fnvlp/core/host.hpp"

#if FNVLP_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace fnvlp::train {

bool cuda_built() {
#if FNVLP_WITH_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_devices() {
#if FNVLP_WITH_CUDA
  return static_cast<int>(torch::cuda::device_count());
#else
  return 0;
#endif
}

std::string DeviceChoice::describe() const {
  return device.str() + " (node-local rank " + std::to_string(local_rank) + " of " +
         std::to_string(local_size) + ", " + std::to_string(visible) + " CUDA devices visible)";
}

DeviceChoice choose_device(const Comm& comm, DeviceKind want) {
  DeviceChoice c;
  const NodeLocal local = node_local(comm);
  c.local_rank = local.rank;
  c.local_size = local.size;
  c.visible = want == DeviceKind::kCpu ? 0 : cuda_devices();
  if (want == DeviceKind::kCpu) return c;
  std::string error;
  if (want == DeviceKind::kCuda && c.visible == 0) {
    const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
    error = "train.device=cuda but rank " + std::to_string(comm.rank()) + " on " + host_name() +
            " sees no CUDA device (" +
            (cuda_built() ? std::string("CUDA_VISIBLE_DEVICES=") + (cvd ? cvd : "<unset>")
                          : std::string("this build has no CUDA: FNVLP_GPU=1 env/build.sh")) +
            "); use train.device=cpu or auto";
  }
  if (const std::string agreed = agree_on_error(comm, error); !agreed.empty())
    throw UsageError(agreed);
  // auto: one device kind for the whole job (the collectives of a mixed job would not match).
  const bool all_cuda = comm.allreduce_min(c.visible > 0 ? 1 : 0) == 1;
  if (!all_cuda) {
    if (comm.is_root())
      spdlog::info("train.device=auto: {} -> cpu",
                   cuda_built() ? "a rank sees no CUDA device" : "this build has no CUDA");
    return c;
  }
#if FNVLP_WITH_CUDA
  const int index = c.local_rank % c.visible;
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
  c.device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
  // FNVLP_FAULT step.oom on this device: an allocation larger than any GPU (64 TiB) fails in
  // CUDA's caching allocator, the error a step too large for the device raises.
  fault::set_out_of_memory([dev = c.device] {
    (void)torch::empty({int64_t{1} << 46}, torch::dtype(torch::kUInt8).device(dev));
  });
  if (c.local_size > c.visible && c.local_rank == 0)
    spdlog::warn("{} ranks on {} share {} CUDA devices: ranks share GPUs (NCCL refuses that)",
                 c.local_size, host_name(), c.visible);
#endif
  return c;
}

std::unique_ptr<NcclComm> make_device_comm(const Comm& comm, const DeviceChoice& device,
                                           CommBackend backend, double timeout_s) {
  if (backend == CommBackend::kMpi) return nullptr;
  if (!device.device.is_cuda()) {
    if (backend == CommBackend::kNccl)
      throw UsageError("comm.backend=nccl needs train.device=cuda (the device is " +
                       device.device.str() + ")");
    return nullptr;
  }
  if (!nccl_built()) {
    if (backend == CommBackend::kNccl)
      throw UsageError("comm.backend=nccl: this build has no NCCL (FNVLP_GPU=1 env/build.sh)");
    if (comm.is_root()) spdlog::info("comm.backend=auto: no NCCL in this build -> mpi");
    return nullptr;
  }
  // NCCL needs one GPU per rank: where ranks of a node share one, auto takes MPI (host copies)
  // on every rank (one backend for the job), and nccl is refused by NcclComm with the ranks named.
  const bool shared = comm.allreduce_max(device.local_size > device.visible ? 1 : 0) == 1;
  if (backend == CommBackend::kAuto && shared) {
    if (comm.is_root())
      spdlog::info(
          "comm.backend=auto: ranks of a node share a GPU ({} ranks, {} GPUs on {}; NCCL needs "
          "one per rank) -> mpi (host copies)",
          device.local_size, device.visible, host_name());
    return nullptr;
  }
  return std::make_unique<NcclComm>(comm, timeout_s);
}

void configure_cuda_math(const torch::Device& device, bool on) {
  if (!device.is_cuda()) return;
  // PyTorch's deterministic mode accepts cuBLAS only with a fixed workspace configuration (else
  // it warns at every GEMM). Set only then: while it is set, libtorch parses it with a std::regex
  // at every cuBLAS call (aten/src/ATen/cuda/CublasHandlePool.cpp), host time on every GEMM.
  if (on) setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  auto& ctx = at::globalContext();
  ctx.setFloat32MatmulPrecision("highest");
  ctx.setAllowTF32CuDNN(false);
  ctx.setDeterministicAlgorithms(on, /*warn_only=*/true);
  ctx.setDeterministicCuDNN(on);
  ctx.setBenchmarkCuDNN(!on);
}

void check_precision(const Comm& comm, Precision precision, const torch::Device& device) {
  if (precision == Precision::kBf16 && !device.is_cuda())
    throw UsageError("train.precision=bf16 needs a CUDA device (the device is " + device.str() +
                     "): bf16 autocast runs on CUDA only; use fp32 on the CPU");
}

}  // namespace fnvlp::train
