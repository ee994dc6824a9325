#pragma once
// Reading a model out of a committed checkpoint (fnvlp-eval, fnvlp-finetune --init): the model
// config comes from the checkpoint itself (model.yaml, written by every save since issue 6), or for
// older checkpoints from the run's resolved config two levels up (RUN/checkpoints/step-N ->
// RUN/config.yaml, key `model`). Only the weights are read, never the optimizer.
#include <string>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/model/model_config.hpp"

namespace torch::nn {
class Module;
}

namespace fnvlp::store {

inline constexpr const char* kModelConfigFile = "model.yaml";

// The checkpoint directory with symlinks resolved (RUN/checkpoints/latest -> .../step-N).
std::string resolve_checkpoint_dir(const std::string& dir);

// Local: writes DIR/model.yaml (the resolved model config) beside a checkpoint's model.pt.
void write_model_config(const std::string& dir, const model::ModelConfig& mc);

// Local: the checkpoint's model config; throws naming the files it tried.
model::ModelConfig checkpoint_model_config(const std::string& dir);

// Collective: rank 0 verifies the checkpoint (COMMITTED marker, sizes and sha256 of every file)
// and reads its model config, which every rank receives. Throws CollectiveError on every rank.
model::ModelConfig open_pretrained(const Comm& comm, const std::string& dir);

// Local, on every rank (each reads the same files): the checkpoint's token ids are those of the
// vocabulary its run trained on (trainer.json's data.vocab_sha256); data tokenised with another
// would run, on other words. Throws UsageError (exit 2) naming both digests and `data_dir`.
// Checkpoints and shards that predate the record are taken as they are.
void refuse_other_vocabulary(const std::string& checkpoint, const std::string& vocab_sha256,
                             const std::string& data_dir);

// Collective: every rank loads DIR/model.pt into `model` (built from open_pretrained's config).
void load_pretrained_weights(const Comm& comm, const std::string& dir, torch::nn::Module& model);

}  // namespace fnvlp::store
