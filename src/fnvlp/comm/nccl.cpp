#include "fnvlp/comm/nccl.hpp"

#include <string>
#include <vector>

#if defined(FNVLP_WITH_NCCL)
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <numeric>
#include <sstream>
#include <thread>

#include "fnvlp/core/host.hpp"

// Non-blocking communicators (ncclConfig_t::blocking) and ncclGetLastError came in NCCL 2.14.
#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "fnvlp's NCCL backend needs NCCL 2.14 or newer"
#endif

namespace {

std::string nccl_text(ncclResult_t rc) {
  std::string text = ncclGetErrorString(rc);
  // The comm argument of ncclGetLastError is unused (NCCL docs): the thread's last message.
  const char* last = ncclGetLastError(nullptr);
  if (last && *last) text += " (last NCCL error: " + std::string(last) + ")";
  return text;
}

std::string cuda_text(cudaError_t rc) {
  return std::string(cudaGetErrorName(rc)) + ": " + cudaGetErrorString(rc);
}

}  // namespace

// FNVLP_CUDA_CHECK(cudaXxx(...)): a failed CUDA runtime call throws fnvlp::Error with file:line.
#define FNVLP_CUDA_CHECK(expr)                                                                  \
  do {                                                                                          \
    const cudaError_t fnvlp_cuda_rc_ = (expr);                                                  \
    if (fnvlp_cuda_rc_ != cudaSuccess)                                                          \
      ::fnvlp::detail::throw_error(__FILE__, __LINE__,                                          \
                                   std::string(#expr " failed: ") + cuda_text(fnvlp_cuda_rc_)); \
  } while (0)

// FNVLP_NCCL_CHECK(ncclXxx(...)): for the calls outside a communicator (ncclGetUniqueId,
// ncclGroupStart); calls on one go through FNVLP_NCCL_COMM_CHECK, which also aborts it.
#define FNVLP_NCCL_CHECK(expr)                                                                  \
  do {                                                                                          \
    const ncclResult_t fnvlp_nccl_rc_ = (expr);                                                 \
    if (fnvlp_nccl_rc_ != ncclSuccess)                                                          \
      ::fnvlp::detail::throw_error(__FILE__, __LINE__,                                          \
                                   std::string(#expr " failed: ") + nccl_text(fnvlp_nccl_rc_)); \
  } while (0)

// FNVLP_NCCL_COMM_CHECK(impl, what, ncclXxx(..., comm, ...)): waits out ncclInProgress (the
// communicator is non-blocking) within the timeout; an error aborts the communicator and throws.
#define FNVLP_NCCL_COMM_CHECK(impl, what, expr) \
  (impl).complete((expr), (what), #expr, __FILE__, __LINE__)

#endif  // FNVLP_WITH_NCCL

namespace fnvlp {

#if defined(FNVLP_WITH_NCCL)

bool nccl_built() { return true; }

namespace {

using Clock = std::chrono::steady_clock;

// Comm::collective, raising fnvlp::Error (with every failing rank's message) on every rank.
void on_every_rank(const Comm& comm, const char* what, const std::function<void()>& fn) {
  try {
    comm.collective(fn);
  } catch (const CollectiveError& e) {
    FNVLP_FAIL("NcclComm: " << what << " failed:\n" << e.what());
  }
}

ncclDataType_t nccl_type(torch::ScalarType type) {
  switch (type) {
    case torch::kFloat:
      return ncclFloat32;
    case torch::kBFloat16:
      return ncclBfloat16;
    case torch::kDouble:
      return ncclFloat64;
    case torch::kLong:
      return ncclInt64;
    case torch::kInt:
      return ncclInt32;
    default:
      FNVLP_FAIL("dtype " << type
                          << " has no NCCL type here (float, bfloat16, double, int64, int32)");
  }
}

}  // namespace

struct NcclComm::Impl {
  const Comm* mpi = nullptr;
  double timeout_s = 600;
  int device = -1;
  ncclComm_t comm = nullptr;
  // Set once an error or a timeout aborted the communicator: every later call refuses.
  std::atomic<bool> broken{false};
  CommTraffic traffic;
  std::function<void(const std::string&)> last_words;

  // The collectives in flight, watched by a thread instead of a host wait after each: the event
  // recorded after each one on its stream, what it was, when it was enqueued.
  struct InFlight {
    cudaEvent_t done = nullptr;
    std::string what;
    Clock::time_point since;
  };
  std::mutex watch_mutex;
  std::condition_variable watch_cv;
  std::deque<InFlight> in_flight;
  bool watch_stop = false;
  std::thread watcher;

  ~Impl() {
    stop_watch();
    if (!comm) return;
    // Unwinding: a peer may be gone, and finalize waits for all of them; abort is local.
    if (broken || std::uncaught_exceptions() > 0 || !finalize()) {
      ncclCommAbort(comm);
    } else {
      ncclCommDestroy(comm);  // only frees local resources after a completed finalize
    }
  }

  // ncclCommFinalize flushes the pending work and completes when every rank has finalized: wait
  // for that within the timeout (false: give up, the caller aborts).
  bool finalize() noexcept {
    ncclResult_t rc = ncclCommFinalize(comm);
    const auto deadline = Clock::now() + timeout();
    while (rc == ncclInProgress && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (ncclCommGetAsyncError(comm, &rc) != ncclSuccess) return false;
    }
    return rc == ncclSuccess;
  }

  Clock::duration timeout() const {
    return std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(std::min(timeout_s, 1e7)));  // no overflow
  }

  std::string seconds() const {
    std::ostringstream os;
    os << timeout_s << " s";
    return os.str();
  }

  std::string who() const {
    return "NCCL rank " + std::to_string(mpi->rank()) + "/" + std::to_string(mpi->size()) +
           " (cuda:" + std::to_string(device) + ")";
  }

  void abort() noexcept {
    if (comm) ncclCommAbort(comm);
    comm = nullptr;
    broken = true;
  }

  bool capturing() const {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    return cudaStreamIsCapturing(stream(), &status) == cudaSuccess &&
           status != cudaStreamCaptureStatusNone;
  }

  // After a collective was enqueued on stream(): its completion is watched from now on (inside a
  // capture, with the graph's replays: NcclComm::watch_stream).
  void watch(const char* what) {
    if (capturing()) return;
    cudaEvent_t done = nullptr;
    FNVLP_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    FNVLP_CUDA_CHECK(cudaEventRecord(done, stream()));
    {
      const std::lock_guard<std::mutex> lock(watch_mutex);
      in_flight.push_back({done, what, Clock::now()});
      if (!watcher.joinable()) watcher = std::thread([this] { watch_loop(); });
    }
    watch_cv.notify_one();
  }

  // The watch thread: the oldest collective in flight is done (its event), or NCCL reports an
  // asynchronous error, or its time runs out. The last two end the job from here: the
  // communicator aborted (its kernels return, the peers' NCCL calls fail fast), one line naming
  // the collective and this rank, the run's last words (summary.json), then MPI_Abort: every rank
  // exits within the timeout even while the main thread waits inside CUDA or NCCL.
  void watch_loop() {
    cudaSetDevice(device);
    std::unique_lock<std::mutex> lock(watch_mutex);
    while (!watch_stop && !broken) {
      if (in_flight.empty()) {
        watch_cv.wait_for(lock, std::chrono::milliseconds(100));
        continue;
      }
      const InFlight f = in_flight.front();
      lock.unlock();
      const cudaError_t q = cudaEventQuery(f.done);
      if (q == cudaErrorNotReady) (void)cudaGetLastError();  // not an error: clear it
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) state = ncclInternalError;
      if (q != cudaSuccess && q != cudaErrorNotReady) die(f.what, "CUDA: " + cuda_text(q));
      if (state != ncclSuccess && state != ncclInProgress)
        die(f.what, "NCCL asynchronous error: " + nccl_text(state));
      if (q == cudaErrorNotReady && Clock::now() - f.since > timeout())
        die(f.what, "not done after " + seconds() +
                        " (comm.timeout_s: a peer failed or stopped calling collectives)");
      lock.lock();
      if (q == cudaSuccess) {
        cudaEventDestroy(f.done);
        in_flight.pop_front();
      } else {
        watch_cv.wait_for(lock, std::chrono::milliseconds(1));
      }
    }
  }

  [[noreturn]] void die(const std::string& what, const std::string& why) {
    const std::string message = who() + " " + what + ": " + why + "; communicator aborted";
    spdlog::critical("{}; ending the job", message);
    spdlog::default_logger()->flush();
    if (comm) ncclCommAbort(comm);
    if (last_words) {
      try {
        last_words(message);
      } catch (...) {  // the abort below matters more than the summary
      }
    }
    mpi->abort(1);
  }

  void stop_watch() {
    {
      const std::lock_guard<std::mutex> lock(watch_mutex);
      watch_stop = true;
    }
    watch_cv.notify_one();
    if (watcher.joinable()) watcher.join();
    for (auto& f : in_flight) cudaEventDestroy(f.done);
    in_flight.clear();
  }

  // Aborts the communicator (its peers then fail fast instead of waiting) and throws.
  [[noreturn]] void fail(const char* file, int line, const char* what, const std::string& why) {
    abort();
    detail::throw_error(file, line, who() + " " + what + ": " + why);
  }

  // Polls until the last call on the communicator has left ncclInProgress (non-blocking mode
  // returns at once from init, group ends and collectives whose setup talks to peers).
  void complete(ncclResult_t rc, const char* what, const char* expr, const char* file, int line) {
    const auto deadline = Clock::now() + timeout();
    while (rc == ncclInProgress) {
      if (Clock::now() > deadline)
        fail(file, line, what,
             std::string(expr) + " still in progress after " + seconds() +
                 " (a peer failed or never joined): communicator aborted");
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      const ncclResult_t query = ncclCommGetAsyncError(comm, &rc);
      if (query != ncclSuccess) rc = query;
    }
    if (rc != ncclSuccess) fail(file, line, what, std::string(expr) + " failed: " + nccl_text(rc));
  }

  // The current stream of this rank's device: where torch queued the work on the tensors.
  cudaStream_t stream() const { return c10::cuda::getCurrentCUDAStream(device).stream(); }

  // Checks the call's tensor on this rank and agrees through one MPI exchange (so a refusal on
  // any rank throws on every rank, before NCCL could leave a peer waiting). Returns every rank's
  // row count (dim 0). `rows_may_differ`: only dim 0 may differ between ranks (allgather_rows);
  // `extra`: more that ranks must agree on; `bad_argument`: this rank's refusal of another
  // argument.
  std::vector<int64_t> agree(const char* what, const torch::Tensor& t, bool rows_may_differ,
                             const std::string& extra = "",
                             const std::string& bad_argument = "") const {
    std::string local;
    try {
      FNVLP_CHECK(!broken, "the communicator was aborted after an earlier error");
      if (!bad_argument.empty()) FNVLP_FAIL(bad_argument);
      FNVLP_CHECK(t.defined(), "undefined tensor");
      FNVLP_CHECK(t.is_cuda(), "needs a CUDA tensor, got one on " << t.device());
      FNVLP_CHECK(t.device().index() == device,
                  "tensor on " << t.device() << ", this rank's communicator on cuda:" << device);
      FNVLP_CHECK(t.is_contiguous(), "needs a contiguous tensor (call .contiguous())");
      FNVLP_CHECK(!rows_may_differ || t.dim() >= 1, "needs a tensor [rows, ...], got a scalar");
      nccl_type(t.scalar_type());
      // "<rows>|<dtype>[<shape>]<extra>": all ranks must agree on what follows the '|'.
      local = std::to_string(t.dim() ? t.size(0) : 0) + "|" + c10::toString(t.scalar_type()) + "[";
      for (int64_t d = 0; d < t.dim(); ++d)
        local += (d ? ", " : "") + (d == 0 && rows_may_differ ? "b" : std::to_string(t.size(d)));
      local += "]" + extra;
    } catch (const std::exception& e) {
      local = std::string("!") + e.what();
    }
    const std::vector<std::string> all = mpi->allgather_strings(local);
    std::string refused;
    for (size_t r = 0; r < all.size(); ++r)
      if (!all[r].empty() && all[r][0] == '!')
        refused += "\n  rank " + std::to_string(r) + ": " + all[r].substr(1);
    FNVLP_CHECK(refused.empty(), "NcclComm::" << what << " refused:" << refused);
    std::vector<int64_t> rows;
    const std::string& first = all[0];
    for (size_t r = 0; r < all.size(); ++r) {
      const size_t bar = all[r].find('|');
      FNVLP_CHECK(all[r].compare(bar, std::string::npos, first, first.find('|')) == 0,
                  "NcclComm::" << what << ": ranks disagree on the tensor: rank 0 passes "
                               << first.substr(first.find('|') + 1) << ", rank " << r << " passes "
                               << all[r].substr(bar + 1));
      rows.push_back(std::stoll(all[r].substr(0, bar)));
    }
    return rows;
  }
};

NcclComm::NcclComm(const Comm& comm, double timeout_s) : impl_(std::make_unique<Impl>()) {
  Impl& im = *impl_;
  im.mpi = &comm;
  im.timeout_s = timeout_s;
  std::string place;  // host and PCI bus of this rank's device, to find ranks sharing one
  on_every_rank(comm, "device check", [&] {
    FNVLP_CHECK(timeout_s > 0, "timeout_s must be positive, got " << timeout_s);
    int count = 0;
    const cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc != cudaSuccess || count == 0) {
      (void)cudaGetLastError();  // not sticky; leave no stale error for torch's next check
      FNVLP_FAIL("no CUDA device" << (rc != cudaSuccess ? " (" + cuda_text(rc) + ")" : ""));
    }
    FNVLP_CUDA_CHECK(cudaGetDevice(&im.device));
    char bus[64] = {};
    FNVLP_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus) - 1, im.device));
    place = fnvlp::host_name() + " GPU " + bus;
  });
  // NCCL refuses two ranks on one GPU, late and not on every rank: say so here, everywhere.
  const std::vector<std::string> places = comm.allgather_strings(place);
  for (size_t a = 0; a < places.size(); ++a)
    for (size_t b = a + 1; b < places.size(); ++b)
      FNVLP_CHECK(places[a] != places[b],
                  "NCCL needs one GPU per rank: ranks "
                      << a << " and " << b << " both use " << places[a]
                      << " (set the CUDA device from the node-local rank before NcclComm)");

  ncclUniqueId id{};
  on_every_rank(comm, "ncclGetUniqueId", [&] {
    if (comm.is_root()) FNVLP_NCCL_CHECK(ncclGetUniqueId(&id));
  });
  comm.bcast(id.internal, sizeof(id.internal), 0);

  on_every_rank(comm, "ncclCommInitRankConfig", [&] {
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(im.device));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    // Non-blocking: every call returns at once, so no wait on a peer is out of the timeout's reach.
    config.blocking = 0;
    FNVLP_NCCL_COMM_CHECK(im, "init",
                          ncclCommInitRankConfig(&im.comm, comm.size(), id, comm.rank(), &config));
  });
}

