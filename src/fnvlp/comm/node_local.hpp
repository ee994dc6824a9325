#pragma once
// This rank's place among the ranks of its node (MPI's shared-memory split): what picks the GPU a
// rank drives, one per rank.
#include "fnvlp/comm/comm.hpp"

namespace fnvlp {

struct NodeLocal {
  int rank = 0;  // among the ranks sharing this node's memory, in world-rank order
  int size = 1;
};

// Collective over comm.
NodeLocal node_local(const Comm& comm);

}  // namespace fnvlp
