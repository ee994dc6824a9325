#pragma once
// The batch-composing plug-ins (method.hpp): GRIT's grouping at a fixed or scheduled hardness
// quantile q (grouped_sampler.hpp) here, and FALCON's learned per-anchor q (falcon_method.hpp).
// Both group epoch e >= 1 by the embeddings of the rank's block at the end of epoch e - 1; epoch 0
// is uniform (the warm start of falcon.txt App. C.2).
#include <memory>

#include "fnvlp/negatives/grouped_sampler.hpp"
#include "fnvlp/negatives/method.hpp"
#include "fnvlp/negatives/method_config.hpp"

namespace fnvlp::negatives {

class GroupedMethod : public Method {
 public:
  data::Sampler* sampler() override { return sampler_.get(); }
  void on_batch(const nlohmann::json& sampler_state) override;
  bool wants_epoch_embeddings() const override { return true; }
  void set_epoch_embeddings(int64_t epoch, const torch::Tensor& img,
                            const torch::Tensor& txt) override {
    sampler_->set_embeddings(epoch, img, txt);
  }
  // q_mean / q_p5 / q_p95: window means of the per-batch statistics of the picks' q.
  void telemetry(nlohmann::json& m) override;
  GroupedSampler& grouped() { return *sampler_; }

 protected:
  explicit GroupedMethod(const MethodEnv& env) : env_(env) {}
  MethodEnv env_;
  std::unique_ptr<GroupedSampler> sampler_;
  std::vector<double> q_window_ = std::vector<double>(4, 0.0);  // sum of mean, p5, p95; batches
};

// GRIT (q = 1), the fixed-q heuristics and the hardening / softening schedules.
class GritMethod : public GroupedMethod {
 public:
  GritMethod(const MethodEnv& env, int64_t search_space, const GritConfig& cfg);
  std::string name() const override { return "grit"; }
};

}  // namespace fnvlp::negatives