NcclComm::~NcclComm() = default;

int NcclComm::rank() const { return impl_->mpi->rank(); }
int NcclComm::size() const { return impl_->mpi->size(); }
int NcclComm::device() const { return impl_->device; }

void NcclComm::allreduce_sum(torch::Tensor& t) const {
  Impl& im = *impl_;
  im.agree("allreduce_sum", t, false);
  if (t.numel() == 0) return;  // the same on every rank: agreed above
  const c10::cuda::CUDAGuard guard(t.device());
  FNVLP_NCCL_COMM_CHECK(im, "allreduce_sum",
                        ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()),
                                      nccl_type(t.scalar_type()), ncclSum, im.comm, im.stream()));
  im.traffic.allreduce += static_cast<uint64_t>(t.nbytes());
  im.watch("allreduce_sum");
}

void NcclComm::allreduce_sum_async(torch::Tensor& t) const {
  Impl& im = *impl_;
  FNVLP_CHECK(!im.broken, im.who() << " allreduce_sum_async: the communicator was aborted earlier");
  FNVLP_CHECK(t.is_cuda() && t.is_contiguous() && t.device().index() == im.device,
              im.who() << " allreduce_sum_async: needs a contiguous tensor on cuda:" << im.device
                       << ", got " << t.device());
  if (t.numel() == 0) return;
  const c10::cuda::CUDAGuard guard(t.device());
  FNVLP_NCCL_COMM_CHECK(im, "allreduce_sum_async",
                        ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()),
                                      nccl_type(t.scalar_type()), ncclSum, im.comm, im.stream()));
  im.traffic.allreduce += static_cast<uint64_t>(t.nbytes());
  im.watch("allreduce_sum_async (a gradient bucket)");
}

