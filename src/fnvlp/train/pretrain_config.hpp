#pragma once
// The typed configuration of fnvlp-pretrain: jobs/configs/*.yaml + --set overrides resolve into
// this struct (core/config.hpp); keys follow ALBEF's config names where one exists.
#include <cstdint>
#include <string>
#include <vector>

#include "fnvlp/comm/watchdog.hpp"
#include "fnvlp/core/config.hpp"
#include "fnvlp/core/config_fields.hpp"
#include "fnvlp/data/augment.hpp"
#include "fnvlp/model/attention.hpp"
#include "fnvlp/model/layer_norm.hpp"
#include "fnvlp/model/model_config.hpp"
#include "fnvlp/negatives/method_config.hpp"
#include "fnvlp/store/checkpoint.hpp"
#include "fnvlp/train/device.hpp"
#include "fnvlp/train/non_finite.hpp"

namespace fnvlp::train {

struct OptimConfig {
  // clang-format off
  FNVLP_CONFIG_FIELDS(
      // ALBEF pretrain: 1e-4 peak, cosine to 1e-5, AdamW wd 0.02
      (double, lr, 1e-4, config::at_least(0)),
      (double, min_lr, 1e-5, config::at_least(0)),
      // not applied to biases, LayerNorm and other 1-d parameters
      (double, weight_decay, 0.02, config::at_least(0)),
      (double, beta1, 0.9, config::half_open(0, 1)),
      (double, beta2, 0.999, config::half_open(0, 1)),
      (double, eps, 1e-8, config::above(0)),
      (double, grad_clip, 1.0, config::at_least(0)),  // max global L2 norm; 0 disables
      (int64_t, warmup_steps, 100, config::at_least(0)))
  // clang-format on
};

struct LossConfig {
  // clang-format off
  FNVLP_CONFIG_FIELDS(
      (double, itc_weight, 1.0, config::at_least(0)),
      (double, itm_weight, 1.0, config::at_least(0)),
      (double, mlm_weight, 1.0, config::at_least(0)),
      (double, mlm_probability, 0.15, config::within(0, 1)),  // ALBEF 0.15; FALCON 0.5
      // pseudo (GRIT/MAFA) | momentum (ALBEF momentum distillation with queues) | none
      (negatives::SoftTargetsKind, soft_targets, negatives::SoftTargetsKind::kPseudo),
      // ALBEF alpha (ITC soft targets; with momentum also MLM's)
      (double, soft_weight, 0.4, config::within(0, 1)),
      // soft_targets=momentum only: EMA coefficient of the momentum model and the number of
      // momentum features kept as extra ITC keys (ALBEF Pretrain.yaml: momentum 0.995, queue_size
      // 65536).
      (double, momentum, 0.995, config::within(0, 1)),
      (int64_t, queue_size, 65536, config::at_least(0)),
      // ALBEF ramps alpha from 0 over the first epoch (alpha * min(1, i / len(loader))): soft
      // targets of an untrained model are near uniform and hold the ITC loss near chance. -1: one
      // epoch.
      (int64_t, soft_warmup_steps, -1, config::at_least(-1)),
      (std::string, itm_negatives, "multinomial"),  // multinomial (ALBEF) | argmax (GRIT)
      (negatives::TclConfig, tcl, ))
  // clang-format on
};

// False-negative handling of the ITC negatives (negatives/glofnd_method.hpp, fnc_method.hpp,
// srcl_method.hpp): which method removes or reweighs them, with each method's own section. GloFND
// defaults follow glofnd.txt App. D.2.
struct NegativesConfig {
  // clang-format off
  FNVLP_CONFIG_FIELDS(
      (negatives::NegativesKind, method, negatives::NegativesKind::kNone),
      (double, alpha, 0.01, config::within(0, 1)),  // GloFND's quantile level / FNC's top fraction
      // GloFND/FNC: no update or filtering before this epoch
      (int64_t, start_epoch, 0, config::at_least(0)),
      (bool, filter_itm, true),  // excluded negatives are not drawn as ITM hard negatives either
      (negatives::GlofndOptions, glofnd, ),
      (negatives::SrclConfig, srcl, ))
  // clang-format on
};

// Mini-batch construction (negatives/grit_method.hpp, falcon_method.hpp): uniform (ALBEF),
// GRIT-style grouping at a fixed or scheduled hardness quantile q, or FALCON's learned per-anchor
// q. Epoch 0 is always uniform (the warm start of falcon.txt App. C.2).
// What the grouped samplers compose epoch e from: refresh = a forward pass over the rank's block at
// the end of epoch e - 1 (the epoch export's); cached = the embeddings each pair got in its last
// training forward pass (falcon.txt: no extra forward passes; train/epoch_cache.hpp).
FNVLP_CONFIG_ENUM(SamplerEmbeddings, (kRefresh, "refresh"), (kCached, "cached"))

struct SamplerConfig {
  // clang-format off
  FNVLP_CONFIG_FIELDS(
      (negatives::SamplerKind, kind, negatives::SamplerKind::kUniform),
      (SamplerEmbeddings, embeddings, SamplerEmbeddings::kRefresh),
      // |M| (GRIT-VLP 1920; FALCON 2400 / 5664 / 28320)
      (int64_t, search_space, 1920, config::at_least(1)),
      (negatives::GritConfig, grit, ),
      (negatives::FalconConfig, falcon, ))
  // clang-format on
};

// data.verify: how much of the shards is checked against the manifest before libhdf5 opens them.
// full: size and sha256, hashed once per (re)start with the files spread over the ranks; size:
// sizes only, for shards verified once (fnvlp-shard --verify) on storage that is trusted.
FNVLP_CONFIG_ENUM(ShardVerify, (kFull, "full"), (kSize, "size"))

struct DataConfig {
  // clang-format off
  FNVLP_CONFIG_FIELDS(
      (ShardVerify, verify, ShardVerify::kFull))
  // clang-format on
};

struct TrainConfig {
  // clang-format off
  FNVLP_CONFIG_FIELDS(
      (int64_t, batch_size, 32, config::at_least(1)),  // per rank
      (int64_t, epochs, 1, config::at_least(1)),
      // > 0: stop after this many steps (overrides epochs)
      (int64_t, max_steps, 0, config::at_least(0)),
      (int64_t, seed, 42),
      // fixed reduction order and per-step seeding: bitwise repeatable; on CUDA also deterministic
      // ATen/cuDNN algorithms and cuBLAS workspaces (train/device.hpp), at a cost in throughput
      // there (tests/bench/README.md)
      (bool, deterministic, true),
      // libtorch intra-op threads per rank (ARCHITECTURE.md §13)
      (int64_t, threads, 1, config::at_least(1)),
      // auto: cuda when every rank sees a GPU (one per node-local rank), else cpu (train/device.hpp)
      (DeviceKind, device, DeviceKind::kAuto),
      // bf16: autocast of the forward passes on CUDA; fp32 master weights, optimizer and losses
      (Precision, precision, Precision::kFp32),
      // attention off the fused CPU kernels: auto | sdpa | materialised (model/attention.hpp)
      (model::AttentionKernel, attention, model::AttentionKernel::kAuto),
      // a residual add and its LayerNorm on CUDA: aten | fnvlp (one kernel each way;
      // model/layer_norm.hpp)
      (model::NormKernel, norm_kernel, model::NormKernel::kAten),
      // The static step (train/static_step.cpp): shapes fixed from step to step, ITM negatives
      // drawn on the device, the skip of a non-finite step decided there, losses read once per
      // log line. What cuda_graphs captures; eager on its own (any device), for comparisons.
      (bool, static_step, false),
      // CUDA graphs of the static step (train/step_graphs.hpp): captured once per shape, then one
      // launch per step. Implies static_step; needs train.device=cuda.
      (bool, cuda_graphs, false),
      (int64_t, log_every, 10, config::at_least(1)),
      (int64_t, prefetch, 3, config::at_least(0)),  // batches read ahead by the loader thread
      (bool, export_embeddings, true),  // embeddings/epoch-EEE.h5 at every epoch end
      (int64_t, export_batch, 256, config::at_least(1)),
      // > 0: the PyTorch profiler over this many steps of rank 0 from profile_start, a Chrome
      // trace in RUN/profile/ (train/step_profiler.hpp; libtorch 2.x)
      (int64_t, profile_steps, 0, config::at_least(0)),
      (int64_t, profile_start, 10, config::at_least(0)))
  // clang-format on
};

// Fault injection for the tests of preemption, non-finite steps and failures (tests/fault,
// tests/integration): each knob acts at one step; -1 is off. The trainer turns them into entries
// of core/fault.hpp's sites (step.nan, step.throw, step.stop, step.export), the one mechanism.
struct FaultConfig {
  // clang-format off
  FNVLP_CONFIG_FIELDS(
      (int64_t, nonfinite_step, -1),  // this step's loss becomes NaN on nonfinite_rank
      (int64_t, nonfinite_rank, 0, config::at_least(0)),
      (int64_t, stop_step, -1),  // rank 0 raises SIGUSR1 after this step
      (int64_t, export_step, -1),  // rank 0 raises SIGUSR2 (export now) after this step
      (int64_t, throw_step, -1),  // throw_rank throws at this step
      (int64_t, throw_rank, 0, config::at_least(0)))
  // clang-format on
};

// Collectives of device tensors (gradients, gathered features): auto = nccl on CUDA when the build
// has it, else mpi (host copies). MPI always carries the host-side control traffic.
struct CommConfig {
  // clang-format off
  FNVLP_CONFIG_FIELDS(
      (CommBackend, backend, CommBackend::kAuto),
      // A collective waiting longer is aborted (a failed peer ends the job, not hangs it): the
      // device collectives and the gradient buckets. Below watchdog.timeout_s, so that the job's
      // message names the collective rather than only the step.
      (double, timeout_s, 300, config::above(0)),
      // The gradient all-reduce overlapped with the backward in buckets of about this many MiB
      // (train/grad_buckets.hpp); 0: one all-reduce after it; -1 (auto): PyTorch DDP's 25 with
      // NCCL, 0 over MPI, where Open MPI progresses a non-blocking all-reduce only inside MPI
      // calls on the core that runs the backward (measured 4-20% slower over TCP).
      (double, bucket_mb, -1, config::at_least(-1)))
  // clang-format on
};

struct PretrainConfig {
  // clang-format off
  FNVLP_CONFIG_FIELDS(
      (model::ModelConfig, model, ),
      (DataConfig, data, ),
      (data::AugmentConfig, augment, ),
      (OptimConfig, optim, ),
      (LossConfig, loss, ),
      (NegativesConfig, negatives, ),
      (SamplerConfig, sampler, ),
      (TrainConfig, train, ),
      (CommConfig, comm, ),
      (store::CheckpointConfig, checkpoint, ),
      (WatchdogConfig, watchdog, ),
      (NonFiniteConfig, non_finite, ),
      (FaultConfig, fault, ))
  // clang-format on
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
