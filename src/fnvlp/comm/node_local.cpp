#include "fnvlp/comm/node_local.hpp"

#include "fnvlp/comm/native.hpp"

namespace fnvlp {

NodeLocal node_local(const Comm& comm) {
  MPI_Comm node = MPI_COMM_NULL;
  FNVLP_CHECK(MPI_Comm_split_type(comm.native().comm, MPI_COMM_TYPE_SHARED, comm.rank(),
                                  MPI_INFO_NULL, &node) == MPI_SUCCESS,
              "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) failed");
  NodeLocal out;
  MPI_Comm_rank(node, &out.rank);
  MPI_Comm_size(node, &out.size);
  MPI_Comm_free(&node);
  return out;
}

}  // namespace fnvlp
