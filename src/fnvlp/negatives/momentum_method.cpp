#include "fnvlp/negatives/momentum_method.hpp"

#include <spdlog/spdlog.h>

#include <filesystem>

#include "fnvlp/comm/tensors.hpp"
#include "fnvlp/model/autocast.hpp"
#include "fnvlp/store/checkpoint.hpp"
#include "fnvlp/store/weights_io.hpp"

namespace fnvlp::negatives {

namespace fs = std::filesystem;

MomentumMethod::MomentumMethod(const MethodEnv& env, double momentum, int64_t queue_size)
    : env_(env), momentum_(momentum), queue_size_(queue_size) {
  // Never trained, and run in eval mode so that its features and targets do not depend on a
  // rank's dropout draws (ALBEF leaves it in train mode; tiny/small have dropout 0 anyway).
  model_m_ = model::Albef(env_.model_config);
  model_m_->to(env_.device);
  copy_module(*model_m_, *env_.model);
  model_m_->eval();
  for (auto& p : model_m_->parameters()) p.requires_grad_(false);
  queue_ = FeatureQueue(queue_size_, env_.model_config.embed_dim);
  queue_->to(env_.device);
}

void MomentumMethod::init_from(const std::vector<std::string>& files,
                               const std::string& report_path) {
  // Through a host copy, as the online model: rank 0 imports, the broadcast gives every rank its
  // weights.
  model::Albef host(env_.model_config);
  copy_module(*host, *model_m_);
  store::import_initial_weights(env_.comm, files, *host, report_path,
                                store::WeightsCopy::kMomentum);
  broadcast_module(env_.comm, *host);
  copy_module(*model_m_, *host);
}

// Keys = [all-gathered momentum features ; queue]. No gradient reaches the keys, so no cross-rank
// term is needed for the exact data-parallel gradient (loss/itc.hpp).
bool MomentumMethod::build_itc(StepContext& s, loss::ItcInputs& in) {
  torch::NoGradGuard no_grad;
  loss::MomentumItc mi;
  mi.img = s.img;
  mi.txt = s.txt;
  {
    // The momentum model's forward in the step's precision, its embeddings compared in fp32.
    model::Bf16Autocast autocast(env_.bf16);
    image_tokens_m_ = model_m_->encode_image(s.images);
    mi.img_m = model_m_->image_embed(image_tokens_m_).to(torch::kFloat);
    mi.txt_m = model_m_->text_embed(model_m_->encode_text(s.batch.tokens, s.batch.attention_mask))
                   .to(torch::kFloat);
  }
  // One gather of both (every rank has batch_size rows: no agreement on the counts).
  const int64_t e = mi.img_m.size(1);
  const torch::Tensor both =
      allgather_rows(env_.comm, torch::cat({mi.img_m, mi.txt_m}, 1), &mi.offset, env_.batch_size);
  mi.img_m_all = both.narrow(1, 0, e).contiguous();
  mi.txt_m_all = both.narrow(1, e, e).contiguous();
  mi.image_id = s.batch.image_id;
  if (s.static_step) {  // ids staged with the inputs; the queue whole, its empty rows masked
    mi.image_id_all = s.image_id_all;
    mi.queue_img = queue_->all_img();
    mi.queue_txt = queue_->all_txt();
    mi.queue_image_id = queue_->all_image_id();
    mi.queue_valid = queue_->valid();
  } else {
    mi.image_id_all = allgather_ids(env_.comm, s.host.image_id, s.batch.image_id.device());
    mi.queue_img = queue_->img();
    mi.queue_txt = queue_->txt();
    mi.queue_image_id = queue_->image_id();
  }
  mi.temp = s.temp;
  mi.alpha = s.soft_weight;
  in = loss::momentum_itc_inputs(mi);
  if (s.static_step) in.soft_weight_t = s.soft_weight_t;
  enqueue_ = {mi.img_m_all, mi.txt_m_all, mi.image_id_all,
              s.static_step ? s.pair_id_all
                            : allgather_ids(env_.comm, s.host.pair_id, s.batch.pair_id.device())};
  return true;
}

// ALBEF's distilled MLM: soft labels = softmax of the momentum model's MLM logits on the same
// masked input, fused with the momentum image tokens; mixed with the same alpha.
torch::Tensor MomentumMethod::mlm_loss(StepContext& s, const torch::Tensor& fused_at_masked) {
  const loss::MlmMasking& m = s.masking;
  const torch::Tensor logits = env_.model->mlm_logits(fused_at_masked);
  torch::Tensor soft;
  {
    torch::NoGradGuard no_grad;
    soft = torch::softmax(model_m_->mlm_logits(model_m_->fuse_at(
                              model_m_->encode_text(m.input_ids, s.batch.attention_mask),
                              s.batch.attention_mask, image_tokens_m_, m.positions)),
                          1);
  }
  if (s.static_step) {  // targets padded with -100, alpha from memory, nothing read back
    if (s.want_plain_mlm) s.mlm_plain_t = loss::padded_mlm_loss(logits.detach(), m.targets);
    return loss::padded_mlm_loss(logits, m.targets, soft, s.soft_weight_t);
  }
  if (s.want_plain_mlm) s.mlm_plain = loss::mlm_loss(logits.detach(), m.targets).item<double>();
  return loss::mlm_loss(logits, m.targets, soft, s.soft_weight);
}

void MomentumMethod::commit(StepContext& s) {
  ema_update(*model_m_, *env_.model, momentum_, s.finite);
  queue_->enqueue_flagged(enqueue_.img, enqueue_.txt, enqueue_.image_id, enqueue_.pair_id,
                          s.finite);
}

// After the step taken: EMA of the new online weights, then the step's gathered momentum features
// join the queue in global (rank) order.
void MomentumMethod::after_step(StepContext& s) {
  ema_update(*model_m_, *env_.model, momentum_);
  queue_->enqueue(enqueue_.img, enqueue_.txt, enqueue_.image_id, enqueue_.pair_id);
  s.clock.lap(StepClock::kOptimizer);
}

void MomentumMethod::save(const std::string& dir) {
  if (!env_.comm.is_root()) return;
  store::save_module(dir, "momentum_model", *model_m_);
  store::save_module(dir, "momentum_queue", *queue_);
}

// A checkpoint without momentum state (written by a run with another loss.soft_targets) is
// refused rather than completed by a copy of the online weights and an empty queue: that would
// silently change the trajectory a resume promises to continue.
void MomentumMethod::load(const std::string& dir, int) {
  const fs::path model_file = fs::path(dir) / "momentum_model.pt";
  const fs::path queue_file = fs::path(dir) / "momentum_queue.pt";
  FNVLP_CHECK(fs::exists(model_file) && fs::exists(queue_file),
              dir << ": no momentum state (momentum_model.pt, momentum_queue.pt): the checkpoint "
                     "was written without loss.soft_targets=momentum and cannot be resumed "
                     "with it; resume with the run's own loss.soft_targets, or start a new run");
  store::load_module(dir, "momentum_model", *model_m_);
  store::load_module(dir, "momentum_queue", *queue_);
  model_m_->to(env_.device);  // checkpoints load onto the host (store::load_module)
  queue_->to(env_.device);
  queue_->check(queue_size_, env_.model_config.embed_dim);
}

void MomentumMethod::load_on_changed_data(const std::string& dir, int) {
  FNVLP_CHECK(fs::exists(fs::path(dir) / "momentum_model.pt"),
              dir << ": no momentum encoder (momentum_model.pt): the checkpoint was written "
                     "without loss.soft_targets=momentum");
  store::load_module(dir, "momentum_model", *model_m_);
  model_m_->to(env_.device);
}

uint64_t MomentumMethod::state_bytes() const {
  return store::module_bytes(*model_m_) + store::module_bytes(*queue_);
}

}  // namespace fnvlp::negatives
