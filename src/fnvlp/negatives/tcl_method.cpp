#include "fnvlp/negatives/tcl_method.hpp"

#include "fnvlp/loss/tcl.hpp"

namespace fnvlp::negatives {

// A second augmented view of the images (its own per-step stream) and a second text pass.
void TclMethod::extra_losses(StepContext& s, std::vector<NamedLoss>& out) {
  const data::Batch& batch = s.batch;
  auto& model = env_.model;
  auto gen = step_generator(env_.seed, s.step, env_.comm.rank(), kTclViewStream);
  const torch::Tensor tokens2 =
      model->encode_image(env_.augment.train(batch.images, gen).to(env_.device));
  const torch::Tensor img2 = model->image_embed(tokens2);
  // Two dropout masks on the text (TCL's T and T+); without dropout both passes are equal.
  const torch::Tensor hidden2 = env_.model_config.dropout > 0
                                    ? model->encode_text(batch.tokens, batch.attention_mask)
                                    : s.text_hidden;
  const torch::Tensor txt2 = model->text_embed(hidden2);
  const torch::Tensor imc = 0.5 * (loss::imc_loss(s.img, img2, batch.image_id, s.temp) +
                                   loss::imc_loss(s.txt, txt2, batch.image_id, s.temp));
  const int64_t len = hidden2.size(1);
  const torch::Tensor local_img =
      model->project_image_tokens(loss::pool_patch_tokens(tokens2, cfg_.grid));
  const torch::Tensor local_txt = model->project_text_tokens(hidden2.narrow(1, 1, len - 1));
  const torch::Tensor valid = batch.attention_mask.narrow(1, 1, len - 1) > 0;
  const torch::Tensor lmi = 0.5 * (loss::lmi_loss(s.img, local_img, {}, batch.image_id, s.temp) +
                                   loss::lmi_loss(s.txt, local_txt, valid, batch.image_id, s.temp));
  out.push_back({"imc", cfg_.imc_weight, imc});
  out.push_back({"lmi", cfg_.lmi_weight, lmi});
}

}  // namespace fnvlp::negatives
