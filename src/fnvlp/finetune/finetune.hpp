#pragma once
// fnvlp-finetune: retrieval fine-tuning (ALBEF's Retrieval task: ITC + ITM, no MLM) through the
// pretraining trainer, so it has the same run directory, checkpoints, preemption and resume.
// The model starts from a pretrained checkpoint's weights (--init; its model.yaml decides the
// architecture), the validation shards are evaluated at every epoch end with ITC + ITM re-ranking
// (eval.k_test candidates), and the best model by val r_mean is kept (store/best.hpp).
// The one room that includes both train/ and eval/: each of them depends on neither.
#include <string>
#include <vector>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/eval/itm_eval.hpp"
#include "fnvlp/train/pretrain_config.hpp"

namespace fnvlp::finetune {

struct FinetuneConfig : train::PretrainConfig {
  eval::RetrievalEvalConfig eval;  // per-epoch validation
  template <class V>
  void fields(V& v) {
    train::PretrainConfig::fields(v);
    v("eval", eval);
  }
};

struct FinetuneOptions {
  std::string data_dir, val_dir, run_dir, resume;
  bool resume_on_changed_data = false;  // train::PretrainOptions'
  std::string init;  // pretrained checkpoint directory (optional: without it, from scratch)
  std::vector<std::string> init_from;  // other projects' weight files (store/weights_io.hpp)
};

// Collective. Returns the process exit code as run_pretraining does.
int run_finetuning(const Comm& comm, FinetuneConfig cfg, const FinetuneOptions& opt);

}  // namespace fnvlp::finetune
