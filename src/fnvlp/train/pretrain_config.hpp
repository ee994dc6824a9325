#pragma once
// The typed configuration of fnvlp-pretrain: jobs/configs/*.yaml + --set overrides resolve into
// this struct (core/config.hpp); keys follow ALBEF's config names where one exists.
#include <cstdint>
#include <string>
#include <vector>

#include "fnvlp/core/config.hpp"
#include "fnvlp/data/augment.hpp"
#include "fnvlp/model/model_config.hpp"
#include "fnvlp/negatives/method_config.hpp"
#include "fnvlp/store/checkpoint.hpp"
#include "fnvlp/train/watchdog.hpp"

namespace fnvlp::train {

struct OptimConfig {
  double lr = 1e-4;  // ALBEF pretrain: 1e-4 peak, cosine to 1e-5, AdamW wd 0.02
  double min_lr = 1e-5;
  double weight_decay = 0.02;  // not applied to biases, LayerNorm and other 1-d parameters
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double grad_clip = 1.0;  // max global L2 norm; 0 disables
  int64_t warmup_steps = 100;
  template <class V>
  void fields(V& v) {
    v("lr", lr);
    v("min_lr", min_lr);
    v("weight_decay", weight_decay);
    v("beta1", beta1);
    v("beta2", beta2);
    v("eps", eps);
    v("grad_clip", grad_clip);
    v("warmup_steps", warmup_steps);
  }
};

struct LossConfig {
  double itc_weight = 1.0;
  double itm_weight = 1.0;
  double mlm_weight = 1.0;
  double mlm_probability = 0.15;  // ALBEF 0.15; FALCON 0.5
  // pseudo (GRIT/MAFA) | momentum (ALBEF momentum distillation with queues) | none
  negatives::SoftTargetsKind soft_targets = negatives::SoftTargetsKind::kPseudo;
  double soft_weight = 0.4;  // ALBEF alpha (ITC soft targets; with momentum also MLM's)
  // soft_targets=momentum only: EMA coefficient of the momentum model and the number of momentum
  // features kept as extra ITC keys (ALBEF Pretrain.yaml: momentum 0.995, queue_size 65536).
  double momentum = 0.995;
  int64_t queue_size = 65536;
  // ALBEF ramps alpha from 0 over the first epoch (alpha * min(1, i / len(loader))): soft targets
  // of an untrained model are near uniform and hold the ITC loss near chance. -1: one epoch.
  int64_t soft_warmup_steps = -1;
  std::string itm_negatives = "multinomial";  // multinomial (ALBEF) | argmax (GRIT)
  negatives::TclConfig tcl;
  template <class V>
  void fields(V& v) {
    v("itc_weight", itc_weight);
    v("itm_weight", itm_weight);
    v("mlm_weight", mlm_weight);
    v("mlm_probability", mlm_probability);
    v("soft_targets", soft_targets);
    v("soft_weight", soft_weight);
    v("momentum", momentum);
    v("queue_size", queue_size);
    v("soft_warmup_steps", soft_warmup_steps);
    v("itm_negatives", itm_negatives);
    v("tcl", tcl);
  }
};

// False-negative handling of the ITC negatives (negatives/glofnd_method.hpp, fnc_method.hpp,
// srcl_method.hpp): which method removes or reweighs them, with each method's own section. GloFND
// defaults follow glofnd.txt App. D.2.
struct NegativesConfig {
  negatives::NegativesKind method = negatives::NegativesKind::kNone;
  double alpha = 0.01;      // GloFND's quantile level / FNC's top fraction
  int64_t start_epoch = 0;  // GloFND/FNC: no update or filtering before this epoch
  bool filter_itm = true;   // excluded negatives are not drawn as ITM hard negatives either
  negatives::GlofndOptions glofnd;
  negatives::SrclConfig srcl;
  template <class V>
  void fields(V& v) {
    v("method", method);
    v("alpha", alpha);
    v("start_epoch", start_epoch);
    v("filter_itm", filter_itm);
    v("glofnd", glofnd);
    v("srcl", srcl);
  }
};

// Mini-batch construction (negatives/grit_method.hpp, falcon_method.hpp): uniform (ALBEF),
// GRIT-style grouping at a fixed or scheduled hardness quantile q, or FALCON's learned per-anchor
// q. Epoch 0 is always uniform (the warm start of falcon.txt App. C.2).
struct SamplerConfig {
  negatives::SamplerKind kind = negatives::SamplerKind::kUniform;
  int64_t search_space = 1920;  // |M| (GRIT-VLP 1920; FALCON 2400 / 5664 / 28320)
  negatives::GritConfig grit;
  negatives::FalconConfig falcon;
  template <class V>
  void fields(V& v) {
    v("kind", kind);
    v("search_space", search_space);
    v("grit", grit);
    v("falcon", falcon);
  }
};

struct TrainConfig {
  int64_t batch_size = 32;  // per rank
  int64_t epochs = 1;
  int64_t max_steps = 0;  // > 0: stop after this many steps (overrides epochs)
  int64_t seed = 42;
  bool deterministic = true;  // fixed reduction order and per-step seeding: bitwise repeatable
  int64_t threads = 1;        // libtorch intra-op threads per rank (DESIGN.md §5)
  int64_t log_every = 10;
  int64_t prefetch = 3;           // batches read ahead by the loader thread
  bool export_embeddings = true;  // embeddings/epoch-EEE.h5 at every epoch end
  int64_t export_batch = 256;
  template <class V>
  void fields(V& v) {
    v("batch_size", batch_size);
    v("epochs", epochs);
    v("max_steps", max_steps);
    v("seed", seed);
    v("deterministic", deterministic);
    v("threads", threads);
    v("log_every", log_every);
    v("prefetch", prefetch);
    v("export_embeddings", export_embeddings);
    v("export_batch", export_batch);
  }
};

// Fault injection for the tests of preemption, non-finite steps and failures (tests/fault,
// tests/integration): each knob acts at one step; -1 is off.
struct FaultConfig {
  int64_t nonfinite_step = -1;  // this step's loss becomes NaN on nonfinite_rank
  int64_t nonfinite_rank = 0;
  int64_t stop_step = -1;    // rank 0 raises SIGUSR1 after this step
  int64_t export_step = -1;  // rank 0 raises SIGUSR2 (export now) after this step
  int64_t throw_step = -1;   // throw_rank throws at this step
  int64_t throw_rank = 0;
  template <class V>
  void fields(V& v) {
    v("nonfinite_step", nonfinite_step);
    v("nonfinite_rank", nonfinite_rank);
    v("stop_step", stop_step);
    v("export_step", export_step);
    v("throw_step", throw_step);
    v("throw_rank", throw_rank);
  }
};

struct PretrainConfig {
  model::ModelConfig model;
  data::AugmentConfig augment;
  OptimConfig optim;
  LossConfig loss;
  NegativesConfig negatives;
  SamplerConfig sampler;
  TrainConfig train;
  store::CheckpointConfig checkpoint;
  WatchdogConfig watchdog;
  NonFiniteConfig non_finite;
  FaultConfig fault;
  template <class V>
  void fields(V& v) {
    v("model", model);
    v("augment", augment);
    v("optim", optim);
    v("loss", loss);
    v("negatives", negatives);
    v("sampler", sampler);
    v("train", train);
    v("checkpoint", checkpoint);
    v("watchdog", watchdog);
    v("non_finite", non_finite);
    v("fault", fault);
  }
  // Keys that moved when the methods took their own sections: old run directories' config.yaml
  // and old --set overrides still load.
  static std::vector<config::RenamedKey> renamed_keys() {
    return {{"negatives.glofnd_lr", "negatives.glofnd.lr"},
            {"negatives.glofnd_beta1", "negatives.glofnd.beta1"},
            {"negatives.glofnd_beta2", "negatives.glofnd.beta2"},
            {"negatives.glofnd_init", "negatives.glofnd.init"},
            {"negatives.srcl_helper", "negatives.srcl.helper"},
            {"negatives.srcl_helper_weight", "negatives.srcl.helper_weight"},
            {"sampler.schedule", "sampler.grit.schedule"},
            {"sampler.q", "sampler.grit.q"},
            {"sampler.q_start", "sampler.grit.q_start"},
            {"sampler.q_end", "sampler.grit.q_end"},
            {"sampler.falcon_quantiles", "sampler.falcon.quantiles"},
            {"sampler.falcon_hidden", "sampler.falcon.hidden"},
            {"sampler.falcon_blocks", "sampler.falcon.blocks"},
            {"sampler.falcon_lr", "sampler.falcon.lr"},
            {"sampler.falcon_weight_decay", "sampler.falcon.weight_decay"},
            {"sampler.falcon_instance_level", "sampler.falcon.instance_level"},
            {"sampler.falcon_baseline", "sampler.falcon.baseline"},
            {"sampler.falcon_baseline_decay", "sampler.falcon.baseline_decay"},
            {"loss.tcl", "loss.tcl.enabled"},
            {"loss.tcl_imc_weight", "loss.tcl.imc_weight"},
            {"loss.tcl_lmi_weight", "loss.tcl.lmi_weight"},
            {"loss.tcl_grid", "loss.tcl.grid"},
            {"train.inject_nonfinite_step", "fault.nonfinite_step"},
            {"train.inject_nonfinite_rank", "fault.nonfinite_rank"},
            {"train.inject_stop_step", "fault.stop_step"},
            {"train.inject_export_step", "fault.export_step"},
            {"train.inject_throw_step", "fault.throw_step"},
            {"train.inject_throw_rank", "fault.throw_rank"}};
  }
};

}  // namespace fnvlp::train
