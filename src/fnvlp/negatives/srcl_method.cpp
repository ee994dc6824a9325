#include "fnvlp/negatives/srcl_method.hpp"

#include <spdlog/spdlog.h>

#include "fnvlp/negatives/srcl.hpp"
#include "fnvlp/store/checkpoint.hpp"

namespace fnvlp::negatives {

SrclMethod::SrclMethod(const MethodEnv& env, SrclConfig cfg) : env_(env), cfg_(std::move(cfg)) {
  if (cfg_.helper.empty()) {
    if (env_.comm.is_root())
      spdlog::warn(
          "pretrain: SRCL without negatives.srcl.helper: the current model alone regulates the "
          "weights (a = 0)");
    return;
  }
  // The frozen helper H of SRCL (eq. 6): a checkpoint of the same architecture.
  helper_ = model::Albef(env_.model_config);
  env_.comm.collective([&] { store::load_module(cfg_.helper, "model", *helper_); });
  helper_->to(env_.device);
  helper_->eval();
  for (auto& p : helper_->parameters()) p.requires_grad_(false);
}

double SrclMethod::helper_weight(int64_t step, int64_t total_steps) const {
  return helper_ ? srcl_helper_weight(cfg_.helper_weight, step, total_steps) : 0;
}

void SrclMethod::stage(const data::Batch&, const StepPosition& at, const std::vector<int64_t>&) {
  if (!a_.defined())
    a_ = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(env_.device));
  last_a_ = helper_weight(at.step, at.total_steps);
  FNVLP_CHECK(last_a_ >= 0 && last_a_ <= 1,
              "srcl: helper weight a = " << last_a_ << " not in [0, 1]");
  a_.fill_(last_a_);
}

void SrclMethod::adjust_itc(StepContext& s, loss::ItcInputs& in) {
  torch::NoGradGuard no_grad;
  const loss::ItcCosine cos = loss::itc_cosine(in);
  torch::Tensor h_i2t, h_t2i;
  if (helper_) {
    const auto hi = helper_->image_embed(helper_->encode_image(s.images));
    const auto ht =
        helper_->text_embed(helper_->encode_text(s.batch.tokens, s.batch.attention_mask));
    // Every rank's batch has batch_size rows: no agreement on the counts.
    const auto hi_all = allgather_rows(env_.comm, hi, nullptr, env_.batch_size);
    const auto ht_all = allgather_rows(env_.comm, ht, nullptr, env_.batch_size);
    h_i2t = torch::matmul(hi, ht_all.t());
    h_t2i = torch::matmul(ht, hi_all.t());
  }
  if (s.static_step) {
    in.weight_i2t = srcl_weights(cos.i2t, h_i2t, a_, s.negative);
    in.weight_t2i = srcl_weights(cos.t2i, h_t2i, a_, s.negative);
    return;
  }
  const double a = helper_weight(s.step, s.total_steps);
  in.weight_i2t = srcl_weights(cos.i2t, h_i2t, a, s.negative);
  in.weight_t2i = srcl_weights(cos.t2i, h_t2i, a, s.negative);
  last_a_ = a;
}

}  // namespace fnvlp::negatives
