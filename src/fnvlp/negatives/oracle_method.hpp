#pragma once
// The oracle filter (issue 64): from `start_epoch`, exactly the negatives that share the anchor's
// class label leave the ITC denominator. Labels are known only on a labelled set (fnvlp-synth's
// classes), so it is the ceiling of what any false-negative filter can remove there, not a method
// for real data: the trainer refuses it where a pair of the training set has no label
// (train/methods.hpp: require_labels). The GloFND authors' code has the same arm.
#include "fnvlp/negatives/filter_telemetry.hpp"
#include "fnvlp/negatives/method.hpp"

namespace fnvlp::negatives {

// The exclusion mask: negative & label_row == label_col, both labels known. label_row [b] (the
// local anchors), label_all [N] (the global columns), on negative's device.
torch::Tensor oracle_filter(const torch::Tensor& negative, const torch::Tensor& label_row,
                            const torch::Tensor& label_all);

class OracleMethod : public Method {
 public:
  OracleMethod(const MethodEnv& env, int64_t start_epoch);
  std::string name() const override { return "oracle"; }
  void adjust_itc(StepContext& s, loss::ItcInputs& in) override;
  void telemetry(nlohmann::json& m) override { fn_.report(env_.comm, m); }
  std::vector<int64_t> static_key(const data::Batch&, const StepPosition& at) override {
    return {at.epoch >= start_epoch_ ? 1 : 0};
  }
  void stage(const data::Batch&, const StepPosition&, const std::vector<int64_t>& key) override {
    staged_active_ = key.at(0) > 0;
    if (staged_active_) fn_.allocate(env_.device);
  }

 private:
  MethodEnv env_;
  int64_t start_epoch_;
  FilterTelemetry fn_;
  bool staged_active_ = false;
};

}  // namespace fnvlp::negatives
