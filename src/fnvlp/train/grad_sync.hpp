#pragma once
// Data-parallel plumbing over Comm for train/: identical initial weights, gathered rows and the
// flat gradient buffer averaged over the ranks (comm/).
#include "fnvlp/comm/flat_gradients.hpp"
#include "fnvlp/comm/tensors.hpp"

namespace fnvlp::train {

using fnvlp::allgather_rows;
using fnvlp::broadcast_module;
using fnvlp::FlatGradients;

}  // namespace fnvlp::train
