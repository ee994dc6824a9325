#pragma once
// NcclComm: GPU collectives (NCCL) for one rank per CUDA device, bootstrapped through Comm (MPI).
// nccl.h and the CUDA headers stay in nccl.cpp, so this header compiles in every build; without
// FNVLP_WITH_NCCL the constructor throws. A collective first agrees on its arguments through MPI
// (one small allgather), unless the caller's plan fixes them (allgather_rows' rows_per_rank,
// allreduce_sum_async), so a bad tensor on one rank is an error on every rank rather than a peer
// left waiting inside NCCL; then it enqueues on the current CUDA stream and returns: no host wait.
// A thread watches what is in flight (an event after each collective): an NCCL error, or a
// collective not done within the timeout, aborts the communicator and ends the job on every rank
// with a line naming the collective and the rank (a dead peer becomes an error, not a hang).
#include <torch/types.h>

#include <functional>
#include <memory>
#include <string>

#include "fnvlp/comm/comm.hpp"

namespace fnvlp {

// True when this build has the NCCL backend (FNVLP_WITH_NCCL).
bool nccl_built();

class NcclComm {
 public:
  // Collective over `comm`: rank 0 makes the ncclUniqueId, `comm` broadcasts it, every rank joins
  // on its current CUDA device (set it first: one device per rank). Throws fnvlp::Error on every
  // rank together when the build has no NCCL, a rank has no CUDA device, two ranks share a device,
  // or the initialisation fails. `timeout_s` bounds how long the initialisation and each
  // collective may wait before the communicator is aborted. `comm` must outlive this object.
  explicit NcclComm(const Comm& comm, double timeout_s = 600);
  // ncclCommDestroy after a clean finalize; ncclCommAbort after an error or during unwinding
  // (abort is local and never waits on peers).
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const;
  int size() const;
  // The CUDA device this rank's communicator uses.
  int device() const;

  // In-place sum over ranks of a contiguous CUDA tensor on device() (float, bfloat16, double,
  // int64, int32), on the current CUDA stream; every rank passes the same dtype and shape.
  void allreduce_sum(torch::Tensor& t) const;
  // allreduce_sum without the MPI agreement and without the host wait: enqueued on the current
  // CUDA stream, for a plan every rank follows identically (GradBuckets' buckets, fixed when they
  // are built). An NCCL error shows at the next synchronize() or agreed collective.
  void allreduce_sum_async(torch::Tensor& t) const;
  // Concatenation along dim 0, in rank order, of a CUDA tensor [b, ...] whose b may differ per
  // rank (the other dims and the dtype may not); returns a new tensor [sum b, ...] of its dtype.
  // rows_per_rank >= 0: every rank passes that many rows (the caller's plan, e.g. the batch
  // size): no agreement through MPI first.
  torch::Tensor allgather_rows(const torch::Tensor& local, int64_t rows_per_rank = -1) const;
  // Root's tensor overwrites every rank's (same dtype and shape everywhere).
  void broadcast(torch::Tensor& t, int root) const;
  // Blocks until the work on the current CUDA stream of device() is done, polling the stream and
  // NCCL's asynchronous error about every millisecond. On an NCCL error or after the timeout it
  // aborts the communicator and throws fnvlp::Error naming this rank, `what` and NCCL's message;
  // the object is unusable afterwards.
  void synchronize(const char* what) const;
  // What this communicator's collectives moved so far (Comm's, the agreements, not included).
  CommTraffic traffic() const;
  // CUDA graphs: a collective enqueued while its stream is being captured is not watched (a
  // captured event cannot be queried); after each replay of such a graph, call this on the
  // replay's stream: the work queued there so far is watched as one collective named `what`,
  // with the same timeout.
  void watch_stream(const char* what) const;
  // Whether the current stream of this rank's device is being captured.
  bool capturing() const;
  // Called with the message when the watch of collectives ends the job (an NCCL error, or a
  // collective not done within the timeout), from the watch thread, before MPI_Abort: the trainer
  // writes summary.json there.
  void set_last_words(std::function<void(const std::string&)> fn);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fnvlp
