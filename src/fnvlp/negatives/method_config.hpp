#pragma once
// The config sections of the training methods (negatives/*_method.hpp), nested in the pretrain
// config (train/pretrain_config.hpp): each method reads its own section and nothing else.
// Kept free of libtorch so that every job's config parsing stays light.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fnvlp/core/config_fields.hpp"

namespace fnvlp::negatives {

// negatives.method: which method removes or reweighs the ITC negatives. oracle removes exactly the
// negatives sharing the anchor's class label (labelled data only): the most any filter can remove.
FNVLP_CONFIG_ENUM(NegativesKind, (kNone, "none"), (kGlofnd, "glofnd"), (kFnc, "fnc"),
                  (kSrcl, "srcl"), (kOracle, "oracle"))

// sampler.kind: how mini-batches are composed.
FNVLP_CONFIG_ENUM(SamplerKind, (kUniform, "uniform"), (kGrit, "grit"), (kFalcon, "falcon"))

// sampler.grit.schedule: the hardness quantile q of GRIT's grouping over the epochs.
FNVLP_CONFIG_ENUM(QSchedule, (kFixed, "fixed"), (kHardening, "hardening"),
                  (kSoftening, "softening"))

// loss.soft_targets: where the soft part of the ITC (and MLM) targets comes from.
FNVLP_CONFIG_ENUM(SoftTargetsKind, (kPseudo, "pseudo"), (kMomentum, "momentum"), (kNone, "none"))

// negatives.glofnd.bias_correction: the t of Adam's 1 − β^t. visit: the anchor's own update count
// (an anchor is updated about once per epoch); epoch: the training epoch + 1 for every anchor, as
// the GloFND authors' code does (their first step from epoch 15 is about 0.46 lr, visit's 1.0 lr).
FNVLP_CONFIG_ENUM(GlofndBiasCorrection, (kVisit, "visit"), (kEpoch, "epoch"))

// negatives.glofnd.reanchor_moments: what a re-anchor (exact_init, reanchor_every) does to Adam's
// moments. reset: zero (the step after a restart then moves λ by ±lr); keep: as they were.
FNVLP_CONFIG_ENUM(GlofndReanchorMoments, (kReset, "reset"), (kKeep, "keep"))

// GloFND (glofnd.txt §3, App. D.2): Adam on each anchor's λ. `alpha` is negatives.alpha.
struct GlofndOptions {
  double alpha = 0.01;  // fraction of an anchor's negatives treated as false negatives
  // clang-format off
  FNVLP_CONFIG_FIELDS(
      (double, lr, 0.05, config::at_least(0)),
      (double, beta1, 0.9, config::half_open(0, 1)),
      (double, beta2, 0.98, config::half_open(0, 1)),
      (double, eps, 1e-8, config::above(0)),
      (double, init, 1.0),  // λ starts at 1: nothing is filtered until λ has learned
      // Beyond the paper: at negatives.start_epoch, λ starts from the exact (1−α)-quantile of each
      // anchor over the whole dataset (the previous epoch's export, streamed), moments and counts
      // from zero; Adam tracks it from there. reanchor_every K > 0: again every K epochs after.
      (bool, exact_init, false),
      (int64_t, reanchor_every, 0, config::at_least(0)),
      (GlofndBiasCorrection, bias_correction, GlofndBiasCorrection::kVisit),
      (GlofndReanchorMoments, reanchor_moments, GlofndReanchorMoments::kReset))
  // clang-format on
};

// SRCL (srcl.hpp): the frozen helper model H and its weight a, decayed linearly to 0.
struct SrclConfig {
  // clang-format off
  FNVLP_CONFIG_FIELDS(
      (std::string, helper, ),  // checkpoint dir of the helper (same model config); empty: a = 0
      (double, helper_weight, 1.0, config::at_least(0)))
  // clang-format on
};

// GRIT's fixed q and the q heuristics (falcon.txt §3.1).
struct GritConfig {
  // clang-format off
  FNVLP_CONFIG_FIELDS(
      (QSchedule, schedule, QSchedule::kFixed),
      // fixed: 1 = GRIT's most similar, 0.5, 0 = least similar
      (double, q, 1.0, config::within(0, 1)),
      // schedules; -1: hardening 0 -> 1, softening 1 -> 0
      (double, q_start, -1, config::within(-1, 1)),
      (double, q_end, -1, config::within(-1, 1)))
  // clang-format on
};

// FALCON's scheduler (falcon.txt §3.2-3.3, App. C.1 Alg. 2, Table 5).
struct FalconConfig {
  uint64_t init_seed = 0;  // policy initialisation: train.seed (identical on every rank)

  void validate() const;
  // clang-format off
  FNVLP_CONFIG_FIELDS(
      (int64_t, quantiles, 100, config::at_least(2)),  // m
      (int64_t, hidden, 256, config::at_least(1)),
      (int64_t, blocks, 2, config::at_least(0)),  // residual blocks
      (double, min_concentration, 0.01, config::above(0)),
      (double, lr, 1e-4, config::at_least(0)),
      (double, beta1, 0.9, config::half_open(0, 1)),
      (double, beta2, 0.999, config::half_open(0, 1)),
      (double, weight_decay, 0.01, config::at_least(0)),
      (bool, instance_level, true),  // false: one q per batch (ablation)
      (bool, baseline, true),  // running-mean baseline in the advantage
      (double, baseline_decay, 0.9, config::within(0, 1)))
  // clang-format on
};

// TCL (loss/tcl.hpp): intra-modal contrast of two views (IMC) and global-local mutual
// information (LMI), added with these weights; grid: pooled patch grid for LMI.
struct TclConfig {
  // clang-format off
  FNVLP_CONFIG_FIELDS(
      (bool, enabled, false),
      (double, imc_weight, 1.0, config::at_least(0)),
      (double, lmi_weight, 1.0, config::at_least(0)),
      (int64_t, grid, 4, config::at_least(1)))
  // clang-format on
};

}  // namespace fnvlp::negatives
