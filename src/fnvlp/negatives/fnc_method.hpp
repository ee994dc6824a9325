#pragma once
// FNC as a training-method plug-in (method.hpp).
#include <utility>

#include "fnvlp/negatives/epoch_filter.hpp"

namespace fnvlp::negatives {

// FNC (Huynh et al.; GloFND §4 baseline): from `start_epoch`, the ⌈α·n_neg⌉ most similar
// negatives of each anchor in the global batch are removed.
class FncMethod : public EpochFilterMethod {
 public:
  FncMethod(const MethodEnv& env, double alpha, int64_t start_epoch)
      : EpochFilterMethod(env, start_epoch), alpha_(alpha) {}
  std::string name() const override { return "fnc"; }

 private:
  std::pair<torch::Tensor, torch::Tensor> exclude(const StepContext& s,
                                                  const loss::ItcInputs& in) override;
  double alpha_;
};

}  // namespace fnvlp::negatives
