#pragma once
// ALBEF momentum distillation as a plug-in (method.hpp): the momentum model's features, with a
// queue of earlier ones, are the ITC keys and give the soft targets of ITC and MLM (ALBEF §3.3;
// loss::momentum_itc_inputs has the equations); after each step taken the momentum model follows
// the online one by EMA and the step's gathered features join the queue. Both are replicated
// (the same on every rank without communication) and saved by rank 0.
#include "fnvlp/negatives/method.hpp"
#include "fnvlp/negatives/momentum.hpp"

namespace fnvlp::negatives {

class MomentumMethod : public Method {
 public:
  // The momentum model starts equal to the (broadcast) online model (ALBEF copy_params).
  MomentumMethod(const MethodEnv& env, double momentum, int64_t queue_size);
  // Collective (fnvlp-pretrain --init-from): ALBEF checkpoints among `files` give the momentum
  // model their momentum copy (store::WeightsCopy::kMomentum: rank 0 reads, every rank gets it);
  // what they lack stays the copy of the online model. ALBEF's queues are not loaded: their
  // features belong to other data, and this queue's keys carry this dataset's image ids.
  void init_from(const std::vector<std::string>& files, const std::string& report_path);
  std::string name() const override { return "momentum"; }
  bool needs_pair_ids() const override { return true; }
  bool build_itc(StepContext& s, loss::ItcInputs& in) override;
  torch::Tensor mlm_loss(StepContext& s, const torch::Tensor& fused_at_masked) override;
  void after_step(StepContext& s) override;
  // The static step: the whole queue with its filled rows marked as keys; the EMA and the enqueue
  // on the finite flag, the pointer on the device.
  void commit(StepContext& s) override;
  void after_device_step(const StepPosition&) override { queue_->forget_host_state(); }
  void save(const std::string& dir) override;
  void load(const std::string& dir, int world_size) override;
  // The momentum encoder; its queue holds the old data's pair and image ids.
  void load_on_changed_data(const std::string& dir, int world_size) override;
  std::string per_pair_state() const override { return "the momentum queue"; }
  uint64_t state_bytes() const override;

 private:
  MethodEnv env_;
  double momentum_;
  int64_t queue_size_;
  model::Albef model_m_{nullptr};
  FeatureQueue queue_{nullptr};
  torch::Tensor image_tokens_m_;  // the step's momentum image tokens (MLM's soft labels)
  struct {
    torch::Tensor img, txt, image_id, pair_id;
  } enqueue_;  // the step's gathered momentum features, queued once the step is taken
};

}  // namespace fnvlp::negatives
