#pragma once
// Comm: the only place MPI is called (DESIGN.md §4). It owns a duplicated communicator with
// MPI_ERRORS_RETURN, so MPI failures become fnvlp::Error exceptions instead of silent aborts.
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "fnvlp/core/error.hpp"

namespace fnvlp {

namespace detail {
template <typename T>
MPI_Datatype mpi_type() {
  if constexpr (std::is_same_v<T, double>)
    return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, float>)
    return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, int32_t>)
    return MPI_INT32_T;
  else if constexpr (std::is_same_v<T, int64_t>)
    return MPI_INT64_T;
  else if constexpr (std::is_same_v<T, uint64_t>)
    return MPI_UINT64_T;
  else if constexpr (std::is_same_v<T, uint32_t>)
    return MPI_UINT32_T;
  else if constexpr (std::is_same_v<T, int16_t>)
    return MPI_INT16_T;
  else if constexpr (std::is_same_v<T, uint8_t>)
    return MPI_UINT8_T;
  else if constexpr (std::is_same_v<T, char>)
    return MPI_CHAR;
  else
    static_assert(sizeof(T) == 0, "no MPI datatype for this type");
}
}  // namespace detail

// A failure every rank knows about (raised by Comm::collective on all ranks at once), so the job
// can exit cleanly with one message instead of aborting.
class CollectiveError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Initialises MPI for the process lifetime (funneled threads: only the main thread calls MPI;
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
  // Duplicates `parent` (MPI_COMM_WORLD by default) so library traffic never matches user tags.
  explicit Comm(MPI_Comm parent = MPI_COMM_WORLD);
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool is_root() const { return rank_ == 0; }
  MPI_Comm raw() const { return comm_; }

  void barrier() const;
  // Ends every rank of the job (MPI_Abort): the one way out that cannot hang a peer.
  [[noreturn]] void abort(int code) const;

  template <typename T>
  void allreduce(T* data, size_t n, MPI_Op op) const {
    MPI_CHECK(
        MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), detail::mpi_type<T>(), op, comm_));
  }
  template <typename T>
  T allreduce_sum(T v) const {
    allreduce(&v, 1, MPI_SUM);
    return v;
  }
  template <typename T>
  T allreduce_max(T v) const {
    allreduce(&v, 1, MPI_MAX);
    return v;
  }
  template <typename T>
  T allreduce_min(T v) const {
    allreduce(&v, 1, MPI_MIN);
    return v;
  }
  template <typename T>
  void allreduce_sum(std::vector<T>& v) const {
    allreduce(v.data(), v.size(), MPI_SUM);
  }
  template <typename T>
  void allreduce_max(std::vector<T>& v) const {
    allreduce(v.data(), v.size(), MPI_MAX);
  }
  template <typename T>
  void allreduce_min(std::vector<T>& v) const {
    allreduce(v.data(), v.size(), MPI_MIN);
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
    MPI_CHECK(
        MPI_Allgather(&v, 1, detail::mpi_type<T>(), out.data(), 1, detail::mpi_type<T>(), comm_));
    return out;
  }
  // Concatenation of every rank's vector, in rank order.
  template <typename T>
  std::vector<T> allgatherv(const std::vector<T>& local) const {
    std::vector<int> counts = allgather_counts(local.size());
    std::vector<int> displs = displacements(counts);
    std::vector<T> out(static_cast<size_t>(displs.back() + counts.back()));
    MPI_CHECK(MPI_Allgatherv(local.data(), static_cast<int>(local.size()), detail::mpi_type<T>(),
                             out.data(), counts.data(), displs.data(), detail::mpi_type<T>(),
                             comm_));
    return out;
  }
  // Every rank sends send[r] to rank r; returns what each rank sent here, in rank order.
  template <typename T>
  std::vector<T> alltoallv(const std::vector<T>& send, const std::vector<int>& send_counts,
                           std::vector<int>* recv_counts_out = nullptr) const {
    FNVLP_CHECK(static_cast<int>(send_counts.size()) == size_,
                "alltoallv needs one count per rank");
    std::vector<int> recv_counts(static_cast<size_t>(size_));
    MPI_CHECK(MPI_Alltoall(send_counts.data(), 1, MPI_INT, recv_counts.data(), 1, MPI_INT, comm_));
    std::vector<int> sdispl = displacements(send_counts), rdispl = displacements(recv_counts);
    std::vector<T> out(static_cast<size_t>(rdispl.back() + recv_counts.back()));
    MPI_CHECK(MPI_Alltoallv(send.data(), send_counts.data(), sdispl.data(), detail::mpi_type<T>(),
                            out.data(), recv_counts.data(), rdispl.data(), detail::mpi_type<T>(),
                            comm_));
    if (recv_counts_out) *recv_counts_out = std::move(recv_counts);
    return out;
  }
  template <typename T>
  void bcast(T* data, size_t n, int root = 0) const {
    MPI_CHECK(MPI_Bcast(data, static_cast<int>(n), detail::mpi_type<T>(), root, comm_));
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
  std::vector<int> allgather_counts(size_t n) const;
  static std::vector<int> displacements(const std::vector<int>& counts);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace fnvlp