// Ragged rows: one ncclBroadcast per non-empty rank into its slice of the output, fused in one
// group, rather than padding to the longest block + ncclAllGather + compaction: no padding memory
// or extra copy, the same bytes on the wire; equal blocks still take the single ncclAllGather.
torch::Tensor NcclComm::allgather_rows(const torch::Tensor& local, int64_t rows_per_rank) const {
  Impl& im = *impl_;
  std::vector<int64_t> rows;
  if (rows_per_rank >= 0) {
    FNVLP_CHECK(!im.broken && local.is_cuda() && local.is_contiguous() && local.dim() >= 1 &&
                    local.size(0) == rows_per_rank && local.device().index() == im.device,
                im.who() << " allgather_rows: expected a contiguous [" << rows_per_rank
                         << ", ...] tensor on cuda:" << im.device << ", got " << local.sizes()
                         << " on " << local.device());
    rows.assign(static_cast<size_t>(size()), rows_per_rank);
  } else {
    rows = im.agree("allgather_rows", local, true);
  }
  std::vector<int64_t> shape = local.sizes().vec();
  shape[0] = std::accumulate(rows.begin(), rows.end(), int64_t{0});
  const c10::cuda::CUDAGuard guard(local.device());
  torch::Tensor out = torch::empty(shape, local.options());
  if (out.numel() == 0) return out;
  const int64_t row_elems = out.numel() / shape[0];
  const ncclDataType_t type = nccl_type(local.scalar_type());
  const cudaStream_t stream = im.stream();
  if (std::all_of(rows.begin(), rows.end(), [&](int64_t b) { return b == rows[0]; })) {
    FNVLP_NCCL_COMM_CHECK(im, "allgather_rows",
                          ncclAllGather(local.data_ptr(), out.data_ptr(),
                                        static_cast<size_t>(local.numel()), type, im.comm, stream));
  } else {
    auto* base = static_cast<char*>(out.data_ptr());
    const int64_t row_bytes = row_elems * static_cast<int64_t>(out.element_size());
    ncclResult_t rc = ncclSuccess;
    FNVLP_NCCL_CHECK(ncclGroupStart());
    int64_t offset = 0;
    for (int r = 0; r < size() && rc == ncclSuccess; ++r) {
      const int64_t n = rows[static_cast<size_t>(r)];
      void* slice = base + offset * row_bytes;
      offset += n;
      if (n == 0) continue;  // skipped on every rank alike: all know the counts
      const void* send = r == rank() ? local.data_ptr() : slice;  // read on the root only
      rc = ncclBroadcast(send, slice, static_cast<size_t>(n * row_elems), type, r, im.comm, stream);
    }
    const ncclResult_t end = ncclGroupEnd();  // always close the group, even after an error
    FNVLP_NCCL_COMM_CHECK(im, "allgather_rows", rc != ncclSuccess ? rc : end);
  }
  im.traffic.allgather += static_cast<uint64_t>(out.nbytes());
  im.watch("allgather_rows");
  return out;
}

