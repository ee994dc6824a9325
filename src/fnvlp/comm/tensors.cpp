#include "fnvlp/comm/tensors.hpp"

#include <algorithm>
#include <limits>

#include "fnvlp/comm/nccl.hpp"
#include "fnvlp/core/device_copy.hpp"

namespace fnvlp {

namespace {
// One device communicator per process (a job has one Comm of its ranks).
const Comm* device_comm_of = nullptr;
const NcclComm* device_comm = nullptr;

const NcclComm* nccl_for(const Comm& comm, const torch::Tensor& t) {
  return t.is_cuda() && device_comm_of == &comm ? device_comm : nullptr;
}

void bcast_tensor(const Comm& comm, torch::Tensor t, int root) {
  torch::NoGradGuard no_grad;
  if (t.is_cuda()) {
    if (const NcclComm* nccl = nccl_for(comm, t)) return nccl->broadcast(t, root);
    torch::Tensor host = t.to(torch::kCPU).contiguous();
    bcast_tensor(comm, host, root);
    t.copy_(host);
    return;
  }
  FNVLP_CHECK(t.is_contiguous() && t.device().is_cpu(), "broadcast needs contiguous CPU tensors");
  if (t.scalar_type() == torch::kFloat) {
    comm.bcast(t.data_ptr<float>(), static_cast<size_t>(t.numel()), root);
  } else if (t.scalar_type() == torch::kDouble) {
    comm.bcast(t.data_ptr<double>(), static_cast<size_t>(t.numel()), root);
  } else if (t.scalar_type() == torch::kLong) {
    comm.bcast(t.data_ptr<int64_t>(), static_cast<size_t>(t.numel()), root);
  } else {
    FNVLP_FAIL("broadcast_module: unsupported dtype " << t.scalar_type());
  }
}
}  // namespace

void set_device_collectives(const Comm& comm, const NcclComm* nccl) {
  device_comm_of = nccl ? &comm : nullptr;
  device_comm = nccl;
}

void allreduce_sum(const Comm& comm, torch::Tensor& t) {
  torch::NoGradGuard no_grad;
  FNVLP_CHECK(t.scalar_type() == torch::kFloat && t.is_contiguous(),
              "allreduce_sum needs a contiguous float tensor, got " << t.scalar_type());
  if (comm.size() == 1) return;
  if (const NcclComm* nccl = nccl_for(comm, t)) return nccl->allreduce_sum(t);
  if (t.is_cuda()) {
    torch::Tensor host = t.to(torch::kCPU);
    allreduce_sum(comm, host);
    t.copy_(host);
    return;
  }
  comm.allreduce(t.data_ptr<float>(), static_cast<size_t>(t.numel()), ReduceOp::kSum);
}

void broadcast_module(const Comm& comm, torch::nn::Module& module, int root) {
  for (auto& p : module.parameters()) bcast_tensor(comm, p.data(), root);
  for (auto& b : module.buffers()) bcast_tensor(comm, b, root);
}

torch::Tensor allgather_rows(const Comm& comm, const torch::Tensor& local, int64_t* offset,
                             int64_t rows_per_rank) {
  if (comm.size() == 1) {  // a copy where it lies: on a GPU no round trip, no collective's wait
    if (offset) *offset = 0;
    return local.detach().to(torch::kFloat, /*non_blocking=*/false, /*copy=*/true,
                             torch::MemoryFormat::Contiguous);
  }
  if (const NcclComm* nccl = nccl_for(comm, local)) {
    const auto t = local.detach().to(torch::kFloat).contiguous();
    if (offset)
      *offset = rows_per_rank >= 0 ? comm.rank() * rows_per_rank : comm.exscan_sum(t.size(0));
    return nccl->allgather_rows(t, rows_per_rank);
  }
  if (local.is_cuda())
    return to_device_async(allgather_rows(comm, local.to(torch::kCPU), offset, rows_per_rank),
                           local.device());
  auto t = local.detach().to(torch::kFloat).contiguous();
  const int64_t rows = t.size(0);
  int64_t row_elems = 1;
  for (int64_t d = 1; d < t.dim(); ++d) row_elems *= t.size(d);
  std::vector<float> mine(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
  std::vector<float> all = comm.allgatherv(mine);
  const auto counts = comm.allgather<int64_t>(rows);
  if (offset) {
    *offset = 0;
    for (int r = 0; r < comm.rank(); ++r) *offset += counts[static_cast<size_t>(r)];
  }
  std::vector<int64_t> shape = t.sizes().vec();
  shape[0] = static_cast<int64_t>(all.size()) / std::max<int64_t>(row_elems, 1);
  if (all.empty()) return torch::zeros(shape, torch::kFloat);
  return torch::from_blob(all.data(), shape, torch::kFloat).clone();
}

torch::Tensor allgather_ids(const Comm& comm, const torch::Tensor& ids,
                            std::optional<torch::Device> device) {
  return to_device_async(torch::tensor(comm.allgatherv(to_vector(ids)), torch::kLong),
                         device.value_or(ids.device()));
}

std::vector<int64_t> to_vector(const torch::Tensor& t) {
  const auto c = t.to(torch::kCPU, torch::kLong).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

}  // namespace fnvlp
