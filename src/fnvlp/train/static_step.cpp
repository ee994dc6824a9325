// The static training step (train.static_step, train.cuda_graphs): the eager step of step.cpp with
// every shape fixed from one step to the next and nothing read back from the device, so that CUDA
// graphs can capture it once and replay it (train/step_graphs.hpp). What differs from the eager
// step, and why:
//   - the inputs are copied into tensors at fixed addresses (StaticInputs), refilled each step,
//     and so are the methods' own (Method::stage: GloFND's anchors, SRCL's helper weight);
//   - the graph's key: MLM's padded row count and what each method's device work depends on
//     (Method::static_key: GloFND's rounds, whether a filter is active yet), agreed over the
//     ranks (the maximum of each entry), so that every rank captures and replays the same
//     sequence of collectives;
//   - MLM's masked positions, drawn on the host as in the eager step, are padded to a multiple of
//     kMlmRowMultiple with ignored rows (loss/mlm.hpp pad_positions), up to the agreed count;
//   - ITM's hard negatives are drawn on the device (loss/itm.hpp draw_itm_pairs: ALBEF's
//     distribution, 3b pairs always, weight 0 for a row without a candidate) from the default
//     generator, which begin_step seeds per step; the image pass and then the MLM passes draw
//     their dropout first from that stream (no reseed in the middle of a step, which a graph
//     cannot replay), so that a pass of the updated model reseeded the same way repeats their
//     masks (FALCON's reward, Method::after_update, a graph of its own);
//   - the finite-loss decision is a device flag (all ranks: an all-reduce; a method's invalid
//     input, such as a non-finite SRCL weight, clears it too) handed to the optimizer, which
//     skips the update on it (FlaggedAdamW), and to the methods, whose state changes follow it
//     (Method::commit); a NaN injected by the fault knobs multiplies the loss on the device;
//   - the losses stay on the device, read once per log line (flush_static_losses), which is also
//     where a run of non-finite steps is counted; the methods' telemetry likewise.
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
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

using negatives::StepContext;
using negatives::StepPosition;

namespace {
// Padded MLM rows come in multiples of this: a run of ~15% masking over ~20-token captions sees a
// few row counts (one graph each), and a padded row costs one vocabulary row-product.
constexpr int64_t kMlmRowMultiple = 64;
// static_.out's columns; the methods' extra losses follow.
enum StaticOut : int64_t { kItc, kItm, kMlm, kTotal, kFinite, kStaticOutSize };
}  // namespace

StaticStepState::StaticStepState() = default;
StaticStepState::~StaticStepState() = default;

void Trainer::init_static_step() {
  static_.on = cfg_.train.static_step || cfg_.train.cuda_graphs;
  if (!static_.on) return;
  // The same configuration on every rank: the same refusal everywhere.
  if (const std::string why = static_step_refusal(); !why.empty())
    throw UsageError("train.static_step / train.cuda_graphs: " + why);
  for (const auto& m : methods_)
    for (const auto& n : m->extra_loss_names()) static_.extra_names.push_back(n);
  const auto columns = kStaticOutSize + static_cast<int64_t>(static_.extra_names.size());
  const auto f = torch::TensorOptions().dtype(torch::kFloat).device(devices_.device());
  static_.out = torch::zeros({columns}, f);
  static_.window = torch::zeros({cfg_.train.log_every, columns}, f);
  if (cache_.enabled())
    static_.cache_rows = torch::zeros({2, cfg_.train.batch_size, cfg_.model.embed_dim}, f);
  bool graphs = cfg_.train.cuda_graphs;
  // Over MPI the captured collectives run from CUDA's host-node thread (comm/tensors.hpp), which
  // needs MPI's multiple thread level (Comm::threads_multiple): without it, no graphs.
  if (graphs && comm_.size() > 1 && !devices_.nccl && !comm_.all_ok(comm_.threads_multiple())) {
    graphs = false;
    if (comm_.is_root())
      spdlog::warn(
          "pretrain: train.cuda_graphs at {} ranks over MPI needs the MPI library's multiple "
          "thread level, which this one does not provide: the static step runs without CUDA graphs "
          "(NCCL with one GPU per rank captures its collectives)",
          comm_.size());
  }
  static_.graphs = std::make_unique<StepGraphs>(graphs, "the step");
  static_.update_graphs = std::make_unique<StepGraphs>(graphs, "the pass after the update");
  if (comm_.is_root()) {
    std::string methods;
    for (const auto& m : methods_) methods += (methods.empty() ? "" : ", ") + m->name();
    spdlog::info("pretrain: static step{}{}", graphs ? ", CUDA graphs" : "",
                 methods.empty() ? "" : " with " + methods);
  }
}