void NcclComm::broadcast(torch::Tensor& t, int root) const {
  Impl& im = *impl_;
  const bool root_ok = root >= 0 && root < size();
  im.agree("broadcast", t, false, " from rank " + std::to_string(root),
           root_ok
               ? ""
               : "root " + std::to_string(root) + " is not a rank of " + std::to_string(size()));
  if (t.numel() == 0) return;
  const c10::cuda::CUDAGuard guard(t.device());
  FNVLP_NCCL_COMM_CHECK(im, "broadcast",
                        ncclBroadcast(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()),
                                      nccl_type(t.scalar_type()), root, im.comm, im.stream()));
  im.traffic.other += static_cast<uint64_t>(t.nbytes());
  im.watch("broadcast");
}

CommTraffic NcclComm::traffic() const { return impl_->traffic; }

void NcclComm::watch_stream(const char* what) const {
  Impl& im = *impl_;
  FNVLP_CHECK(!im.broken, im.who() << " " << what << ": the communicator was aborted earlier");
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(im.device));
  im.watch(what);
}

bool NcclComm::capturing() const {
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(impl_->device));
  return impl_->capturing();
}

void NcclComm::set_last_words(std::function<void(const std::string&)> fn) {
  const std::lock_guard<std::mutex> lock(impl_->watch_mutex);
  impl_->last_words = std::move(fn);
}

