#pragma once
// The run's compute resources, from train.* and comm.*: the host threads, the device each rank
// trains on, the batches' copies to it and the collectives of device tensors (NCCL or MPI).
#include <torch/torch.h>

#include <memory>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/comm/nccl.hpp"
#include "fnvlp/train/batch_upload.hpp"
#include "fnvlp/train/device.hpp"
#include "fnvlp/train/pretrain_config.hpp"

namespace fnvlp::train {

class RunDevices {
 public:
  // Collective (the device choice, the NCCL communicator). Sets the intra-op and BLAS threads,
  // refuses a precision the device cannot run, sets CUDA's math modes and the attention kernel,
  // and registers the NCCL communicator for the tensor collectives (comm/tensors.hpp).
  RunDevices(const Comm& comm, const TrainConfig& train, const CommConfig& cfg);
  // Unregisters the NCCL communicator from the tensor collectives before it goes.
  ~RunDevices();
  RunDevices(const RunDevices&) = delete;
  RunDevices& operator=(const RunDevices&) = delete;

  torch::Device device() const { return choice.device; }

  DeviceChoice choice;
  BatchUpload upload{torch::kCPU};  // the batches' copies, started by the loader (batch_upload.hpp)
  std::unique_ptr<NcclComm> nccl;   // collectives of device tensors (null: MPI)

 private:
  const Comm& comm_;
};

}  // namespace fnvlp::train
