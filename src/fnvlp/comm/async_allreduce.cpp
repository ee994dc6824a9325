#include "fnvlp/comm/async_allreduce.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <thread>
#include <vector>

#include "fnvlp/comm/native.hpp"
#include "fnvlp/core/error.hpp"

namespace fnvlp {

namespace {
void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  FNVLP_FAIL(call << " failed: " << std::string(text, static_cast<size_t>(len)));
}
}  // namespace

struct AsyncAllreduce::Requests {
  std::vector<MPI_Request> pending;
};

AsyncAllreduce::AsyncAllreduce(const Comm& comm)
    : comm_(comm), requests_(std::make_unique<Requests>()) {}

// Sums still in flight here were left by an exception (wait() timed out, or the step failed
// between start and wait): waiting could hang on the peer that never joined, and MPI forbids
// freeing a collective's request. They are left to the MPI_Abort that ends such a job (job_main):
// no MPI call runs in between that would progress them into freed memory.
AsyncAllreduce::~AsyncAllreduce() = default;

void AsyncAllreduce::start(float* data, size_t n) {
  constexpr size_t kChunk = static_cast<size_t>(std::numeric_limits<int>::max());
  for (size_t off = 0; off < n; off += kChunk) {
    MPI_Request r = MPI_REQUEST_NULL;
    check(MPI_Iallreduce(MPI_IN_PLACE, data + off, static_cast<int>(std::min(kChunk, n - off)),
                         MPI_FLOAT, MPI_SUM, comm_.native().comm, &r),
          "MPI_Iallreduce");
    requests_->pending.push_back(r);
  }
  bytes_ += n * sizeof(float);
}

bool AsyncAllreduce::test() {
  auto& p = requests_->pending;
  if (p.empty()) return true;
  int done = 0;
  check(MPI_Testall(static_cast<int>(p.size()), p.data(), &done, MPI_STATUSES_IGNORE),
        "MPI_Testall");
  if (done) p.clear();
  return done != 0;
}

void AsyncAllreduce::wait(double timeout_s, const std::string& what) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration<double>(timeout_s);
  while (!test()) {
    const auto now = std::chrono::steady_clock::now();
    if (now > deadline)
      FNVLP_FAIL("rank " << comm_.rank() << ": " << what << ": " << pending()
                         << " sums not complete after " << timeout_s
                         << " s (comm.timeout_s): a rank never joined them; ending the job");
    // Short sums finish within microseconds: yield first, then sleep.
    if (now - start < std::chrono::milliseconds(1))
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

size_t AsyncAllreduce::pending() const { return requests_->pending.size(); }

}  // namespace fnvlp
