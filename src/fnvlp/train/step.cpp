// The training step of Trainer, eager: the forward, the losses, the finite-loss agreement, the
// backward, the gradient average and the optimizer, read top to bottom (static_step.cpp holds the
// step of static shapes that CUDA graphs replay).
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "fnvlp/core/fault.hpp"
#include "fnvlp/loss/itc.hpp"
#include "fnvlp/loss/itm.hpp"
#include "fnvlp/loss/mlm.hpp"
#include "fnvlp/model/autocast.hpp"
#include "fnvlp/train/fused_adamw.hpp"
#include "fnvlp/train/grad_buckets.hpp"
#include "fnvlp/train/schedule.hpp"
#include "fnvlp/train/signals.hpp"
#include "fnvlp/train/trainer_impl.hpp"

namespace fnvlp::train {

using negatives::StepContext;

// One optimizer step (or a skipped one), read top to bottom. Returns this rank's losses.
StepLosses Trainer::train_step(const data::Batch& host_batch) {
  begin_step(host_batch);
  const data::Batch batch = devices_.upload.finish(host_batch);
  StepContext s{batch, host_batch, clock_, step_, epoch_, total_steps_};
  s.want_plain_mlm = methods_.any(&negatives::Method::needs_plain_mlm);
  s.images = batch.prepared;  // augmented for this step by the loader (run())
  s.images2 = batch.prepared2;
  clock_.lap(StepClock::kBatch);

  // Each weight cast to bf16 once per step, however many regions use it (model/autocast.hpp).
  std::optional<model::AutocastCache> cast_once;
  cast_once.emplace(bf16());
  const loss::ItcInputs in = itc_inputs(s);  // ITC against the global batch, methods applied
  const loss::ItcResult itc = loss::itc_loss(in);
  std::vector<torch::Tensor> image_keys;
  {
    model::Bf16Autocast autocast(bf16());
    image_keys = model_->image_keys(s.image_tokens);
  }
  const torch::Tensor itm = itm_loss(s, in, itc, image_keys);  // ITM with hard negatives
  const torch::Tensor mlm = mlm_loss(s, image_keys);           // MLM on masked captions
  torch::Tensor total =
      cfg_.loss.itc_weight * itc.loss + cfg_.loss.itm_weight * itm + cfg_.loss.mlm_weight * mlm;
  std::vector<negatives::NamedLoss> extra;  // the methods' own losses (TCL)
  for (auto& m : methods_) m->extra_losses(s, extra);
  for (const auto& e : extra) total = total + e.weight * e.value;
  cast_once.reset();
  // Every loss in one copy to the host: each read of a GPU scalar waits for the queued work.
  std::vector<torch::Tensor> parts = {itc.loss, itm, mlm, total};
  for (const auto& e : extra) parts.push_back(e.value);
  for (auto& p : parts) p = p.detach().to(torch::kDouble).reshape({});
  const torch::Tensor values = torch::stack(parts).to(torch::kCPU);
  const double* v = values.data_ptr<double>();
  StepLosses out{v[0], v[1], v[2], v[3], {}};
  for (size_t i = 0; i < extra.size(); ++i) out.extra.emplace_back(extra[i].name, v[4 + i]);
  clock_.lap(StepClock::kForward);
  if (fault::point("step.nan", step_)) out.total = std::nan("");
  // Every rank takes the same decision: a NaN on one rank would otherwise poison the
  // averaged gradient of all.
  const bool finite = all_finite(comm_, out.total);
  if (in.cross_rank_grad && finite) {  // the exact data-parallel ITC gradient (loss/itc.hpp)
    loss::ItcGatheredGrads g = loss::itc_gathered_grads(itc);
    sum_gathered_grads(g);
    total = total + cfg_.loss.itc_weight * loss::itc_cross_rank_term(in, g);
  }
  optim_.grads->zero();
  clock_.lap(StepClock::kComm);
  skips_.record(!finite, step_);
  if (!finite) {
    for (auto& m : methods_) m->skipped_step(s);  // GloFND's λ moved in itc_inputs: undone
    if (comm_.is_root())
      spdlog::warn("pretrain: non-finite loss at step {}: optimizer step skipped ({} in a row)",
                   step_, skips_.consecutive());
    return out;
  }
  backward_and_average(total);
  // Clipping's scale applied inside the AdamW pass (no pass of its own over the gradients).
  adamw_step(*optim_.adamw, *optim_.grads, cfg_.optim.grad_clip);
  clock_.lap(StepClock::kOptimizer);
  for (auto& m : methods_) m->after_step(s);  // momentum EMA, FALCON's policy update
  clock_.lap(StepClock::kFalcon);
  return out;
}

// The step's learning rate, dropout seed and fault injection points.
void Trainer::begin_step(const data::Batch& batch) {
  model_->train();
  last_lr_ = lr_at(schedule_step(samples_seen_, schedule_ranks_ * schedule_batch_),
                   static_cast<double>(schedule_steps_), cfg_.optim.warmup_steps, cfg_.optim.lr,
                   cfg_.optim.min_lr);
  for (auto& group : optim_.adamw->param_groups())
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(last_lr_);
  negatives::seed_dropout(seed(), step_, comm_.rank());  // dropout draws: exact resumes
  fault::at_step(step_);  // step.kill / step.sleep / step.throw / step.oom (core/fault.hpp)
  FNVLP_CHECK(batch.prepared.defined() && batch.prepared_for == step_,
              "batch augmented for step " << batch.prepared_for << " arrived at step " << step_);
}

// The local embeddings, the ITC inputs against the global batch (embeddings all-gathered
// without gradient, the exact gradient restored through the cross-rank term) and the methods'
// masks, weights or keys.
loss::ItcInputs Trainer::itc_inputs(StepContext& s) {
  const data::Batch& batch = s.batch;
  {
    model::Bf16Autocast autocast(bf16());
    s.image_tokens = model_->encode_image(s.images);
    s.text_hidden = model_->encode_text(batch.tokens, batch.attention_mask);
    s.img = model_->image_embed(s.image_tokens);
    s.txt = model_->text_embed(s.text_hidden);
  }
  // ITC, the methods' thresholds and the gathered features compare fp32 similarities.
  s.img = s.img.to(torch::kFloat);
  s.txt = s.txt.to(torch::kFloat);
  if (cache_.enabled()) cache_.record(s.host.pair_id, s.img, s.txt);
  s.temp = model_->temp();  // outside any NoGradGuard: it is learned
  const int64_t ramp =
      cfg_.loss.soft_warmup_steps < 0 ? methods_.uniform_steps : cfg_.loss.soft_warmup_steps;
  s.soft_weight =
      cfg_.loss.soft_weight * (ramp > 0 ? std::min(1.0, static_cast<double>(step_) / ramp) : 1.0);
  loss::ItcInputs in;
  bool built = false;
  for (auto& m : methods_) built = built || m->build_itc(s, in);
  if (!built) {
    in.img = s.img;
    in.txt = s.txt;
    std::tie(in.img_all, in.txt_all) = gather_embeddings(s.img, s.txt, &in.offset);
    in.temp = s.temp;
    in.image_id = batch.image_id;
    std::tie(in.image_id_all, s.label_all) = gather_ids_and_labels(s.host);
    in.soft = cfg_.loss.soft_targets == negatives::SoftTargetsKind::kNone
                  ? loss::SoftTargets::kNone
                  : loss::SoftTargets::kPseudo;
    in.soft_weight = s.soft_weight;
    in.cross_rank_grad = comm_.size() > 1;
  }
  if (!s.label_all.defined()) s.label_all = allgather_ids(comm_, s.host.label, devices_.device());
  // Negatives of each local anchor: every global column that does not share its image_id.
  s.negative = in.image_id.unsqueeze(1) != in.image_id_all.unsqueeze(0);
  clock_.lap(StepClock::kForward);
  for (auto& m : methods_) m->adjust_itc(s, in);
  telemetry_.record_batch(s.host);
  clock_.lap(StepClock::kNegatives);
  return in;
}

// ITM with hard negatives from the local batch (the fusion encoder needs their tokens); the
// methods' excluded negatives are not drawn (negatives.filter_itm). fuse_cls runs the last
// fusion layer for the [CLS] rows alone (exact; model/albef.hpp FusionPairs).
torch::Tensor Trainer::itm_loss(StepContext& s, const loss::ItcInputs& in,
                                const loss::ItcResult& itc,
                                const std::vector<torch::Tensor>& image_keys) {
  const int64_t b = s.batch.size();
  auto gen = negatives::step_generator(seed(), step_, comm_.rank(), negatives::kItmStream);
  const auto local = torch::indexing::Slice(in.offset, in.offset + b);
  const auto all = torch::indexing::Slice();
  torch::Tensor excl_i2t, excl_t2i;
  if (cfg_.negatives.filter_itm && in.exclude_i2t.defined()) {
    excl_i2t = in.exclude_i2t.index({all, local});
    excl_t2i = in.exclude_t2i.index({all, local});
  }
  const auto negatives = loss::sample_itm_negatives(
      itc.sim_i2t.index({all, local}), itc.sim_t2i.index({all, local}), s.host.image_id, excl_i2t,
      excl_t2i, loss::parse_itm_negative_mode(cfg_.loss.itm_negatives), gen);
  const loss::ItmPairs pairs = loss::itm_pairs(negatives);
  torch::Tensor logits;
  {
    model::Bf16Autocast autocast(bf16());
    logits = model_->itm_logits(model_->fuse_cls(s.text_hidden, s.batch.attention_mask, image_keys,
                                                 {pairs.text_index, pairs.image_index}));
  }
  return loss::itm_loss(logits.to(torch::kFloat), pairs.labels);
}

// MLM on a masked copy of the captions, conditioned on the image, at the masked positions only
// (skipped at weight 0, as in retrieval fine-tuning: a third of the step's compute).
torch::Tensor Trainer::mlm_loss(StepContext& s, const std::vector<torch::Tensor>& image_keys) {
  if (cfg_.loss.mlm_weight == 0)
    return torch::zeros({}, torch::dtype(torch::kFloat).device(devices_.device()));
  const torch::Tensor& mask = s.batch.attention_mask;
  auto gen = negatives::step_generator(seed(), step_, comm_.rank(), negatives::kMlmStream);
  const data::SpecialTokens& special = data_.train.special_tokens();
  // From the host batch: nothing read back from the device; the masked ids and targets are copied
  // to it without waiting, the positions stay on the host for fuse_at.
  s.masking = loss::mask_tokens(s.host.tokens, s.host.attention_mask, cfg_.loss.mlm_probability,
                                cfg_.model.vocab_size, special.mask,
                                {special.pad, special.cls, special.sep}, gen, devices_.device());
  // The decoder and its cross-entropy under autocast too (autocast runs the softmax in fp32).
  model::Bf16Autocast autocast(bf16());
  // The MLM passes draw their dropout masks from a stream of their own: FALCON's reward pass
  // repeats them after the update, so its loss drop measures the update, not a new mask.
  negatives::seed_dropout(seed(), step_, comm_.rank(), negatives::kMlmDropoutStream);
  const torch::Tensor at_masked = model_->fuse_at(model_->encode_text(s.masking.input_ids, mask),
                                                  mask, image_keys, {}, s.masking.positions);
  for (auto& m : methods_)
    if (torch::Tensor l = m->mlm_loss(s, at_masked); l.defined()) return l.to(torch::kFloat);
  // The decoder's logits feed only this loss: one fused node (loss/mlm.hpp).
  torch::Tensor l =
      loss::linear_cross_entropy(model_->mlm_hidden(at_masked), model_->mlm_decoder_weight(),
                                 model_->mlm_bias(), s.masking.targets);
  if (s.want_plain_mlm) s.mlm_plain = l.item<double>();
  return l.to(torch::kFloat);
}

void Trainer::backward_and_average(const torch::Tensor& total) {
  if (optim_.buckets) optim_.buckets->begin();
  total.backward();
  clock_.lap(StepClock::kBackward);
  if (optim_.buckets)
    optim_.buckets->finish();
  else
    optim_.grads->allreduce_mean(comm_);
  clock_.lap(StepClock::kComm);  // with buckets: the wait for the ones not done by now
}

std::pair<torch::Tensor, torch::Tensor> Trainer::gather_embeddings(const torch::Tensor& img,
                                                                   const torch::Tensor& txt,
                                                                   int64_t* offset) {
  const int64_t e = img.size(1);
  const torch::Tensor both =
      allgather_rows(comm_, torch::cat({img, txt}, 1), offset, cfg_.train.batch_size);
  return {both.narrow(1, 0, e).contiguous(), both.narrow(1, e, e).contiguous()};
}

std::pair<torch::Tensor, torch::Tensor> Trainer::gather_ids_and_labels(const data::Batch& host) {
  const int64_t b = host.size();
  const torch::Tensor both = allgather_ids(
      comm_, torch::cat({host.image_id.to(torch::kLong), host.label.to(torch::kLong)}),
      devices_.device());
  const torch::Tensor per_rank = both.view({comm_.size(), 2, b});
  return {per_rank.select(1, 0).reshape({-1}), per_rank.select(1, 1).reshape({-1})};
}

void Trainer::sum_gathered_grads(loss::ItcGatheredGrads& g) {
  const int64_t e = g.img_all.size(1);
  torch::Tensor both = torch::cat({g.img_all, g.txt_all}, 1).to(torch::kFloat).contiguous();
  allreduce_sum(comm_, both);
  g.img_all = both.narrow(1, 0, e);
  g.txt_all = both.narrow(1, e, e);
}

}  // namespace fnvlp::train
