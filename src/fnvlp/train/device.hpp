#pragma once
// Where a rank trains (train.device, train.precision, comm.backend): the one place that decides
// the device, the GPU of each rank and the collectives of device tensors.
#include <torch/torch.h>

#include <memory>
#include <string>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/core/config.hpp"

namespace fnvlp {
class NcclComm;
}

namespace fnvlp::train {

FNVLP_CONFIG_ENUM(DeviceKind, (kAuto, "auto"), (kCpu, "cpu"), (kCuda, "cuda"))
FNVLP_CONFIG_ENUM(Precision, (kFp32, "fp32"), (kBf16, "bf16"))
FNVLP_CONFIG_ENUM(CommBackend, (kAuto, "auto"), (kMpi, "mpi"), (kNccl, "nccl"))

// True when this build has the CUDA path (FNVLP_WITH_CUDA) and a CUDA libtorch.
bool cuda_built();
// CUDA devices this process sees (0 without a CUDA build or driver).
int cuda_devices();

struct DeviceChoice {
  torch::Device device{torch::kCPU};
  int local_rank = 0;  // among the node's ranks: the GPU is local_rank % visible devices
  int local_size = 1;
  int visible = 0;  // CUDA devices this rank sees
  std::string describe() const;
};

// Collective. cuda: every rank needs a device, else a UsageError on all ranks naming the ranks
// without one (exit 2). auto: cuda when every rank sees one, else cpu with one log line. The
// chosen GPU becomes the rank's current CUDA device.
DeviceChoice choose_device(const Comm& comm, DeviceKind want);

// The tensor collectives of device tensors: NCCL (comm.backend nccl, or auto on CUDA with an
// NCCL build), else MPI through host copies. Collective; null for a CPU device or MPI.
std::unique_ptr<NcclComm> make_device_comm(const Comm& comm, const DeviceChoice& device,
                                           CommBackend backend, double timeout_s);

// CUDA math settings: fp32 matmuls and convolutions in full fp32 (no TF32: bf16 autocast is the
// one reduced precision, and only when asked for); train.deterministic: deterministic ATen/cuDNN
// algorithms (a warning names any op that has none) with cuBLAS's fixed workspaces. The CPU path
// is deterministic for a fixed thread count.
void configure_cuda_math(const torch::Device& device, bool deterministic);

// Refuses precision/device combinations that cannot run (bf16 needs CUDA), on every rank.
void check_precision(const Comm& comm, Precision precision, const torch::Device& device);

}  // namespace fnvlp::train
