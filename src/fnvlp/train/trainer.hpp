#pragma once
// fnvlp-pretrain's loop: ALBEF-style ITC + ITM + MLM, data parallel over Comm, with the run
// directory, checkpoints, preemption, watchdog and non-finite guards of ARCHITECTURE.md §9-10.
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/train/pretrain_config.hpp"

namespace fnvlp::model {
class AlbefImpl;
}

namespace fnvlp::train {

struct PretrainOptions {
  std::string data_dir;  // sharded dataset (fnvlp-shard output)
  std::string run_dir;   // RUN/
  std::string resume;    // "" (fresh), "auto" (newest committed checkpoint, if any), or a dir
  // The checkpoint's data and --data differ (other shards, pair count or vocabulary): refused
  // (exit 2) unless true, when the model, optimizer, step counts and the methods' state that is
  // not per pair are kept, every per-pair state starts afresh and a new epoch begins.
  bool resume_on_changed_data = false;
  std::string config_yaml;  // the resolved config, written to RUN/config.yaml
  std::string val_dir;      // optional held-out shards: zero-shot ITC retrieval at every export
  // Fine-tuning: model weights from this committed checkpoint (not its optimizer or step) before
  // the first step of a fresh run; a resumed run takes everything from its own checkpoint.
  std::string init_checkpoint;
  // Weights of other projects before the first step (store/weights_io.hpp: DeiT/ViT, BERT, ALBEF
  // in safetensors or torch.save files); after init_checkpoint when both are given. The report
  // goes to RUN/init_weights.json.
  std::vector<std::string> init_from;
  // Called on every rank at each epoch end and once when training completes (collective, under a
  // watchdog long phase). A non-empty returned object is logged to metrics.jsonl.
  std::function<nlohmann::json(model::AlbefImpl& model, int64_t epoch, int64_t step)> on_epoch_end;
};

// Collective. Returns the process exit code: 0 when training finished, kExitRequeue after a
// preemption checkpoint. Failures throw (CollectiveError when every rank knows).
int run_pretraining(const Comm& comm, const PretrainConfig& cfg, const PretrainOptions& opt);

}  // namespace fnvlp::train