std::string Trainer::static_step_refusal() const {
  if (cfg_.train.cuda_graphs && !devices_.device().is_cuda())
    return "train.cuda_graphs needs train.device=cuda (the device is " + devices_.device().str() +
           ")";
  return "";
}

int64_t Trainer::static_key_id(const std::vector<int64_t>& key) {
  const auto [it, fresh] =
      static_.key_ids.emplace(key, static_cast<int64_t>(static_.key_ids.size()));
  if (fresh) {  // every rank's log: the ranks' sequences of shapes are the same
    std::ostringstream os;
    os << "MLM rows " << key[0];
    size_t at = 1;
    for (size_t k = 0; k < methods_.size(); ++k)
      for (size_t i = 0; i < static_.key_sizes[k]; ++i)
        os << ", " << methods_[k].name() << " " << key[at++];
    spdlog::info("pretrain: static step shapes {}: {}", it->second, os.str());
  }
  return it->second;
}

void Trainer::static_train_step(const data::Batch& host_batch) {
  begin_step(host_batch);  // learning rate, the step's seed (dropout and ITM draws), faults
  const data::Batch batch = devices_.upload.finish(host_batch);
  const StepPosition at{step_, epoch_, total_steps_};
  // The key: MLM's rows and the methods' entries, every rank's maximum.
  loss::MlmMasking masking;
  std::vector<int64_t> key = {0};
  if (cfg_.loss.mlm_weight != 0) {  // drawn on the host as the eager step draws them
    auto gen = negatives::step_generator(seed(), step_, comm_.rank(), negatives::kMlmStream);
    const data::SpecialTokens& special = data_.train.special_tokens();
    masking = loss::mask_tokens(host_batch.tokens, host_batch.attention_mask,
                                cfg_.loss.mlm_probability, cfg_.model.vocab_size, special.mask,
                                {special.pad, special.cls, special.sep}, gen, torch::kCPU);
    key[0] = loss::padded_rows(masking.positions.size(0), kMlmRowMultiple,
                               host_batch.size() * host_batch.tokens.size(1));
  }
  static_.key_sizes.clear();
  for (auto& m : methods_) {
    const std::vector<int64_t> part = m->static_key(host_batch, at);
    static_.key_sizes.push_back(part.size());
    key.insert(key.end(), part.begin(), part.end());
  }
  if (comm_.size() > 1) comm_.allreduce_max(key);
  if (key[0] > 0) masking = loss::pad_positions(masking, key[0]);
  StaticInputs& in = stage_static_inputs(batch, host_batch, masking, key[0]);
  size_t offset = 1;
  for (size_t i = 0; i < methods_.size(); ++i) {
    const auto first = key.begin() + static_cast<std::ptrdiff_t>(offset);
    offset += static_.key_sizes[i];
    methods_[i].stage(
        host_batch, at,
        std::vector<int64_t>(first, key.begin() + static_cast<std::ptrdiff_t>(offset)));
  }
  telemetry_.record_batch(host_batch);
  clock_.lap(StepClock::kBatch);
  if (!optim_.flagged && FlaggedAdamW::ready(*optim_.adamw))
    optim_.flagged =
        std::make_unique<FlaggedAdamW>(*optim_.adamw, *optim_.grads, cfg_.optim.grad_clip);
  // Graphs once the optimizer's state exists (the first step creates it, reading the flag).
  const int64_t id = static_key_id(key);
  if (optim_.flagged)
    run_graph(*static_.graphs, id, [&] { static_device_step(in); });
  else
    static_device_step(in);
  for (auto& m : methods_)
    if (m->wants_after_update(at)) {
      // The step's dropout stream again from its start (see the header).
      negatives::seed_dropout(seed(), step_, comm_.rank());
      run_graph(*static_.update_graphs, id, [&] { static_after_update(in, *m); });
    }
  for (auto& m : methods_) m->after_device_step(at);
  if (static_.rows.size() == static_cast<size_t>(static_.window.size(0))) flush_static_losses();
  static_.window[static_cast<int64_t>(static_.rows.size())].copy_(static_.out);
  static_.rows.emplace_back(step_, host_batch.size() * comm_.size());
  if (cache_.enabled()) {
    static_.cache_window.push_back(static_.cache_rows.clone());
    static_.cache_ids.push_back(host_batch.pair_id);
  }
  clock_.lap(StepClock::kForward);  // the whole device step: forward, backward, optimizer
}

