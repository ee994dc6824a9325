#pragma once
// Comm: the only place MPI is called (ARCHITECTURE.md §12). It owns a duplicated communicator with
// MPI_ERRORS_RETURN, so MPI failures become fnvlp::Error exceptions instead of silent aborts.
// mpi.h stays inside comm/: callers name reductions by ReduceOp and element types by their C++
// type; comm/native.hpp hands the MPI communicator to the tests of Comm itself.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "fnvlp/core/error.hpp"

namespace fnvlp {

// Comm::allreduce's reductions (comm.cpp maps them to MPI_SUM, MPI_MAX, MPI_MIN in this order).
enum class ReduceOp { kSum, kMax, kMin };

namespace detail {
// The element types Comm moves; comm.cpp maps each to its MPI datatype (a table in this order).
enum class CommType { kDouble, kFloat, kInt32, kInt64, kUInt64, kUInt32, kInt16, kUInt8, kChar };
template <typename T>
constexpr CommType comm_type() {
  if constexpr (std::is_same_v<T, double>)
    return CommType::kDouble;
  else if constexpr (std::is_same_v<T, float>)
    return CommType::kFloat;
  else if constexpr (std::is_same_v<T, int32_t>)
    return CommType::kInt32;
  else if constexpr (std::is_same_v<T, int64_t>)
    return CommType::kInt64;
  else if constexpr (std::is_same_v<T, uint64_t>)
    return CommType::kUInt64;
  else if constexpr (std::is_same_v<T, uint32_t>)
    return CommType::kUInt32;
  else if constexpr (std::is_same_v<T, int16_t>)
    return CommType::kInt16;
  else if constexpr (std::is_same_v<T, uint8_t>)
    return CommType::kUInt8;
  else if constexpr (std::is_same_v<T, char>)
    return CommType::kChar;
  else
    static_assert(sizeof(T) == 0, "no MPI datatype for this type");
}
}  // namespace detail

// Payload bytes a communicator moved for its callers, by kind of collective: the buffer an
// all-reduce reduced, the result an all-gather assembled (every rank's part), what a broadcast,
// scan or all-to-all sent. Bytes on the wire follow from the algorithm: a ring all-reduce sends
// 2 (R - 1) / R of its buffer per rank, a ring all-gather (R - 1) / R of its result.
struct CommTraffic {
  uint64_t allreduce = 0, allgather = 0, other = 0;
  CommTraffic& operator+=(const CommTraffic& o) {
    allreduce += o.allreduce;
    allgather += o.allgather;
    other += o.other;
    return *this;
  }
  CommTraffic operator-(const CommTraffic& o) const {
    return {allreduce - o.allreduce, allgather - o.allgather, other - o.other};
  }
};

// A failure every rank knows about (raised by Comm::collective on all ranks at once), so the job
// can exit cleanly with one message instead of aborting.
class CollectiveError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Initialises MPI for the process lifetime (funneled threads: only the main thread calls MPI,
// except for CUDA graphs' host nodes in CUDA builds, which ask for MPI_THREAD_MULTIPLE;
// the data prefetch thread never does). Finalize runs in the destructor.
class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;
};

class Comm {
 public:
  // Duplicates MPI_COMM_WORLD so library traffic never matches user tags.
  Comm();
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool is_root() const { return rank_ == 0; }
  // The MPI communicator (comm/native.hpp defines it; only comm/ and its tests include that).
  struct Native;
  const Native& native() const { return *native_; }

  void barrier() const;
  // Whether MPI may be called from several threads at once (MPI_THREAD_MULTIPLE).
  bool threads_multiple() const;
  // What this communicator's collectives moved so far (main thread: MPI is funneled).
  const CommTraffic& traffic() const { return traffic_; }
  // Ends every rank of the job (MPI_Abort): the one way out that cannot hang a peer.
  [[noreturn]] void abort(int code) const;

