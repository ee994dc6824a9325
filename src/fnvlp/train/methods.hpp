#pragma once
// The training methods a pretrain config selects (negatives/method.hpp), built in the order the
// step calls them: soft targets (momentum distillation), ITC negatives (GloFND, FNC, SRCL), batch
// composition (GRIT, FALCON), extra losses (TCL).
#include <memory>
#include <vector>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/data/dataset.hpp"
#include "fnvlp/negatives/method.hpp"
#include "fnvlp/train/pretrain_config.hpp"

namespace fnvlp::train {

// Checks the combination before anything is built; throws fnvlp::Error naming the keys.
void validate_methods(const PretrainConfig& cfg);
// negatives.method=oracle needs the class label of every training pair. Collective: each rank
// reads its block's labels (no image is read); where a pair has none, every rank throws the same
// fnvlp::Error naming the data, the count and the first such pair_id.
void require_labels(const Comm& comm, const data::PairDataset& ds, const data::PairRange& block);
std::vector<std::unique_ptr<negatives::Method>> make_methods(const PretrainConfig& cfg,
                                                             const negatives::MethodEnv& env);

}  // namespace fnvlp::train