void Trainer::run_graph(StepGraphs& graphs, int64_t id, const std::function<void()>& work) {
  const CommTraffic before = traffic();
  const int64_t captured = graphs.graphs(), replays = graphs.replays();
  graphs.run(id, work);
  if (graphs.replays() == replays) return;  // run eagerly: its collectives counted themselves
  // A replay runs no host code: its collectives' bytes are those its capture counted, and NCCL
  // watches the replay as a whole.
  auto& per_graph = static_.graph_traffic[{&graphs, id}];
  if (graphs.graphs() > captured)
    per_graph = traffic() - before;
  else
    static_.replayed_traffic += per_graph;
  if (devices_.nccl) devices_.nccl->watch_stream("a replay of the step's CUDA graph");
}

StaticInputs& Trainer::stage_static_inputs(const data::Batch& batch, const data::Batch& host,
                                           const loss::MlmMasking& masking, int64_t rows) {
  const int64_t b = host.size(), L = host.tokens.size(1), n = b * comm_.size();
  const torch::Device dev = devices_.device();
  StaticInputs& in = static_.inputs[rows];
  const bool pair_ids = methods_.any(&negatives::Method::needs_pair_ids);
  const bool second_view = methods_.any(&negatives::Method::wants_second_view);
  if (!in.images.defined()) {
    const auto f = torch::TensorOptions().dtype(torch::kFloat).device(dev);
    const auto i64 = f.dtype(torch::kLong);
    in.images = torch::empty(batch.prepared.sizes(), f);
    if (second_view) in.images2 = torch::empty(batch.prepared.sizes(), f);
    in.tokens = torch::empty({b, L}, i64);
    in.attention_mask = torch::empty({b, L}, i64);
    in.image_id = torch::empty({b}, i64);
    in.label = torch::empty({b}, i64);
    in.image_id_all = torch::empty({n}, i64);
    in.label_all = torch::empty({n}, i64);
    if (pair_ids) {
      in.pair_id = torch::empty({b}, i64);
      in.pair_id_all = torch::empty({n}, i64);
    }
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
  if (in.images2.defined()) {
    FNVLP_CHECK(batch.prepared2.defined(), "static step: the loader made no second view");
    in.images2.copy_(batch.prepared2, async);
  }
  in.tokens.copy_(batch.tokens, async);
  in.attention_mask.copy_(batch.attention_mask, async);
  in.image_id.copy_(batch.image_id, async);
  in.label.copy_(batch.label, async);
  if (in.pair_id.defined()) in.pair_id.copy_(batch.pair_id, async);
  // The global columns' ids in one exchange on the host, rank by rank.
  std::vector<torch::Tensor> mine = {host.image_id, host.label};
  if (in.pair_id.defined()) mine.push_back(host.pair_id);
  const auto k = static_cast<int64_t>(mine.size());
  torch::Tensor all = torch::cat(mine).to(torch::kLong);
  if (comm_.size() > 1) all = allgather_ids(comm_, all, torch::kCPU);
  const torch::Tensor per_rank = all.view({comm_.size(), k, b});
  stage_into(in.image_id_all, per_rank.select(1, 0).reshape({-1}));
  stage_into(in.label_all, per_rank.select(1, 1).reshape({-1}));
  if (in.pair_id_all.defined()) stage_into(in.pair_id_all, per_rank.select(1, 2).reshape({-1}));
  if (rows > 0) {
    stage_into(in.masked_ids, masking.input_ids);
    stage_into(in.mlm_positions, masking.positions);
    stage_into(in.mlm_targets, masking.targets);
  }
  const int64_t ramp =
      cfg_.loss.soft_warmup_steps < 0 ? methods_.uniform_steps : cfg_.loss.soft_warmup_steps;
  in.lr.fill_(last_lr_);
  in.soft_weight.fill_(cfg_.loss.soft_weight *
                       (ramp > 0 ? std::min(1.0, static_cast<double>(step_) / ramp) : 1.0));
  in.inject.fill_(fault::point("step.nan", step_) ? std::numeric_limits<double>::quiet_NaN() : 1.0);
  return in;
}

// The methods' view of the staged step: the device batch, no host batch, no step or epoch (a
// captured step must not depend on them: what it does depend on is in the key).
StepContext Trainer::static_context(const StaticInputs& in, data::Batch& dev,
                                    const data::Batch& no_host) {
  dev.prepared = in.images;
  dev.prepared2 = in.images2;
  dev.tokens = in.tokens;
  dev.attention_mask = in.attention_mask;
  dev.image_id = in.image_id;
  dev.label = in.label;
  dev.pair_id = in.pair_id;
  StepContext s{dev, no_host, clock_, -1, -1, total_steps_};
  s.static_step = true;
  s.images = in.images;
  s.images2 = in.images2;
  s.image_id_all = in.image_id_all;
  s.label_all = in.label_all;
  s.pair_id_all = in.pair_id_all;
  s.soft_weight_t = in.soft_weight;
  s.masking.input_ids = in.masked_ids;
  s.masking.positions = in.mlm_positions;
  s.masking.targets = in.mlm_targets;
  s.want_plain_mlm = methods_.any(&negatives::Method::needs_plain_mlm);
  return s;
}

// The forward and the weighted loss of the local batch (fills the ITC inputs and result the
// cross-rank gradient needs); static_.out gets the losses and this rank's finite flag.
torch::Tensor Trainer::static_forward(const StaticInputs& in, StepContext& s,
                                      loss::ItcInputs& itc_in, loss::ItcResult& itc) {
  const model::AutocastCache cast_once(bf16());  // each weight cast to bf16 once per step
  std::vector<torch::Tensor> keys;
  torch::Tensor at_masked;
  {
    const model::Bf16Autocast autocast(bf16());
    s.image_tokens = model_->encode_image(in.images);
    keys = model_->image_keys(s.image_tokens);
    // The MLM passes second, right after the image pass (see the header: dropout order).
    if (in.mlm_positions.defined())
      at_masked = model_->fuse_at(model_->encode_text(in.masked_ids, in.attention_mask),
                                  in.attention_mask, keys, {}, in.mlm_positions);
    s.text_hidden = model_->encode_text(in.tokens, in.attention_mask);
    s.img = model_->image_embed(s.image_tokens);
    s.txt = model_->text_embed(s.text_hidden);
  }
  // ITC in fp32 against the global batch, as the eager step (step.cpp itc_inputs).
  s.img = s.img.to(torch::kFloat);
  s.txt = s.txt.to(torch::kFloat);
  if (static_.cache_rows.defined())
    static_.cache_rows.copy_(torch::stack({s.img.detach(), s.txt.detach()}));
  s.temp = model_->temp();
  bool built = false;
  for (auto& m : methods_) built = built || m->build_itc(s, itc_in);
  if (!built) {
    itc_in.img = s.img;
    itc_in.txt = s.txt;
    std::tie(itc_in.img_all, itc_in.txt_all) = gather_embeddings(s.img, s.txt, nullptr);
    itc_in.offset = in.offset;
    itc_in.temp = s.temp;
    itc_in.image_id = in.image_id;
    itc_in.image_id_all = in.image_id_all;
    itc_in.soft = cfg_.loss.soft_targets == negatives::SoftTargetsKind::kNone
                      ? loss::SoftTargets::kNone
                      : loss::SoftTargets::kPseudo;
    itc_in.soft_weight_t = in.soft_weight;
    itc_in.cross_rank_grad = comm_.size() > 1;
  }
  itc_in.check_on_device = true;
  s.negative = itc_in.image_id.unsqueeze(1) != itc_in.image_id_all.unsqueeze(0);
  for (auto& m : methods_) m->adjust_itc(s, itc_in);
  itc = loss::itc_loss(itc_in);

  const int64_t b = in.image_id.size(0);
  const auto local = torch::indexing::Slice(itc_in.offset, itc_in.offset + b);
  const auto all = torch::indexing::Slice();
  torch::Tensor excl_i2t, excl_t2i;
  if (cfg_.negatives.filter_itm && itc_in.exclude_i2t.defined() && !itc_in.momentum_keys) {
    excl_i2t = itc_in.exclude_i2t.index({all, local});
    excl_t2i = itc_in.exclude_t2i.index({all, local});
  }
  const loss::ItmPairs pairs = loss::draw_itm_pairs(
      itc.sim_i2t.index({all, local}), itc.sim_t2i.index({all, local}), in.image_id, excl_i2t,
      excl_t2i, loss::parse_itm_negative_mode(cfg_.loss.itm_negatives));
  torch::Tensor logits, mlm = torch::zeros({}, itc.loss.options());
  {
    const model::Bf16Autocast autocast(bf16());
    logits = model_->itm_logits(model_->fuse_cls(s.text_hidden, in.attention_mask, keys,
                                                 {pairs.text_index, pairs.image_index}));
    if (at_masked.defined()) {
      torch::Tensor l;
      for (auto& m : methods_)
        if (l = m->mlm_loss(s, at_masked); l.defined()) break;
      if (!l.defined()) {
        l = loss::padded_linear_cross_entropy(model_->mlm_hidden(at_masked),
                                              model_->mlm_decoder_weight(), model_->mlm_bias(),
                                              in.mlm_targets);
        if (s.want_plain_mlm) s.mlm_plain_t = l.detach().to(torch::kFloat);
      }
      mlm = l.to(torch::kFloat);
    }
  }
  const torch::Tensor itm = loss::itm_loss(logits.to(torch::kFloat), pairs.labels, pairs.weight);
  torch::Tensor total =
      cfg_.loss.itc_weight * itc.loss + cfg_.loss.itm_weight * itm + cfg_.loss.mlm_weight * mlm;
  std::vector<negatives::NamedLoss> extra;  // the methods' own losses (TCL)
  for (auto& m : methods_) m->extra_losses(s, extra);
  FNVLP_CHECK(extra.size() == static_.extra_names.size(),
              "static step: the methods added " << extra.size() << " losses, they named "
                                                << static_.extra_names.size());
  for (const auto& e : extra) total = total + e.weight * e.value;
  total = total * in.inject;
  torch::NoGradGuard no_grad;
  torch::Tensor finite = total.detach().isfinite();
  if (itc.inputs_ok.defined()) finite = finite & itc.inputs_ok;
  std::vector<torch::Tensor> out = {itc.loss.detach(), itm.detach(), mlm.detach(), total.detach(),
                                    finite.to(torch::kFloat)};
  for (const auto& e : extra) out.push_back(e.value.detach().to(torch::kFloat));
  static_.out.copy_(torch::stack(out));
  return total;
}

void Trainer::static_device_step(const StaticInputs& in) {
  optim_.grads->zero();
  data::Batch dev;
  const data::Batch no_host;
  StepContext s = static_context(in, dev, no_host);
  loss::ItcInputs itc_in;
  loss::ItcResult itc;
  torch::Tensor total = static_forward(in, s, itc_in, itc);
  // Every rank takes the same decision: finite on all of them (a sum of flags), on the device.
  torch::Tensor finite = static_.out[kFinite].clone();
  if (comm_.size() > 1) {
    allreduce_sum(comm_, finite);
    finite = finite.eq(static_cast<double>(comm_.size())).to(torch::kFloat);
    static_.out[kFinite].copy_(finite);  // the window keeps the agreed decision
  }
  if (itc_in.cross_rank_grad) {  // the exact data-parallel ITC gradient (loss/itc.hpp)
    loss::ItcGatheredGrads g = loss::itc_gathered_grads(itc);
    sum_gathered_grads(g);
    total = total + cfg_.loss.itc_weight * loss::itc_cross_rank_term(itc_in, g);
  }
  backward_and_average(total);  // NaN gradients of a skipped step are never applied
  if (optim_.flagged) {
    optim_.flagged->step(in.lr, finite);
  } else if (finite.item<float>() != 0.0f) {  // the first step: it creates AdamW's state
    adamw_step(*optim_.adamw, *optim_.grads, cfg_.optim.grad_clip);
  }
  s.finite = finite;
  torch::NoGradGuard no_grad;
  for (auto& m : methods_) m->commit(s);
}

void Trainer::static_after_update(const StaticInputs& in, negatives::Method& method) {
  data::Batch dev;
  const data::Batch no_host;
  StepContext s = static_context(in, dev, no_host);
  method.after_update(s);
}

void Trainer::flush_static_losses() {
  if (!static_.cache_window.empty()) {  // the training passes' embeddings into the cache
    const torch::Tensor rows = torch::stack(static_.cache_window).to(torch::kCPU);
    for (size_t i = 0; i < static_.cache_ids.size(); ++i) {
      const torch::Tensor r = rows[static_cast<int64_t>(i)];
      cache_.record(static_.cache_ids[i], r[0], r[1]);
    }
    static_.cache_window.clear();
    static_.cache_ids.clear();
  }
  if (static_.rows.empty()) return;
  const auto n = static_cast<int64_t>(static_.rows.size());
  const torch::Tensor host = static_.window.narrow(0, 0, n).to(torch::kCPU, torch::kDouble);
  const auto rows = host.accessor<double, 2>();
  std::vector<std::pair<int64_t, int64_t>> done;
  done.swap(static_.rows);
  for (int64_t i = 0; i < n; ++i) {
    StepLosses l{rows[i][kItc], rows[i][kItm], rows[i][kMlm], rows[i][kTotal], {}};
    for (size_t e = 0; e < static_.extra_names.size(); ++e)
      l.extra.emplace_back(static_.extra_names[e],
                           rows[i][kStaticOutSize + static_cast<int64_t>(e)]);
    telemetry_.add(l, done[static_cast<size_t>(i)].second);
    skips_.record(rows[i][kFinite] == 0.0, done[static_cast<size_t>(i)].first);
  }
}

}  // namespace fnvlp::train
