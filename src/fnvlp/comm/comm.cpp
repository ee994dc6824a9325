#include "fnvlp/comm/comm.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "fnvlp/comm/max_count.hpp"
#include "fnvlp/comm/native.hpp"

// MPI_CHECK(MPI_Xxx(...)): Comm sets MPI_ERRORS_RETURN, so a failed call becomes an exception.
#define MPI_CHECK(call)                                                                           \
  do {                                                                                            \
    int fnvlp_rc_ = (call);                                                                       \
    if (fnvlp_rc_ != MPI_SUCCESS) {                                                               \
      ::fnvlp::detail::throw_error(__FILE__, __LINE__,                                            \
                                   std::string(#call " failed: ") + mpi_error_string(fnvlp_rc_)); \
    }                                                                                             \
  } while (0)

namespace fnvlp {

namespace {

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(len));
}

// Indexed by the enums' values, in their declaration order (comm.hpp).
MPI_Datatype mpi_type(detail::CommType type) {
  const MPI_Datatype types[] = {MPI_DOUBLE,   MPI_FLOAT,   MPI_INT32_T, MPI_INT64_T, MPI_UINT64_T,
                                MPI_UINT32_T, MPI_INT16_T, MPI_UINT8_T, MPI_CHAR};
  return types[static_cast<int>(type)];
}

uint64_t type_bytes(detail::CommType type) {
  const uint64_t bytes[] = {8, 4, 4, 8, 8, 4, 2, 1, 1};
  return bytes[static_cast<int>(type)];
}

size_t max_count = static_cast<size_t>(std::numeric_limits<int>::max());

uint64_t sum(const int* counts, int n) {
  uint64_t total = 0;
  for (int i = 0; i < n; ++i) total += static_cast<uint64_t>(counts[i]);
  return total;
}

MPI_Op mpi_op(ReduceOp op) {
  const MPI_Op ops[] = {MPI_SUM, MPI_MAX, MPI_MIN};
  return ops[static_cast<int>(op)];
}

}  // namespace

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  int provided = 0;
#if FNVLP_WITH_CUDA
  // CUDA graphs over MPI call it from CUDA's host-node thread too (comm/tensors.hpp); without
  // MPI_THREAD_MULTIPLE the trainer refuses that setup, the rest runs funneled.
  const int wanted = MPI_THREAD_MULTIPLE;
#else
  const int wanted = MPI_THREAD_FUNNELED;
#endif
  MPI_CHECK(MPI_Init_thread(argc, argv, wanted, &provided));
  FNVLP_CHECK(provided >= MPI_THREAD_FUNNELED, "MPI provides no MPI_THREAD_FUNNELED support");
}

MpiRuntime::~MpiRuntime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

Comm::Comm() : native_(std::make_unique<Native>()) {
  MPI_Comm& comm = native_->comm;
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
  MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(comm, &rank_));
  MPI_CHECK(MPI_Comm_size(comm, &size_));
}

Comm::~Comm() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (native_->comm != MPI_COMM_NULL && !finalized) MPI_Comm_free(&native_->comm);
}

void Comm::barrier() const { MPI_CHECK(MPI_Barrier(native_->comm)); }

bool Comm::threads_multiple() const {
  int provided = 0;
  MPI_CHECK(MPI_Query_thread(&provided));
  return provided >= MPI_THREAD_MULTIPLE;
}

void Comm::abort(int code) const {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(native_->comm, code == 0 ? 1 : code);
  std::_Exit(code == 0 ? 1 : code);  // MPI_Abort should not return; never continue if it does
}

int64_t Comm::exscan_sum(int64_t v) const {
  int64_t out = 0;
  MPI_CHECK(MPI_Exscan(&v, &out, 1, MPI_INT64_T, MPI_SUM, native_->comm));
  traffic_.other += sizeof v;
  return rank_ == 0 ? 0 : out;  // MPI leaves rank 0's result undefined
}

bool Comm::all_ok(bool local_ok) const {
  int ok = local_ok ? 1 : 0;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, native_->comm));
  traffic_.allreduce += sizeof ok;
  return ok == 1;
}

void Comm::collective(const std::function<void()>& fn) const {
  std::string error;
  try {
    fn();
  } catch (const std::exception& e) {
    error = e.what();
    if (error.empty()) error = "unknown error";
  }
  const std::vector<std::string> errors = allgather_strings(error);
  std::string combined;
  int failed = 0;
  for (int r = 0; r < size_; ++r) {
    if (errors[static_cast<size_t>(r)].empty()) continue;
    if (++failed <= 4)
      combined += (combined.empty() ? "" : "\n") +
                  ("rank " + std::to_string(r) + ": " + errors[static_cast<size_t>(r)]);
  }
  if (failed > 4) combined += "\n(and " + std::to_string(failed - 4) + " more ranks)";
  if (failed > 0) throw CollectiveError(combined);
}

