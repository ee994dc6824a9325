#pragma once
// The typed configuration of fnvlp-pretrain: jobs/configs/*.yaml + --set overrides resolve into
// this struct (core/config.hpp); keys follow ALBEF's config names where one exists.
#include <cstdint>
#include <string>

#include "fnvlp/data/augment.hpp"
#include "fnvlp/model/model_config.hpp"
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
  std::string soft_targets = "pseudo";
  double soft_weight = 0.4;  // ALBEF alpha (ITC soft targets; with momentum also MLM's)
  // soft_targets=momentum only: EMA coefficient of the momentum model and the number of momentum
  // features kept as extra ITC keys (ALBEF Pretrain.yaml: momentum 0.995, queue_size 65536).
  double momentum = 0.995;
  int64_t queue_size = 65536;
  // ALBEF ramps alpha from 0 over the first epoch (alpha * min(1, i / len(loader))): soft targets
  // of an untrained model are near uniform and hold the ITC loss near chance. -1: one epoch.
  int64_t soft_warmup_steps = -1;
  std::string itm_negatives = "multinomial";  // multinomial (ALBEF) | argmax (GRIT)
  // TCL (loss/tcl.hpp): intra-modal contrast of two views (IMC) and global-local mutual
  // information (LMI), added with these weights; tcl_grid: pooled patch grid for LMI.
  bool tcl = false;
  double tcl_imc_weight = 1.0;
  double tcl_lmi_weight = 1.0;
  int64_t tcl_grid = 4;
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
    v("tcl_imc_weight", tcl_imc_weight);
    v("tcl_lmi_weight", tcl_lmi_weight);
    v("tcl_grid", tcl_grid);
  }
};

// False-negative handling of the ITC negatives (negatives/): which method removes or reweighs
// them. GloFND defaults follow glofnd.txt App. D.2.
struct NegativesConfig {
  std::string method = "none";  // none | glofnd | fnc | srcl
  double alpha = 0.01;          // GloFND's quantile level / FNC's top fraction
  int64_t start_epoch = 0;      // GloFND/FNC: no update or filtering before this epoch
  double glofnd_lr = 0.05;
  double glofnd_beta1 = 0.9;
  double glofnd_beta2 = 0.98;
  double glofnd_init = 1.0;
  bool filter_itm = true;  // excluded negatives are not drawn as ITM hard negatives either
  // SRCL: checkpoint dir of the frozen helper model (same ModelConfig); empty: the current model
  // alone regulates (a = 0). a decays linearly from srcl_helper_weight to 0 over training.
  std::string srcl_helper;
  double srcl_helper_weight = 1.0;
  template <class V>
  void fields(V& v) {
    v("method", method);
    v("alpha", alpha);
    v("start_epoch", start_epoch);
    v("glofnd_lr", glofnd_lr);
    v("glofnd_beta1", glofnd_beta1);
    v("glofnd_beta2", glofnd_beta2);
    v("glofnd_init", glofnd_init);
    v("filter_itm", filter_itm);
    v("srcl_helper", srcl_helper);
    v("srcl_helper_weight", srcl_helper_weight);
  }
};

// Mini-batch construction (negatives/grouped_sampler.hpp, falcon.hpp): uniform (ALBEF), GRIT-style
// grouping at a fixed or scheduled hardness quantile q, or FALCON's learned per-anchor q.
// Epoch 0 is always uniform (the warm start of falcon.txt App. C.2).
struct SamplerConfig {
  std::string kind = "uniform";    // uniform | grit | falcon
  int64_t search_space = 1920;     // |M| (GRIT-VLP 1920; FALCON 2400 / 5664 / 28320)
  std::string schedule = "fixed";  // fixed | hardening | softening (grit)
  double q = 1.0;                  // fixed: 1 = GRIT's most similar, 0.5, 0 = least similar
  double q_start = -1;             // schedules; -1: hardening 0 -> 1, softening 1 -> 0
  double q_end = -1;
  int64_t falcon_quantiles = 100;  // m, FALCON Table 5
  int64_t falcon_hidden = 256;
  int64_t falcon_blocks = 2;
  double falcon_lr = 1e-4;
  double falcon_weight_decay = 0.01;
  bool falcon_instance_level = true;  // false: one q per batch (the paper's ablation)
  bool falcon_baseline = true;        // running-mean baseline in the REINFORCE advantage
  double falcon_baseline_decay = 0.9;
  template <class V>
  void fields(V& v) {
    v("kind", kind);
    v("search_space", search_space);
    v("schedule", schedule);
    v("q", q);
    v("q_start", q_start);
    v("q_end", q_end);
    v("falcon_quantiles", falcon_quantiles);
    v("falcon_hidden", falcon_hidden);
    v("falcon_blocks", falcon_blocks);
    v("falcon_lr", falcon_lr);
    v("falcon_weight_decay", falcon_weight_decay);
    v("falcon_instance_level", falcon_instance_level);
    v("falcon_baseline", falcon_baseline);
    v("falcon_baseline_decay", falcon_baseline_decay);
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
  int64_t inject_nonfinite_step = -1;  // fault injection (tests): this step's loss becomes NaN
  int64_t inject_nonfinite_rank = 0;
  int64_t inject_stop_step = -1;  // fault injection (tests): rank 0 raises SIGUSR1 after this step
  int64_t inject_export_step = -1;  // tests: rank 0 raises SIGUSR2 (export now) after this step
  int64_t inject_throw_step = -1;   // fault injection (tests): one rank throws at this step
  int64_t inject_throw_rank = 0;
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
    v("inject_nonfinite_step", inject_nonfinite_step);
    v("inject_nonfinite_rank", inject_nonfinite_rank);
    v("inject_stop_step", inject_stop_step);
    v("inject_export_step", inject_export_step);
    v("inject_throw_step", inject_throw_step);
    v("inject_throw_rank", inject_throw_rank);
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
  }
};

}  // namespace fnvlp::train
