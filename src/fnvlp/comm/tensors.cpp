#include "fnvlp/comm/tensors.hpp"

#include <algorithm>
#include <limits>

#include "fnvlp/comm/nccl.hpp"
#include "fnvlp/core/device_copy.hpp"

#if FNVLP_WITH_CUDA
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <string>
#endif

namespace fnvlp {

namespace {
// One device communicator per process (a job has one Comm of its ranks).
const Comm* device_comm_of = nullptr;
const NcclComm* device_comm = nullptr;
CommTraffic captured_traffic;

#if FNVLP_WITH_CUDA
// Whether the current stream of t's device is being captured into a CUDA graph.
bool capturing(const torch::Tensor& t) {
  if (!t.is_cuda()) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(c10::cuda::getCurrentCUDAStream(t.device().index()).stream(),
                               &status) == cudaSuccess &&
         status != cudaStreamCaptureStatusNone;
}

// A host collective inside a CUDA graph (device tensors over MPI while a step is captured): the
// data copied into page-locked buffers, MPI called from a host node of the graph in stream order,
// the result copied back; every replay repeats the three. Host nodes run on CUDA's callback
// thread while the main thread may be in MPI too: a communicator of their own, and
// MPI_THREAD_MULTIPLE (Comm::threads_multiple; the trainer refuses the setup without it).
struct HostNode {
  enum Kind { kSum, kGather } kind = kSum;
  torch::Tensor send, recv;  // float, page-locked
  std::string what;
};
// The graphs that call them live as long as the process: so do they.
std::vector<std::unique_ptr<HostNode>>& host_nodes() {
  static std::vector<std::unique_ptr<HostNode>> nodes;
  return nodes;
}
const Comm& host_node_comm() {
  static const Comm comm;  // collective: every rank captures the same step at the same time
  return comm;
}

void CUDART_CB run_host_node(void* data) {
  const auto* n = static_cast<const HostNode*>(data);
  const Comm& comm = host_node_comm();
  try {
    if (n->kind == HostNode::kSum) {
      comm.allreduce(n->send.data_ptr<float>(), static_cast<size_t>(n->send.numel()),
                     ReduceOp::kSum);
    } else {
      const float* p = n->send.data_ptr<float>();
      const std::vector<float> all = comm.allgatherv(std::vector<float>(p, p + n->send.numel()));
      FNVLP_CHECK(static_cast<int64_t>(all.size()) == n->recv.numel(),
                  "gathered " << all.size() << " floats for " << n->recv.numel());
      std::copy(all.begin(), all.end(), n->recv.data_ptr<float>());
    }
  } catch (const std::exception& e) {  // no way back to the step from this thread
    spdlog::critical("rank {}: {} in a CUDA graph's host node failed: {}", comm.rank(), n->what,
                     e.what());
    spdlog::default_logger()->flush();
    comm.abort(1);
  }
}

cudaStream_t current_stream(const torch::Device& device) {
  return c10::cuda::getCurrentCUDAStream(device.index()).stream();
}

// Page-locked float memory for `like`'s elements, allocated outside the capture's rules (an
// allocation is no stream work; the capture would refuse it) and freed with the process.
torch::Tensor pinned_like(const torch::Tensor& like) {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  C10_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  void* p = nullptr;
  const cudaError_t rc =
      cudaHostAlloc(&p, std::max<size_t>(like.numel(), 1) * sizeof(float), cudaHostAllocDefault);
  C10_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  C10_CUDA_CHECK(rc);
  return torch::from_blob(
      p, like.sizes(), [](void* q) { cudaFreeHost(q); }, torch::dtype(torch::kFloat));
}

void copy_async(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                const torch::Device& device) {
  C10_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, current_stream(device)));
}

// Enqueues `n` on the capturing stream of `device`: its send buffer must be filled before, its
// recv buffer read after, on that stream.
void enqueue_host_node(std::unique_ptr<HostNode> n, const torch::Device& device) {
  C10_CUDA_CHECK(cudaLaunchHostFunc(current_stream(device), run_host_node, n.get()));
  host_nodes().push_back(std::move(n));
}

void captured_allreduce_sum(torch::Tensor& t) {
  auto n = std::make_unique<HostNode>();
  n->kind = HostNode::kSum;
  n->send = pinned_like(t);
  n->what = "an all-reduce of " + std::to_string(t.numel()) + " floats";
  const size_t bytes = static_cast<size_t>(t.nbytes());
  const torch::Tensor host = n->send;
  copy_async(host.data_ptr(), t.data_ptr(), bytes, cudaMemcpyDeviceToHost, t.device());
  captured_traffic.allreduce += bytes;
  enqueue_host_node(std::move(n), t.device());
  copy_async(t.data_ptr(), host.data_ptr(), bytes, cudaMemcpyHostToDevice, t.device());
}

torch::Tensor captured_allgather_rows(const Comm& comm, const torch::Tensor& local) {
  auto n = std::make_unique<HostNode>();
  n->kind = HostNode::kGather;
  const torch::Tensor t = local.detach().to(torch::kFloat).contiguous();
  std::vector<int64_t> shape = t.sizes().vec();
  shape[0] *= comm.size();
  torch::Tensor out = torch::empty(shape, t.options());
  n->send = pinned_like(t);
  n->recv = pinned_like(out);
  n->what = "an all-gather of " + std::to_string(t.numel()) + " floats per rank";
  const torch::Tensor send = n->send, recv = n->recv;
  copy_async(send.data_ptr(), t.data_ptr(), static_cast<size_t>(t.nbytes()), cudaMemcpyDeviceToHost,
             t.device());
  captured_traffic.allgather += static_cast<uint64_t>(out.nbytes());
  enqueue_host_node(std::move(n), t.device());
  copy_async(out.data_ptr(), recv.data_ptr(), static_cast<size_t>(out.nbytes()),
             cudaMemcpyHostToDevice, t.device());
  return out;
}
#endif

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

CommTraffic captured_host_collectives_traffic() { return captured_traffic; }

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
#if FNVLP_WITH_CUDA
  if (capturing(t)) return captured_allreduce_sum(t);
#endif
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
#if FNVLP_WITH_CUDA
  if (capturing(local)) {
    FNVLP_CHECK(rows_per_rank >= 0 && local.size(0) == rows_per_rank,
                "allgather_rows inside a CUDA graph over MPI needs the rows per rank fixed by the "
                "caller (rows_per_rank)");
    if (offset) *offset = comm.rank() * rows_per_rank;
    return captured_allgather_rows(comm, local);
  }
#endif
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
