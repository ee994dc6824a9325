#pragma once
// False-negative telemetry of an exclusion method (GloFND, FNC): per logging window, how many
// negatives it removed and, where labels exist, how many of those share the anchor's label
// (precision) and how many same-label negatives it found (recall). Summed on each rank where the
// masks live (no read back from a GPU per step), reduced at log time into the contract keys of
// metrics.jsonl.
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include "fnvlp/comm/comm.hpp"

namespace fnvlp::negatives {

class FilterTelemetry {
 public:
  // exclude_*: bool [b, N] exclusion masks; negative: bool [b, N]; labels of the local anchors
  // [b] and of the global columns [N] (-1 unknown).
  void record(const torch::Tensor& exclude_i2t, const torch::Tensor& exclude_t2i,
              const torch::Tensor& negative, const torch::Tensor& label_row,
              const torch::Tensor& label_all);
  // Collective: filtered_frac_i2t / _t2i and, with labels, fn_precision / fn_recall / fn_f1.
  void report(const Comm& comm, nlohmann::json& m);
  // The sums on `device` from now on (the static step: call before the step, so that a captured
  // record adds into this tensor in place).
  void allocate(const torch::Device& device);

 private:
  // int64 [7] since the last report, on the masks' device (undefined before the first record):
  // negatives, filtered i2t, filtered t2i, filtered sharing the anchor's label, filtered with
  // both labels known, negatives sharing the anchor's label, negatives with both labels known.
  // Added to in place and zeroed at a report: it keeps its address.
  torch::Tensor sums_;
};

}  // namespace fnvlp::negatives
