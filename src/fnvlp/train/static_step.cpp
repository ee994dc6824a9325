// The static training step (train.static_step, train.cuda_graphs): the eager step of step.cpp with
// every shape fixed from one step to the next and nothing read back from the device, so that CUDA
// graphs can capture it once and replay it (train/step_graphs.hpp). What differs from the eager
// step, and why:
//   - the inputs are copied into tensors at fixed addresses (StaticInputs), refilled each step;
//   - MLM's masked positions, drawn on the host as in the eager step, are padded to a multiple of
//     kMlmRowMultiple with ignored rows (loss/mlm.hpp pad_positions): a few shapes per run;
//   - ITM's hard negatives are drawn on the device (loss/itm.hpp draw_itm_pairs: ALBEF's
//     distribution, 3b pairs always, weight 0 for a row without a candidate) from the default
//     generator, which begin_step seeds per step; the MLM passes draw their dropout from the same
//     stream (no reseed in the middle of a step, which a graph cannot replay);
//   - the finite-loss decision is a device flag (all ranks: an all-reduce) handed to the optimizer,
//     which skips the update on it (FlaggedAdamW); a NaN injected by the fault knobs multiplies the
//     loss on the device;
//   - the losses stay on the device, read once per log line (flush_static_losses), which is also
//     where a run of non-finite steps is counted.
// The base objective only (ITC with pseudo soft targets, ITM, MLM): the methods' hooks read and
// change host state within the step.
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "fnvlp/comm/job_main.hpp"
#include "fnvlp/core/device_copy.hpp"
#include "fnvlp/core/fault.hpp"
#include "fnvlp/loss/itc.hpp"
#include "fnvlp/loss/itm.hpp"
#include "fnvlp/loss/mlm.hpp"
#include "fnvlp/model/autocast.hpp"
#include "fnvlp/train/fused_adamw.hpp"
#include "fnvlp/train/step_graphs.hpp"
#include "fnvlp/train/trainer_impl.hpp"

