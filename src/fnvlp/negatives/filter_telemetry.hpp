#pragma once
// False-negative telemetry of an exclusion method (GloFND, FNC): per logging window, how many
// negatives it removed and, where labels exist, how many of those share the anchor's label
// (precision) and how many same-label negatives it found (recall). Summed on each rank, reduced
// at log time into the contract keys of metrics.jsonl.
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

 private:
  double negatives_ = 0, filtered_i2t_ = 0, filtered_t2i_ = 0;
  double filtered_same_label_ = 0;  // filtered negatives sharing the anchor's label
  double filtered_known_ = 0;       // filtered negatives whose two labels are known
  double same_label_ = 0;           // negatives sharing the anchor's label
  double known_ = 0;                // negatives whose two labels are known
};

}  // namespace fnvlp::negatives
