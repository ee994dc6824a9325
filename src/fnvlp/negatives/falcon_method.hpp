#pragma once
// FALCON as a training-method plug-in (method.hpp): the grouped sampler of grit_method.hpp with
// each pick's q from the learned policy (falcon.hpp).
#include <memory>
#include <vector>

#include "fnvlp/negatives/falcon.hpp"
#include "fnvlp/negatives/grit_method.hpp"

namespace fnvlp::negatives {

// FALCON (falcon.txt §3.3, Alg. 2 lines 7-8): after each step of a grouped epoch, the reward
// Δ_k = L_MLM(θ_k) − L_MLM(θ_{k+1}) on the same batch with the same masks, then REINFORCE on Δ_k
// with the policy's gradient averaged over ranks like the model's. The policy is replicated;
// its reward baseline is per rank (each rank's Δ is measured on its own batch).
class FalconMethod : public GroupedMethod {
 public:
  FalconMethod(const MethodEnv& env, int64_t search_space, FalconConfig cfg);
  std::string name() const override { return "falcon"; }
  bool synchronous_sampler() const override { return true; }
  bool needs_plain_mlm() const override { return true; }
  void on_batch(const nlohmann::json& sampler_state) override;
  void after_step(StepContext& s) override;
  // The static step: the step's plain MLM loss and flag kept on the device (commit), the reward
  // pass a graph of its own (after_update), then one read of the three and the policy update on
  // the host (after_device_step).
  void stage(const data::Batch& host, const StepPosition& at,
             const std::vector<int64_t>& key) override;
  void commit(StepContext& s) override;
  bool wants_after_update(const StepPosition& at) const override { return at.epoch > 0; }
  void after_update(StepContext& s) override;
  void after_device_step(const StepPosition& at) override;
  void telemetry(nlohmann::json& m) override;
  void save(const std::string& dir) override;
  void load(const std::string& dir, int world_size) override;
  // The policy, its optimizer and the reward baseline hold nothing per pair.
  void load_on_changed_data(const std::string& dir, int world_size) override {
    load(dir, world_size);
  }
  FalconScheduler& scheduler() { return *falcon_; }

 private:
  std::unique_ptr<FalconScheduler> falcon_;
  FalconDraws draws_;  // the q draws that composed the current batch
  std::vector<double> reward_window_ = std::vector<double>(2, 0.0);  // sum of rewards; count
  // The reward's REINFORCE update given Δ_k (every rank, in step).
  void update_policy(double reward, StepClock* clock);
  // The static step's float [3] on the device: finite flag, L_MLM before and after the update.
  torch::Tensor staged_;
};

}  // namespace fnvlp::negatives
