#include "fnvlp/comm/comm.hpp"

#include <cstdio>
#include <cstdlib>
#include <limits>

namespace fnvlp {

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  int provided = 0;
  MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
  FNVLP_CHECK(provided >= MPI_THREAD_FUNNELED, "MPI provides no MPI_THREAD_FUNNELED support");
}

MpiRuntime::~MpiRuntime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

Comm::Comm(MPI_Comm parent) {
  MPI_CHECK(MPI_Comm_dup(parent, &comm_));
  MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

Comm::~Comm() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
}

void Comm::barrier() const { MPI_CHECK(MPI_Barrier(comm_)); }

void Comm::abort(int code) const {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(comm_, code == 0 ? 1 : code);
  std::_Exit(code == 0 ? 1 : code);  // MPI_Abort should not return; never continue if it does
}

int64_t Comm::exscan_sum(int64_t v) const {
  int64_t out = 0;
  MPI_CHECK(MPI_Exscan(&v, &out, 1, MPI_INT64_T, MPI_SUM, comm_));
  return rank_ == 0 ? 0 : out;  // MPI leaves rank 0's result undefined
}

bool Comm::all_ok(bool local_ok) const {
  int ok = local_ok ? 1 : 0;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm_));
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

}  // namespace fnvlp
