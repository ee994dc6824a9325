#include "fnvlp/negatives/falcon_method.hpp"

#include <algorithm>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "fnvlp/comm/tensors.hpp"
#include "fnvlp/model/autocast.hpp"
#include "fnvlp/store/checkpoint.hpp"

namespace fnvlp::negatives {

namespace fs = std::filesystem;

FalconMethod::FalconMethod(const MethodEnv& env, int64_t search_space, FalconConfig cfg)
    : GroupedMethod(env) {
  cfg.init_seed = env.seed;  // the same policy on every rank
  cfg.validate();
  falcon_ = std::make_unique<FalconScheduler>(cfg);
  sampler_ = std::make_unique<FalconSampler>(env.partition, env.batch_size, env.seed,
                                             env.comm.rank(), search_space, *falcon_);
}

void FalconMethod::on_batch(const nlohmann::json& sampler_state) {
  GroupedMethod::on_batch(sampler_state);
  draws_ = falcon_->take_draws();
}

// Every rank takes part (an empty draw set contributes a zero gradient), and only in grouped
// epochs: epoch 0 trains no scheduler (App. C.2).
void FalconMethod::after_step(StepContext& s) {
  if (!s.masking.positions.defined() || s.epoch == 0) return;
  const loss::MlmMasking& m = s.masking;
  const torch::Tensor& mask = s.batch.attention_mask;
  auto& model = env_.model;
  double after = 0;
  {
    // Inference mode, not just no-grad: nothing of this pass is ever differentiated, so libtorch
    // can also skip the version counters and view tracking of its tensors.
    c10::InferenceMode inference;
    model::Bf16Autocast autocast(env_.bf16);  // the precision of the step's MLM loss
    // The step's dropout masks again (its image pass opens the step's dropout stream, its MLM
    // passes their own), the same calls in the same order: before and after differ only by the
    // update, as Alg. 2 l. 7 means (with dropout the two losses would otherwise differ by noise of
    // the size of the reward itself).
    seed_dropout(env_.seed, s.step, env_.comm.rank());
    const auto keys = model->image_keys(model->encode_image(s.images));
    seed_dropout(env_.seed, s.step, env_.comm.rank(), kMlmDropoutStream);
    const auto at_masked =
        model->fuse_at(model->encode_text(m.input_ids, mask), mask, keys, {}, m.positions);
    after = loss::linear_cross_entropy(model->mlm_hidden(at_masked), model->mlm_decoder_weight(),
                                       model->mlm_bias(), m.targets)
                .to(torch::kFloat)
                .item<double>();
  }
  update_policy(s.mlm_plain - after, &s.clock);
}

void FalconMethod::update_policy(double reward, StepClock* clock) {
  falcon_->loss_backward(reward, draws_);
  if (clock) clock->lap(StepClock::kFalcon);
  // The policy's few small gradients averaged over the ranks, one sum each (also where this rank
  // waits for the slower one). Not FlatGradients: the policy's optimizer detaches its gradients
  // in zero_grad, which views of a flat buffer refuse.
  if (env_.comm.size() > 1)
    for (auto& p : falcon_->parameters()) {
      allreduce_sum(env_.comm, p.mutable_grad());
      p.mutable_grad().mul_(1.0f / static_cast<float>(env_.comm.size()));
    }
  if (clock) clock->lap(StepClock::kComm);
  falcon_->step();
  reward_window_[0] += reward;
  reward_window_[1] += 1;
}

void FalconMethod::stage(const data::Batch&, const StepPosition&, const std::vector<int64_t>&) {
  if (!staged_.defined())
    staged_ = torch::zeros({3}, torch::TensorOptions().dtype(torch::kFloat).device(env_.device));
}

void FalconMethod::commit(StepContext& s) {
  staged_[0].copy_(s.finite);
  staged_[1].copy_(s.mlm_plain_t);
}

// The reward pass of after_step on the staged inputs: the trainer reseeds the step's dropout
// stream first, and the static step draws its image pass and MLM passes first from it, in this
// order, so the masks are the step's.
void FalconMethod::after_update(StepContext& s) {
  const loss::MlmMasking& m = s.masking;
  const torch::Tensor& mask = s.batch.attention_mask;
  auto& model = env_.model;
  c10::InferenceMode inference;
  model::Bf16Autocast autocast(env_.bf16);
  const auto keys = model->image_keys(model->encode_image(s.images));
  const auto at_masked =
      model->fuse_at(model->encode_text(m.input_ids, mask), mask, keys, {}, m.positions);
  staged_[2].copy_(loss::padded_linear_cross_entropy(model->mlm_hidden(at_masked),
                                                     model->mlm_decoder_weight(), model->mlm_bias(),
                                                     m.targets)
                       .to(torch::kFloat));
}

void FalconMethod::after_device_step(const StepPosition& at) {
  if (at.epoch == 0) return;
  // The step's one read of the device: the flag, and L_MLM before and after the update.
  const torch::Tensor h = staged_.to(torch::kCPU, torch::kDouble);
  const double* v = h.data_ptr<double>();
  if (v[0] == 0.0) return;  // a skipped step trains no policy (after_step is not called either)
  update_policy(v[1] - v[2], nullptr);
}

void FalconMethod::telemetry(nlohmann::json& m) {
  GroupedMethod::telemetry(m);
  std::vector<double> rw = reward_window_;
  env_.comm.allreduce_sum(rw);
  std::fill(reward_window_.begin(), reward_window_.end(), 0.0);
  if (rw[1] > 0) m["falcon_reward"] = rw[0] / rw[1];
  // Every rank applies the same averaged gradient to the same initialisation, so the replicas
  // must stay bitwise equal; one that drifted (a rank that missed an update, a reduction that is
  // not the same everywhere) would draw its anchors' q from another policy without any error.
  const std::vector<std::string> prints =
      env_.comm.allgather_strings(falcon_->policy_fingerprint());
  const bool equal = std::all_of(prints.begin(), prints.end(),
                                 [&](const std::string& p) { return p == prints[0]; });
  m["falcon_policy_replicas_equal"] = equal;
  if (!equal && env_.comm.is_root())
    spdlog::error("falcon: the policy replicas differ across ranks at step {}",
                  m.value("step", int64_t{-1}));
}

void FalconMethod::save(const std::string& dir) {
  falcon_->save((fs::path(dir) / store::rank_file("falcon", env_.comm.rank())).string());
}

// Another rank count: rank 0's baseline stands in for the new ranks'.
void FalconMethod::load(const std::string& dir, int world_size) {
  const auto mine = fs::path(dir) / store::rank_file("falcon", env_.comm.rank());
  const auto path = world_size == env_.comm.size() && fs::exists(mine)
                        ? mine
                        : fs::path(dir) / store::rank_file("falcon", 0);
  if (world_size != env_.comm.size() && env_.comm.is_root())
    spdlog::warn(
        "falcon: checkpoint of {} ranks resumed on {}: every rank starts from rank 0's policy "
        "(the replicas are equal) and rank 0's reward baseline (the other ranks' are dropped)",
        world_size, env_.comm.size());
  falcon_->load(path.string());
}

}  // namespace fnvlp::negatives
