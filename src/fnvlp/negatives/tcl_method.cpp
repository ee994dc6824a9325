#include "fnvlp/negatives/tcl_method.hpp"

#include "fnvlp/loss/tcl.hpp"
#include "fnvlp/model/autocast.hpp"

namespace fnvlp::negatives {

// A second augmented view of the images (its own per-step stream: the loader's, StepContext::
// images2) and a second text pass, in the step's precision.
void TclMethod::extra_losses(StepContext& s, std::vector<NamedLoss>& out) {
  const data::Batch& batch = s.batch;
  auto& model = env_.model;
  FNVLP_CHECK(s.images2.defined(), "tcl: the batch has no second augmented view");
  torch::Tensor tokens2, img2, hidden2, txt2, local_img, local_txt;
  {
    // The encoders as the step runs them; the losses below in fp32, as ITC.
    model::Bf16Autocast autocast(env_.bf16);
    tokens2 = model->encode_image(s.images2);
    img2 = model->image_embed(tokens2).to(torch::kFloat);
    // Two dropout masks on the text (TCL's T and T+); without dropout both passes are equal.
    hidden2 = env_.model_config.dropout > 0 ? model->encode_text(batch.tokens, batch.attention_mask)
                                            : s.text_hidden;
    txt2 = model->text_embed(hidden2).to(torch::kFloat);
    const int64_t len = hidden2.size(1);
    local_img =
        model->project_image_tokens(loss::pool_patch_tokens(tokens2, cfg_.grid)).to(torch::kFloat);
    local_txt = model->project_text_tokens(hidden2.narrow(1, 1, len - 1)).to(torch::kFloat);
  }
  const int64_t len = hidden2.size(1);
  const torch::Tensor imc = 0.5 * (loss::imc_loss(s.img, img2, batch.image_id, s.temp) +
                                   loss::imc_loss(s.txt, txt2, batch.image_id, s.temp));
  const torch::Tensor valid = batch.attention_mask.narrow(1, 1, len - 1) > 0;
  const torch::Tensor lmi = 0.5 * (loss::lmi_loss(s.img, local_img, {}, batch.image_id, s.temp) +
                                   loss::lmi_loss(s.txt, local_txt, valid, batch.image_id, s.temp));
  out.push_back({"imc", cfg_.imc_weight, imc});
  out.push_back({"lmi", cfg_.lmi_weight, lmi});
}

}  // namespace fnvlp::negatives
