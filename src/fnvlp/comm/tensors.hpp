#pragma once
// Collectives on tensors, so that the rooms above comm/ exchange tensors without touching buffers
// and counts. Host tensors go through MPI; device (CUDA) tensors through the NCCL communicator
// registered for the Comm (set_device_collectives), else through MPI by host copies. Results live
// on the input's device.
#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "fnvlp/comm/comm.hpp"

namespace fnvlp {

class NcclComm;

// Device tensors of collectives over `comm` go through `nccl` from now on (null: host copies).
// Without NCCL, a collective of device tensors enqueued while a CUDA graph is being captured runs
// from a host node of the graph, on a communicator of its own (MPI_THREAD_MULTIPLE): its copies
// and its MPI call are replayed with the graph.
void set_device_collectives(const Comm& comm, const NcclComm* nccl);
// What those captured host collectives moved while they were captured (a replay counts nothing).
CommTraffic captured_host_collectives_traffic();

// In-place sum over ranks of a float tensor (host or device).
void allreduce_sum(const Comm& comm, torch::Tensor& t);

// Rank 0's parameters and buffers overwrite everyone else's (identical replicas at step 0 and
// after a resume, whatever each rank initialised).
void broadcast_module(const Comm& comm, torch::nn::Module& module, int root = 0);

// All-gathers a float tensor [b, ...] (rows differing per rank allowed) into [B, ...] in rank
// order, without gradient; `offset` receives the first row of this rank's block.
// rows_per_rank >= 0: every rank passes that many rows (the caller's plan: the training step's
// batch), so the device collective skips the agreement on the counts and the offset is computed.
torch::Tensor allgather_rows(const Comm& comm, const torch::Tensor& local, int64_t* offset,
                             int64_t rows_per_rank = -1);
// All-gathers an int64 vector tensor [b] (ids, labels) into [B] in rank order, on `device`
// (default: ids' device). The exchange runs on the host: given host ids, nothing is read back
// from a GPU and the result is copied to it without waiting.
torch::Tensor allgather_ids(const Comm& comm, const torch::Tensor& ids,
                            std::optional<torch::Device> device = std::nullopt);
// The values of an integer tensor, converted to int64.
std::vector<int64_t> to_vector(const torch::Tensor& t);

}  // namespace fnvlp