  template <typename T>
  void allreduce(T* data, size_t n, ReduceOp op) const {
    allreduce_raw(data, n, detail::comm_type<T>(), op);
  }
  template <typename T>
  T allreduce_sum(T v) const {
    allreduce(&v, 1, ReduceOp::kSum);
    return v;
  }
  template <typename T>
  T allreduce_max(T v) const {
    allreduce(&v, 1, ReduceOp::kMax);
    return v;
  }
  template <typename T>
  T allreduce_min(T v) const {
    allreduce(&v, 1, ReduceOp::kMin);
    return v;
  }
  template <typename T>
  void allreduce_sum(std::vector<T>& v) const {
    allreduce(v.data(), v.size(), ReduceOp::kSum);
  }
  template <typename T>
  void allreduce_max(std::vector<T>& v) const {
    allreduce(v.data(), v.size(), ReduceOp::kMax);
  }
  template <typename T>
  void allreduce_min(std::vector<T>& v) const {
    allreduce(v.data(), v.size(), ReduceOp::kMin);
  }
  // Mean over ranks; the sum is taken in the element type, then divided.
  template <typename T>
  void allreduce_mean(std::vector<T>& v) const {
    allreduce_sum(v);
    for (auto& x : v) x /= static_cast<T>(size_);
  }
  // Exclusive prefix sum over ranks (rank 0 gets 0).
  int64_t exscan_sum(int64_t v) const;

  // Collective agreement on success: every rank passes its own status and all get the same
  // answer. Used before collectives that follow fallible local work, so one rank's failure turns
  // into a clean error on every rank rather than a peer blocked in the next collective.
  bool all_ok(bool local_ok) const;
  // Runs fallible local work `fn` on every rank, then agrees: if it threw anywhere, every rank
  // throws CollectiveError carrying the failing ranks' messages.
  void collective(const std::function<void()>& fn) const;

  template <typename T>
  std::vector<T> allgather(const T& v) const {
    std::vector<T> out(static_cast<size_t>(size_));
    allgather_raw(&v, out.data(), detail::comm_type<T>());
    return out;
  }
  // Concatenation of every rank's vector, in rank order.
  template <typename T>
  std::vector<T> allgatherv(const std::vector<T>& local) const {
    std::vector<int> counts = allgather_counts(local.size());
    std::vector<int> displs = displacements(counts);
    std::vector<T> out(static_cast<size_t>(displs.back() + counts.back()));
    allgatherv_raw(local.data(), static_cast<int>(local.size()), out.data(), counts.data(),
                   displs.data(), detail::comm_type<T>());
    return out;
  }
  // Every rank sends send[r] to rank r; returns what each rank sent here, in rank order.
  template <typename T>
  std::vector<T> alltoallv(const std::vector<T>& send, const std::vector<int>& send_counts,
                           std::vector<int>* recv_counts_out = nullptr) const {
    FNVLP_CHECK(static_cast<int>(send_counts.size()) == size_,
                "alltoallv needs one count per rank");
    std::vector<int> recv_counts = alltoall_counts(send_counts);
    std::vector<int> sdispl = displacements(send_counts), rdispl = displacements(recv_counts);
    std::vector<T> out(static_cast<size_t>(rdispl.back() + recv_counts.back()));
    alltoallv_raw(send.data(), send_counts.data(), sdispl.data(), out.data(), recv_counts.data(),
                  rdispl.data(), detail::comm_type<T>());
    if (recv_counts_out) *recv_counts_out = std::move(recv_counts);
    return out;
  }
  template <typename T>
  void bcast(T* data, size_t n, int root = 0) const {
    bcast_raw(data, n, detail::comm_type<T>(), root);
  }
  template <typename T>
  void bcast(std::vector<T>& v, int root = 0) const {
    int64_t n = static_cast<int64_t>(v.size());
    bcast(&n, 1, root);
    v.resize(static_cast<size_t>(n));
    if (n > 0) bcast(v.data(), v.size(), root);
  }
  void bcast(std::string& s, int root = 0) const;
  // Strings from every rank, in rank order (for reports, rejects and error messages).
  std::vector<std::string> allgather_strings(const std::string& s) const;

 private:
  // The MPI calls behind the templates above, one per collective, typed by detail::CommType.
  void allreduce_raw(void* data, size_t n, detail::CommType type, ReduceOp op) const;
  void allgather_raw(const void* value, void* out, detail::CommType type) const;
  void allgatherv_raw(const void* local, int n, void* out, const int* counts, const int* displs,
                      detail::CommType type) const;
  std::vector<int> alltoall_counts(const std::vector<int>& send_counts) const;
  void alltoallv_raw(const void* send, const int* send_counts, const int* send_displs, void* out,
                     const int* recv_counts, const int* recv_displs, detail::CommType type) const;
  void bcast_raw(void* data, size_t n, detail::CommType type, int root) const;
  std::vector<int> allgather_counts(size_t n) const;
  static std::vector<int> displacements(const std::vector<int>& counts);

  std::unique_ptr<Native> native_;
  int rank_ = 0;
  int size_ = 1;
  mutable CommTraffic traffic_;
};

}  // namespace fnvlp
