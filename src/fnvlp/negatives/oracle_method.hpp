#pragma once
// The oracle filter (issue 64): from `start_epoch`, exactly the negatives that share the anchor's
// class label leave the ITC denominator. Labels are known only on a labelled set (fnvlp-synth's
// classes), so it is the ceiling of what any false-negative filter can remove there, not a method
// for real data: the trainer refuses it where a pair of the training set has no label
// (train/methods.hpp: require_labels). The GloFND authors' code has the same arm.
#include <utility>

#include "fnvlp/negatives/epoch_filter.hpp"

namespace fnvlp::negatives {

// The exclusion mask: negative & label_row == label_col, both labels known. label_row [b] (the
// local anchors), label_all [N] (the global columns), on negative's device.
torch::Tensor oracle_filter(const torch::Tensor& negative, const torch::Tensor& label_row,
                            const torch::Tensor& label_all);

class OracleMethod : public EpochFilterMethod {
 public:
  OracleMethod(const MethodEnv& env, int64_t start_epoch) : EpochFilterMethod(env, start_epoch) {}
  std::string name() const override { return "oracle"; }

 private:
  std::pair<torch::Tensor, torch::Tensor> exclude(const StepContext& s,
                                                  const loss::ItcInputs& in) override;
};

}  // namespace fnvlp::negatives
