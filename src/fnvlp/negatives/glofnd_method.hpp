#pragma once
// GloFND as a training-method plug-in (method.hpp).
#include <vector>

#include "fnvlp/negatives/filter_telemetry.hpp"
#include "fnvlp/negatives/glofnd.hpp"
#include "fnvlp/negatives/method.hpp"
#include "fnvlp/negatives/method_config.hpp"

namespace fnvlp::negatives {

// GloFND (glofnd.hpp has the equations): from `start_epoch`, each local anchor's λ takes one Adam
// step on the global batch, then negatives above the updated λ leave the denominator. λ is
// partitioned with the rank's block, saved by global pair_id, exported with the embeddings.
// exact_init: at start_epoch (and every reanchor_every epochs after) λ restarts from the exact
// (1−α)-quantiles of the previous epoch's export (similarity::exact_thresholds, the rank's block).
class GlofndMethod : public Method {
 public:
  GlofndMethod(const MethodEnv& env, double alpha, int64_t start_epoch, GlofndOptions opt);
  std::string name() const override { return "glofnd"; }
  void adjust_itc(StepContext& s, loss::ItcInputs& in) override;
  void after_step(StepContext&) override { step_updated_ = false; }
  void skipped_step(StepContext& s) override;
  // The static step: {rounds} (0 before the start epoch), the rows staged, the update committed
  // on the finite flag, λ and the flag copied into the window after the step.
  std::vector<int64_t> static_key(const data::Batch& host, const StepPosition& at) override;
  void stage(const data::Batch& host, const StepPosition& at,
             const std::vector<int64_t>& key) override;
  void commit(StepContext& s) override;
  void after_device_step(const StepPosition& at) override;
  void telemetry(nlohmann::json& m) override;
  void save(const std::string& dir) override;
  bool collective_save() const override { return true; }
  void load(const std::string& dir, int world_size) override;
  std::string per_pair_state() const override {
    return "GloFND's per-pair thresholds and their optimizer state";
  }
  // Both sides' per-pair files over the whole training set (the free-space check's estimate).
  uint64_t state_bytes() const override;
  void export_embeddings(data::Embeddings& e) override;
  bool wants_epoch_export(int64_t next_epoch) const override;
  void epoch_exported(int64_t next_epoch, const std::string& path) override;
  const GlofndState& state() const { return state_; }

 private:
  MethodEnv env_;
  int64_t start_epoch_;
  GlofndOptions opt_;
  GlofndState state_;
  FilterTelemetry fn_;
  // λ of the window's anchors after their update, a tensor per step on the state's device.
  std::vector<torch::Tensor> lambda_image_, lambda_text_;
  // The static step: each step's flag beside its λ (a skipped step's λ leave the statistics when
  // the window is read), the flag written in the step, and whether the staged step updates λ.
  std::vector<torch::Tensor> lambda_finite_;
  torch::Tensor finite_;
  bool staged_active_ = false;
  bool step_updated_ = false;  // the last adjust_itc updated λ (skipped_step undoes it)
  nlohmann::json restart_;     // the last exact (re)initialisation, for the next window's metrics
};

}  // namespace fnvlp::negatives
