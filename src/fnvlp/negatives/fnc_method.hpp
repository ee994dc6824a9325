#pragma once
// FNC as a training-method plug-in (method.hpp).
#include "fnvlp/negatives/filter_telemetry.hpp"
#include "fnvlp/negatives/method.hpp"

namespace fnvlp::negatives {

// FNC (Huynh et al.; GloFND §4 baseline): from `start_epoch`, the ⌈α·n_neg⌉ most similar
// negatives of each anchor in the global batch are removed.
class FncMethod : public Method {
 public:
  FncMethod(const MethodEnv& env, double alpha, int64_t start_epoch);
  std::string name() const override { return "fnc"; }
  void adjust_itc(StepContext& s, loss::ItcInputs& in) override;
  void telemetry(nlohmann::json& m) override { fn_.report(env_.comm, m); }
  // The static step: {1} from the start epoch, {0} before.
  std::vector<int64_t> static_key(const data::Batch&, const StepPosition& at) override {
    return {at.epoch >= start_epoch_ ? 1 : 0};
  }
  void stage(const data::Batch&, const StepPosition&, const std::vector<int64_t>& key) override {
    staged_active_ = key.at(0) > 0;
    if (staged_active_) fn_.allocate(env_.device);
  }

 private:
  MethodEnv env_;
  double alpha_;
  int64_t start_epoch_;
  FilterTelemetry fn_;
  bool staged_active_ = false;
};

}  // namespace fnvlp::negatives
