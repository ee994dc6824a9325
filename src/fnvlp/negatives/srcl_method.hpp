#pragma once
// SRCL as a training-method plug-in (method.hpp).
#include "fnvlp/negatives/method.hpp"
#include "fnvlp/negatives/method_config.hpp"

namespace fnvlp::negatives {

// SRCL (srcl.hpp): negatives weighted by the inverse of a mix of the frozen helper's and the
// current model's similarity; the helper's share decays linearly over training.
class SrclMethod : public Method {
 public:
  SrclMethod(const MethodEnv& env, SrclConfig cfg);
  std::string name() const override { return "srcl"; }
  void adjust_itc(StepContext& s, loss::ItcInputs& in) override;
  void telemetry(nlohmann::json& m) override { m["srcl_helper_weight"] = last_a_; }
  // The static step: the helper's weight a of the step staged as a device scalar.
  void stage(const data::Batch& host, const StepPosition& at,
             const std::vector<int64_t>& key) override;

 private:
  double helper_weight(int64_t step, int64_t total_steps) const;

  MethodEnv env_;
  SrclConfig cfg_;
  model::Albef helper_{nullptr};
  double last_a_ = 0;
  torch::Tensor a_;  // float 0-dim on the device: a of the staged step
};

}  // namespace fnvlp::negatives
