#include "fnvlp/train/methods.hpp"

#include <algorithm>

#include "fnvlp/negatives/falcon_method.hpp"
#include "fnvlp/negatives/fnc_method.hpp"
#include "fnvlp/negatives/glofnd_method.hpp"
#include "fnvlp/negatives/grit_method.hpp"
#include "fnvlp/negatives/momentum_method.hpp"
#include "fnvlp/negatives/oracle_method.hpp"
#include "fnvlp/negatives/srcl_method.hpp"
#include "fnvlp/negatives/tcl_method.hpp"

namespace fnvlp::train {

using negatives::NegativesKind;
using negatives::SamplerKind;
using negatives::SoftTargetsKind;

// Momentum distillation refuses negatives.method (glofnd, fnc, srcl, oracle): their masks and
// weights are [b, N] over the gathered columns, and with a queue most columns are momentum features
// of earlier steps. GloFND's λ is a per-anchor quantile of the current model's similarities (the
// one exported with the embeddings and checked by simstat); learned over lagging momentum keys it
// would estimate another distribution. SRCL needs the helper's similarity for every column, which
// queue entries do not have, and the FN telemetry needs their labels. FNC would run, but removing
// top-ranked keys from the denominator fights the momentum soft targets, which put mass on
// exactly those keys (ALBEF §3.3: soft targets are how ALBEF handles false negatives). Extending
// them means deciding these questions, not only padding the masks, so the combination is an
// error rather than a silent half-measure.
void validate_methods(const PretrainConfig& cfg) {
  config::check(cfg);  // every field's range (a config built in code skips the loader's check)
  if (cfg.loss.soft_targets == SoftTargetsKind::kMomentum) {
    FNVLP_CHECK(cfg.negatives.method == NegativesKind::kNone,
                "loss.soft_targets=momentum cannot be combined with negatives.method="
                    << config::enum_to_name(cfg.negatives.method)
                    << ": the methods' masks and weights are defined on the current model's "
                       "similarities of the global batch, not on momentum keys and queue entries "
                       "(see validate_methods in train/methods.cpp); use "
                       "loss.soft_targets=pseudo or none with them");
  }
  if (cfg.sampler.kind != SamplerKind::kUniform &&
      cfg.sampler.embeddings == SamplerEmbeddings::kRefresh)
    // Grouped epochs read the previous epoch's embeddings; a resumed run reads them back from
    // embeddings/epoch-EEE.h5, so they must be exported.
    FNVLP_CHECK(cfg.train.export_embeddings,
                "sampler.kind=" << config::enum_to_name(cfg.sampler.kind)
                                << " with sampler.embeddings=refresh needs "
                                   "train.export_embeddings=true (grouped epochs use the previous "
                                   "epoch's export, and a resume reads it back); "
                                   "sampler.embeddings=cached needs no export");
  if (cfg.negatives.method == NegativesKind::kGlofnd && cfg.negatives.glofnd.exact_init)
    FNVLP_CHECK(cfg.train.export_embeddings,
                "negatives.glofnd.exact_init needs train.export_embeddings=true (the exact "
                "quantiles are computed from the previous epoch's export)");
  if (cfg.sampler.kind == SamplerKind::kFalcon)
    FNVLP_CHECK(cfg.loss.mlm_weight != 0,
                "sampler.kind=falcon needs the MLM loss (loss.mlm_weight != 0): its reward is the "
                "drop of L_MLM over the step (falcon.txt §3.3)");
}

void require_labels(const Comm& comm, const data::PairDataset& ds, const data::PairRange& block) {
  std::vector<int64_t> ids(static_cast<size_t>(block.size())), image_id;
  for (int64_t p = block.begin; p < block.end; ++p) ids[static_cast<size_t>(p - block.begin)] = p;
  std::vector<int32_t> label;
  ds.ids(ids, &image_id, &label);
  int64_t missing = 0, first = ds.num_pairs();
  for (size_t i = 0; i < label.size(); ++i)
    if (label[i] < 0) first = std::min(first, ids[i]), ++missing;
  missing = comm.allreduce_sum(missing);
  first = comm.allreduce_min(first);
  FNVLP_CHECK(missing == 0,
              "negatives.method=oracle needs every pair's class label, but "
                  << missing << " of the " << ds.num_pairs() << " pairs of " << ds.dir()
                  << " have none (label -1; the first: pair_id " << first
                  << "): the oracle is defined on labelled data only (fnvlp-synth's classes)");
}

std::vector<std::unique_ptr<negatives::Method>> make_methods(const PretrainConfig& cfg,
                                                             const negatives::MethodEnv& env) {
  validate_methods(cfg);
  std::vector<std::unique_ptr<negatives::Method>> out;
  if (cfg.loss.soft_targets == SoftTargetsKind::kMomentum)
    out.push_back(
        std::make_unique<negatives::MomentumMethod>(env, cfg.loss.momentum, cfg.loss.queue_size));
  const NegativesConfig& nc = cfg.negatives;
  switch (nc.method) {
    case NegativesKind::kGlofnd:
      out.push_back(
          std::make_unique<negatives::GlofndMethod>(env, nc.alpha, nc.start_epoch, nc.glofnd));
      break;
    case NegativesKind::kFnc:
      out.push_back(std::make_unique<negatives::FncMethod>(env, nc.alpha, nc.start_epoch));
      break;
    case NegativesKind::kSrcl:
      out.push_back(std::make_unique<negatives::SrclMethod>(env, nc.srcl));
      break;
    case NegativesKind::kOracle:
      out.push_back(std::make_unique<negatives::OracleMethod>(env, nc.start_epoch));
      break;
    case NegativesKind::kNone:
      break;
  }
  const SamplerConfig& sc = cfg.sampler;
  if (sc.kind == SamplerKind::kGrit)
    out.push_back(std::make_unique<negatives::GritMethod>(env, sc.search_space, sc.grit));
  if (sc.kind == SamplerKind::kFalcon)
    out.push_back(std::make_unique<negatives::FalconMethod>(env, sc.search_space, sc.falcon));
  if (cfg.loss.tcl.enabled)
    out.push_back(std::make_unique<negatives::TclMethod>(env, cfg.loss.tcl));
  return out;
}

}  // namespace fnvlp::train
