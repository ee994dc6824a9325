#pragma once
// The shape FNC and the oracle share: a filter of ITC negatives that is active from a start epoch.
#include <torch/torch.h>

#include <utility>
#include <vector>

#include "fnvlp/negatives/filter_telemetry.hpp"
#include "fnvlp/negatives/method.hpp"

namespace fnvlp::negatives {

// From `start_epoch` the masks of exclude() leave the ITC denominator, and what they remove is
// reported (FilterTelemetry). The eager step asks the step's epoch; the static step's key is {1}
// from the start epoch and {0} before, so that a captured step never depends on the epoch.
class EpochFilterMethod : public Method {
 public:
  void adjust_itc(StepContext& s, loss::ItcInputs& in) final;
  void telemetry(nlohmann::json& m) override { fn_.report(env_.comm, m); }
  std::vector<int64_t> static_key(const data::Batch&, const StepPosition& at) override {
    return {at.epoch >= start_epoch_ ? 1 : 0};
  }
  void stage(const data::Batch&, const StepPosition&, const std::vector<int64_t>& key) override {
    staged_active_ = key.at(0) > 0;
    if (staged_active_) fn_.allocate(env_.device);
  }

 protected:
  EpochFilterMethod(const MethodEnv& env, int64_t start_epoch)
      : env_(env), start_epoch_(start_epoch) {}
  // The step's exclusion masks (i2t, t2i), bool [b, N] each, under no_grad.
  virtual std::pair<torch::Tensor, torch::Tensor> exclude(const StepContext& s,
                                                          const loss::ItcInputs& in) = 0;

  MethodEnv env_;

 private:
  int64_t start_epoch_;
  FilterTelemetry fn_;
  bool staged_active_ = false;
};

}  // namespace fnvlp::negatives