namespace fnvlp::train {

namespace {
// Padded MLM rows come in multiples of this: a run of ~15% masking over ~20-token captions sees a
// few row counts (one graph each), and a padded row costs one vocabulary row-product.
constexpr int64_t kMlmRowMultiple = 64;
// static_out_'s columns.
enum StaticOut : int64_t { kItc, kItm, kMlm, kTotal, kFinite, kStaticOutSize };
}  // namespace

void Trainer::init_static_step() {
  static_ = cfg_.train.static_step || cfg_.train.cuda_graphs;
  if (!static_) return;
  // The same configuration on every rank: the same refusal everywhere.
  if (const std::string why = static_step_refusal(); !why.empty())
    throw UsageError("train.static_step / train.cuda_graphs: " + why);
  const auto f = torch::TensorOptions().dtype(torch::kFloat).device(device_.device);
  static_out_ = torch::zeros({kStaticOutSize}, f);
  static_window_ = torch::zeros({cfg_.train.log_every, kStaticOutSize}, f);
  graphs_ = std::make_unique<StepGraphs>(cfg_.train.cuda_graphs);
  if (comm_.is_root())
    spdlog::info("pretrain: static step{}", cfg_.train.cuda_graphs ? ", CUDA graphs" : "");
}

std::string Trainer::static_step_refusal() const {
  std::vector<std::string> methods;
  for (const auto& m : methods_) methods.push_back(m->name());
  if (!methods.empty()) {
    std::string list;
    for (const auto& n : methods) list += (list.empty() ? "" : ", ") + n;
    return "the static step runs the base objective only (ITC with pseudo soft targets, ITM, "
           "MLM); this run has " +
           list + " (negatives.method, sampler.kind, loss.soft_targets=momentum, loss.tcl)";
  }
  if (cfg_.train.cuda_graphs && !device_.device.is_cuda())
    return "train.cuda_graphs needs train.device=cuda (the device is " + device_.device.str() + ")";
  if (cfg_.train.cuda_graphs && comm_.size() > 1)
    return "train.cuda_graphs with " + std::to_string(comm_.size()) +
           " ranks: the gradient and feature collectives are not captured (NCCL's watch events "
           "and the MPI fallback's host copies are outside a graph); run with "
           "train.cuda_graphs=false (train.static_step=true keeps the static step)";
  return "";
}

void Trainer::static_train_step(const data::Batch& host_batch) {
  begin_step(host_batch);  // learning rate, the step's seed (dropout and ITM draws), faults
  const data::Batch batch = upload_.finish(host_batch);
  StaticInputs& in = stage_static_inputs(batch, host_batch);
  telemetry_.record_batch(host_batch);
  clock_.lap(StepClock::kBatch);
  if (!flagged_adamw_ && FlaggedAdamW::ready(*optimizer_))
    flagged_adamw_ = std::make_unique<FlaggedAdamW>(*optimizer_, *grads_, cfg_.optim.grad_clip);
  // Graphs once the optimizer's state exists (the first step creates it, reading the flag).
  if (flagged_adamw_)
    graphs_->run(in.mlm_positions.defined() ? in.mlm_positions.size(0) : 0,
                 [&] { static_device_step(in); });
  else
    static_device_step(in);
  if (static_rows_.size() == static_cast<size_t>(static_window_.size(0))) flush_static_losses();
  static_window_[static_cast<int64_t>(static_rows_.size())].copy_(static_out_);
  static_rows_.emplace_back(step_, host_batch.size() * comm_.size());
  clock_.lap(StepClock::kForward);  // the whole device step: forward, backward, optimizer
}

StaticInputs& Trainer::stage_static_inputs(const data::Batch& batch, const data::Batch& host) {
  const int64_t b = host.size(), L = host.tokens.size(1);
  const torch::Device dev = device_.device;
  loss::MlmMasking masking;
  int64_t rows = 0;
  if (cfg_.loss.mlm_weight != 0) {  // drawn on the host as the eager step draws them
    auto gen = negatives::step_generator(seed(), step_, comm_.rank(), negatives::kMlmStream);
    const data::SpecialTokens& special = dataset_.special_tokens();
    masking = loss::mask_tokens(host.tokens, host.attention_mask, cfg_.loss.mlm_probability,
                                cfg_.model.vocab_size, special.mask,
                                {special.pad, special.cls, special.sep}, gen, torch::kCPU);
    rows = loss::padded_rows(masking.positions.size(0), kMlmRowMultiple, b * L);
    masking = loss::pad_positions(masking, rows);
  }
  StaticInputs& in = static_inputs_[rows];
  if (!in.images.defined()) {
    const auto f = torch::TensorOptions().dtype(torch::kFloat).device(dev);
    const auto i64 = f.dtype(torch::kLong);
    in.images = torch::empty(batch.prepared.sizes(), f);
    in.tokens = torch::empty({b, L}, i64);
    in.attention_mask = torch::empty({b, L}, i64);
    in.image_id = torch::empty({b}, i64);
    in.image_id_all = torch::empty({b * comm_.size()}, i64);
    if (rows > 0) {
      in.masked_ids = torch::empty({b, L}, i64);
      in.mlm_positions = torch::empty({rows}, i64);
      in.mlm_targets = torch::empty({rows}, i64);
    }
    in.lr = torch::empty({}, f);
    in.soft_weight = torch::empty({}, f);
    in.inject = torch::empty({}, f);
    in.offset = comm_.rank() * b;  // equal blocks: every rank takes full batches of b
  }
  const bool async = dev.is_cuda();
  in.images.copy_(batch.prepared, async);
  in.tokens.copy_(batch.tokens, async);
  in.attention_mask.copy_(batch.attention_mask, async);
  in.image_id.copy_(batch.image_id, async);
  in.image_id_all.copy_(
      comm_.size() == 1 ? batch.image_id : allgather_ids(comm_, host.image_id, dev), async);
  if (rows > 0) {
    in.masked_ids.copy_(to_device_async(masking.input_ids, dev), async);
    in.mlm_positions.copy_(to_device_async(masking.positions, dev), async);
    in.mlm_targets.copy_(to_device_async(masking.targets, dev), async);
  }
  const int64_t ramp =
      cfg_.loss.soft_warmup_steps < 0 ? uniform_steps_ : cfg_.loss.soft_warmup_steps;
  in.lr.fill_(last_lr_);
  in.soft_weight.fill_(cfg_.loss.soft_weight *
                       (ramp > 0 ? std::min(1.0, static_cast<double>(step_) / ramp) : 1.0));
  in.inject.fill_(fault::point("step.nan", step_) ? std::numeric_limits<double>::quiet_NaN() : 1.0);
  return in;
}

// The forward and the weighted loss of the local batch (fills the ITC inputs and result the
// cross-rank gradient needs); static_out_ gets the losses and this rank's finite flag.
torch::Tensor Trainer::static_forward(const StaticInputs& in, loss::ItcInputs& itc_in,
                                      loss::ItcResult& itc) {
  const model::AutocastCache cast_once(bf16());  // each weight cast to bf16 once per step
  torch::Tensor image_tokens, text_hidden, img, txt;
  std::vector<torch::Tensor> keys;
  {
    const model::Bf16Autocast autocast(bf16());
    image_tokens = model_->encode_image(in.images);
    text_hidden = model_->encode_text(in.tokens, in.attention_mask);
    img = model_->image_embed(image_tokens);
    txt = model_->text_embed(text_hidden);
    keys = model_->image_keys(image_tokens);
  }
  // ITC in fp32 against the global batch, as the eager step (step.cpp itc_inputs).
  itc_in.img = img.to(torch::kFloat);
  itc_in.txt = txt.to(torch::kFloat);
  std::tie(itc_in.img_all, itc_in.txt_all) = gather_embeddings(itc_in.img, itc_in.txt, nullptr);
  itc_in.offset = in.offset;
  itc_in.temp = model_->temp();
  itc_in.image_id = in.image_id;
  itc_in.image_id_all = in.image_id_all;
  itc_in.soft = cfg_.loss.soft_targets == negatives::SoftTargetsKind::kNone
                    ? loss::SoftTargets::kNone
                    : loss::SoftTargets::kPseudo;
  itc_in.soft_weight_t = in.soft_weight;
  itc_in.cross_rank_grad = comm_.size() > 1;
  itc = loss::itc_loss(itc_in);

  const int64_t b = in.image_id.size(0);
  const auto local = torch::indexing::Slice(in.offset, in.offset + b);
  const auto all = torch::indexing::Slice();
  const loss::ItmPairs pairs = loss::draw_itm_pairs(
      itc.sim_i2t.index({all, local}), itc.sim_t2i.index({all, local}), in.image_id, {}, {},
      loss::parse_itm_negative_mode(cfg_.loss.itm_negatives));
  torch::Tensor logits, mlm = torch::zeros({}, itc.loss.options());
  {
    const model::Bf16Autocast autocast(bf16());
    logits = model_->itm_logits(model_->fuse_cls(text_hidden, in.attention_mask, keys,
                                                 {pairs.text_index, pairs.image_index}));
    if (in.mlm_positions.defined()) {
      const torch::Tensor at_masked =
          model_->fuse_at(model_->encode_text(in.masked_ids, in.attention_mask), in.attention_mask,
                          keys, {}, in.mlm_positions);
      mlm = loss::padded_linear_cross_entropy(model_->mlm_hidden(at_masked),
                                              model_->mlm_decoder_weight(), model_->mlm_bias(),
                                              in.mlm_targets)
                .to(torch::kFloat);
    }
  }
  const torch::Tensor itm = loss::itm_loss(logits.to(torch::kFloat), pairs.labels, pairs.weight);
  const torch::Tensor total =
      (cfg_.loss.itc_weight * itc.loss + cfg_.loss.itm_weight * itm + cfg_.loss.mlm_weight * mlm) *
      in.inject;
  torch::NoGradGuard no_grad;
  static_out_.copy_(torch::stack({itc.loss.detach(), itm.detach(), mlm.detach(), total.detach(),
                                  total.detach().isfinite().to(torch::kFloat)}));
  return total;
}

void Trainer::static_device_step(const StaticInputs& in) {
  grads_->zero();
  loss::ItcInputs itc_in;
  loss::ItcResult itc;
  torch::Tensor total = static_forward(in, itc_in, itc);
  // Every rank takes the same decision: finite on all of them (a sum of flags), on the device.
  torch::Tensor finite = static_out_[kFinite].clone();
  if (comm_.size() > 1) {
    allreduce_sum(comm_, finite);
    finite = finite.eq(static_cast<double>(comm_.size())).to(torch::kFloat);
    static_out_[kFinite].copy_(finite);  // the window keeps the agreed decision
  }
  if (itc_in.cross_rank_grad) {  // the exact data-parallel ITC gradient (loss/itc.hpp)
    loss::ItcGatheredGrads g = loss::itc_gathered_grads(itc);
    sum_gathered_grads(g);
    total = total + cfg_.loss.itc_weight * loss::itc_cross_rank_term(itc_in, g);
  }
  backward_and_average(total);  // NaN gradients of a skipped step are never applied
  if (flagged_adamw_) {
    flagged_adamw_->step(in.lr, finite);
  } else if (finite.item<float>() != 0.0f) {  // the first step: it creates AdamW's state
    adamw_step(*optimizer_, *grads_, cfg_.optim.grad_clip);
  }
}

void Trainer::flush_static_losses() {
  if (static_rows_.empty()) return;
  const auto n = static_cast<int64_t>(static_rows_.size());
  const torch::Tensor host = static_window_.narrow(0, 0, n).to(torch::kCPU, torch::kDouble);
  const auto rows = host.accessor<double, 2>();
  std::vector<std::pair<int64_t, int64_t>> done;
  done.swap(static_rows_);
  for (int64_t i = 0; i < n; ++i) {
    telemetry_.add({rows[i][kItc], rows[i][kItm], rows[i][kMlm], rows[i][kTotal], {}},
                   done[static_cast<size_t>(i)].second);
    skips_.record(rows[i][kFinite] == 0.0, done[static_cast<size_t>(i)].first);
  }
}

}  // namespace fnvlp::train