void Comm::allreduce_raw(void* data, size_t n, detail::CommType type, ReduceOp op) const {
  // MPI counts are int: a buffer of more elements goes in chunks (a CUDA buffer staged on the host
  // for the MPI fallback can hold more than 2^31 floats).
  auto* bytes = static_cast<char*>(data);
  size_t off = 0;
  do {
    const size_t count = std::min(max_count_per_call(), n - off);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, bytes + off * type_bytes(type), static_cast<int>(count),
                            mpi_type(type), mpi_op(op), native_->comm));
    off += count;
  } while (off < n);
  traffic_.allreduce += n * type_bytes(type);
}

void Comm::allgather_raw(const void* value, void* out, detail::CommType type) const {
  MPI_CHECK(MPI_Allgather(value, 1, mpi_type(type), out, 1, mpi_type(type), native_->comm));
  traffic_.allgather += static_cast<uint64_t>(size_) * type_bytes(type);
}

void Comm::allgatherv_raw(const void* local, int n, void* out, const int* counts, const int* displs,
                          detail::CommType type) const {
  MPI_CHECK(
      MPI_Allgatherv(local, n, mpi_type(type), out, counts, displs, mpi_type(type), native_->comm));
  traffic_.allgather += sum(counts, size_) * type_bytes(type);
}

std::vector<int> Comm::alltoall_counts(const std::vector<int>& send_counts) const {
  std::vector<int> recv_counts(static_cast<size_t>(size_));
  MPI_CHECK(
      MPI_Alltoall(send_counts.data(), 1, MPI_INT, recv_counts.data(), 1, MPI_INT, native_->comm));
  traffic_.other += static_cast<uint64_t>(size_) * sizeof(int);
  return recv_counts;
}

void Comm::alltoallv_raw(const void* send, const int* send_counts, const int* send_displs,
                         void* out, const int* recv_counts, const int* recv_displs,
                         detail::CommType type) const {
  MPI_CHECK(MPI_Alltoallv(send, send_counts, send_displs, mpi_type(type), out, recv_counts,
                          recv_displs, mpi_type(type), native_->comm));
  traffic_.other += sum(send_counts, size_) * type_bytes(type);
}

void Comm::bcast_raw(void* data, size_t n, detail::CommType type, int root) const {
  MPI_CHECK(MPI_Bcast(data, static_cast<int>(n), mpi_type(type), root, native_->comm));
  traffic_.other += n * type_bytes(type);
}

void Comm::bcast(std::string& s, int root) const {
  std::vector<char> buf(s.begin(), s.end());
  bcast(buf, root);
  s.assign(buf.begin(), buf.end());
}

std::vector<std::string> Comm::allgather_strings(const std::string& s) const {
  std::vector<char> local(s.begin(), s.end());
  std::vector<int> counts = allgather_counts(local.size());
  std::vector<char> all = allgatherv(local);
  std::vector<std::string> out;
  size_t offset = 0;
  for (int c : counts) {
    out.emplace_back(all.data() + offset, static_cast<size_t>(c));
    offset += static_cast<size_t>(c);
  }
  return out;
}

std::vector<int> Comm::allgather_counts(size_t n) const {
  FNVLP_CHECK(n <= static_cast<size_t>(std::numeric_limits<int>::max()),
              "message of " << n << " elements exceeds MPI's int count");
  return allgather(static_cast<int>(n));
}

std::vector<int> Comm::displacements(const std::vector<int>& counts) {
  std::vector<int> displs(counts.size(), 0);
  int64_t total = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    displs[i] = static_cast<int>(total);
    total += counts[i];
  }
  FNVLP_CHECK(total <= std::numeric_limits<int>::max(),
              "collective of " << total << " elements exceeds MPI's int displacements");
  if (displs.empty()) displs.push_back(0);
  return displs;
}

size_t max_count_per_call() { return max_count; }

void set_max_count_per_call(size_t n) {
  FNVLP_CHECK(n >= 1 && n <= static_cast<size_t>(std::numeric_limits<int>::max()),
              "MPI count per call " << n << " outside [1, 2^31)");
  max_count = n;
}

}  // namespace fnvlp