void NcclComm::synchronize(const char* what) const {
  Impl& im = *impl_;
  FNVLP_CHECK(!im.broken, im.who() << " " << what << ": the communicator was aborted earlier");
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(im.device));
  const cudaStream_t stream = im.stream();
  const auto start = Clock::now();
  const auto deadline = start + im.timeout();
  for (;;) {
    const cudaError_t q = cudaStreamQuery(stream);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) im.fail(__FILE__, __LINE__, what, "CUDA stream: " + cuda_text(q));
    (void)cudaGetLastError();  // "not ready" is no error: clear it (as c10's stream.query does)
    ncclResult_t state = ncclSuccess;
    const ncclResult_t query = ncclCommGetAsyncError(im.comm, &state);
    if (query != ncclSuccess) state = query;
    if (state != ncclSuccess && state != ncclInProgress)
      im.fail(__FILE__, __LINE__, what, "NCCL asynchronous error: " + nccl_text(state));
    const auto now = Clock::now();
    if (now > deadline)
      im.fail(__FILE__, __LINE__, what,
              "not done after " + im.seconds() +
                  " (a peer failed or stopped calling collectives): communicator aborted");
    // Small collectives end within microseconds: yield for the first millisecond, then sleep.
    if (now - start < std::chrono::milliseconds(1))
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

