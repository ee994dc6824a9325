#pragma once
// In-place float sums started now and completed later (MPI_Iallreduce): the gradient buckets of a
// backward pass reduced while the backward goes on (train/grad_buckets.hpp). test() progresses
// them (Open MPI moves a non-blocking collective only inside MPI calls); wait() completes them
// within a time limit. Main thread only (MPI is funneled), like Comm; the sums start in the same
// order on every rank.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "fnvlp/comm/comm.hpp"

namespace fnvlp {

class AsyncAllreduce {
 public:
  explicit AsyncAllreduce(const Comm& comm);
  ~AsyncAllreduce();
  AsyncAllreduce(const AsyncAllreduce&) = delete;
  AsyncAllreduce& operator=(const AsyncAllreduce&) = delete;
  // Starts the sum of data[0, n) over the ranks, in place (chunks of < 2^31 elements).
  void start(float* data, size_t n);
  // Progresses the sums in flight; true when none is left.
  bool test();
  // Completes every sum in flight. Past timeout_s throws fnvlp::Error naming `what` and the
  // seconds: the caller's rank then ends the job (a peer that never joined cannot be waited out).
  void wait(double timeout_s, const std::string& what);
  size_t pending() const;
  // Payload bytes of the sums started so far (CommTraffic's all-reduce count).
  uint64_t bytes() const { return bytes_; }

 private:
  struct Requests;
  const Comm& comm_;
  std::unique_ptr<Requests> requests_;
  uint64_t bytes_ = 0;
};

}  // namespace fnvlp
