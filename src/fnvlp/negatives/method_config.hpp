#pragma once
// The config sections of the training methods (negatives/*_method.hpp), nested in the pretrain
// config (train/pretrain_config.hpp): each method reads its own section and nothing else.
// Kept free of libtorch so that every job's config parsing stays light.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace fnvlp::negatives {

// negatives.method: which method removes or reweighs the ITC negatives.
enum class NegativesKind { kNone, kGlofnd, kFnc, kSrcl };
inline const std::vector<std::pair<NegativesKind, const char*>>& enum_names(NegativesKind) {
  static const std::vector<std::pair<NegativesKind, const char*>> names = {
      {NegativesKind::kNone, "none"},
      {NegativesKind::kGlofnd, "glofnd"},
      {NegativesKind::kFnc, "fnc"},
      {NegativesKind::kSrcl, "srcl"}};
  return names;
}

// sampler.kind: how mini-batches are composed.
enum class SamplerKind { kUniform, kGrit, kFalcon };
inline const std::vector<std::pair<SamplerKind, const char*>>& enum_names(SamplerKind) {
  static const std::vector<std::pair<SamplerKind, const char*>> names = {
      {SamplerKind::kUniform, "uniform"},
      {SamplerKind::kGrit, "grit"},
      {SamplerKind::kFalcon, "falcon"}};
  return names;
}

// sampler.grit.schedule: the hardness quantile q of GRIT's grouping over the epochs.
enum class QSchedule { kFixed, kHardening, kSoftening };
inline const std::vector<std::pair<QSchedule, const char*>>& enum_names(QSchedule) {
  static const std::vector<std::pair<QSchedule, const char*>> names = {
      {QSchedule::kFixed, "fixed"},
      {QSchedule::kHardening, "hardening"},
      {QSchedule::kSoftening, "softening"}};
  return names;
}

// loss.soft_targets: where the soft part of the ITC (and MLM) targets comes from.
enum class SoftTargetsKind { kPseudo, kMomentum, kNone };
inline const std::vector<std::pair<SoftTargetsKind, const char*>>& enum_names(SoftTargetsKind) {
  static const std::vector<std::pair<SoftTargetsKind, const char*>> names = {
      {SoftTargetsKind::kPseudo, "pseudo"},
      {SoftTargetsKind::kMomentum, "momentum"},
      {SoftTargetsKind::kNone, "none"}};
  return names;
}

// GloFND (glofnd.txt §3, App. D.2): Adam on each anchor's λ. `alpha` is negatives.alpha.
struct GlofndOptions {
  double alpha = 0.01;  // fraction of an anchor's negatives treated as false negatives
  double lr = 0.05;
  double beta1 = 0.9;
  double beta2 = 0.98;
  double eps = 1e-8;
  double init = 1.0;  // λ starts at 1: nothing is filtered until λ has learned
  template <class V>
  void fields(V& v) {
    v("lr", lr);
    v("beta1", beta1);
    v("beta2", beta2);
    v("eps", eps);
    v("init", init);
  }
};

// SRCL (srcl.hpp): the frozen helper model H and its weight a, decayed linearly to 0.
struct SrclConfig {
  std::string helper;  // checkpoint dir of the helper (same model config); empty: a = 0
  double helper_weight = 1.0;
  template <class V>
  void fields(V& v) {
    v("helper", helper);
    v("helper_weight", helper_weight);
  }
};

// GRIT's fixed q and the q heuristics (falcon.txt §3.1).
struct GritConfig {
  QSchedule schedule = QSchedule::kFixed;
  double q = 1.0;       // fixed: 1 = GRIT's most similar, 0.5, 0 = least similar
  double q_start = -1;  // schedules; -1: hardening 0 -> 1, softening 1 -> 0
  double q_end = -1;
  template <class V>
  void fields(V& v) {
    v("schedule", schedule);
    v("q", q);
    v("q_start", q_start);
    v("q_end", q_end);
  }
};

// FALCON's scheduler (falcon.txt §3.2-3.3, App. C.1 Alg. 2, Table 5).
struct FalconConfig {
  int64_t quantiles = 100;  // m
  int64_t hidden = 256;
  int64_t blocks = 2;  // residual blocks
  double min_concentration = 0.01;
  double lr = 1e-4;
  double beta1 = 0.9, beta2 = 0.999;
  double weight_decay = 0.01;
  bool instance_level = true;  // false: one q per batch (ablation)
  bool baseline = true;        // running-mean baseline in the advantage
  double baseline_decay = 0.9;
  uint64_t init_seed = 0;  // policy initialisation: train.seed (identical on every rank)

  void validate() const;
  template <class V>
  void fields(V& v) {
    v("quantiles", quantiles);
    v("hidden", hidden);
    v("blocks", blocks);
    v("min_concentration", min_concentration);
    v("lr", lr);
    v("beta1", beta1);
    v("beta2", beta2);
    v("weight_decay", weight_decay);
    v("instance_level", instance_level);
    v("baseline", baseline);
    v("baseline_decay", baseline_decay);
  }
};

// TCL (loss/tcl.hpp): intra-modal contrast of two views (IMC) and global-local mutual
// information (LMI), added with these weights; grid: pooled patch grid for LMI.
struct TclConfig {
  bool enabled = false;
  double imc_weight = 1.0;
  double lmi_weight = 1.0;
  int64_t grid = 4;
  template <class V>
  void fields(V& v) {
    v("enabled", enabled);
    v("imc_weight", imc_weight);
    v("lmi_weight", lmi_weight);
    v("grid", grid);
  }
};

}  // namespace fnvlp::negatives
