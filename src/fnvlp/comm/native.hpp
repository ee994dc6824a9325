#pragma once
// The MPI communicator behind a Comm. Only comm/ and the tests of Comm itself include this: the
// rest of fnvlp never sees mpi.h (ARCHITECTURE.md §12).
#include <mpi.h>

#include "fnvlp/comm/comm.hpp"

namespace fnvlp {

struct Comm::Native {
  MPI_Comm comm = MPI_COMM_NULL;
};

}  // namespace fnvlp