#else  // no NCCL in this build: the type exists, its constructor refuses.

bool nccl_built() { return false; }

struct NcclComm::Impl {};

NcclComm::NcclComm(const Comm& comm, double timeout_s) {
  FNVLP_FAIL(
      "this build has no NCCL: configure with FNVLP_WITH_NCCL=ON (FNVLP_GPU=1 env/build.sh)");
}
NcclComm::~NcclComm() = default;
int NcclComm::rank() const { FNVLP_FAIL("this build has no NCCL"); }
int NcclComm::size() const { FNVLP_FAIL("this build has no NCCL"); }
int NcclComm::device() const { FNVLP_FAIL("this build has no NCCL"); }
void NcclComm::allreduce_sum(torch::Tensor&) const { FNVLP_FAIL("this build has no NCCL"); }
void NcclComm::allreduce_sum_async(torch::Tensor&) const { FNVLP_FAIL("this build has no NCCL"); }
torch::Tensor NcclComm::allgather_rows(const torch::Tensor&, int64_t) const {
  FNVLP_FAIL("this build has no NCCL");
}
void NcclComm::set_last_words(std::function<void(const std::string&)>) {
  FNVLP_FAIL("this build has no NCCL");
}
void NcclComm::broadcast(torch::Tensor&, int) const { FNVLP_FAIL("this build has no NCCL"); }
void NcclComm::synchronize(const char*) const { FNVLP_FAIL("this build has no NCCL"); }
CommTraffic NcclComm::traffic() const { FNVLP_FAIL("this build has no NCCL"); }
void NcclComm::watch_stream(const char*) const { FNVLP_FAIL("this build has no NCCL"); }
bool NcclComm::capturing() const { FNVLP_FAIL("this build has no NCCL"); }

#endif

}  // namespace fnvlp
