#pragma once
// The training methods a pretrain config selects (negatives/method.hpp), built in the order the
// step calls them: soft targets (momentum distillation), ITC negatives (GloFND, FNC, SRCL), batch
// composition (GRIT, FALCON), extra losses (TCL).
#include <memory>
#include <vector>

#include "fnvlp/negatives/method.hpp"
#include "fnvlp/train/pretrain_config.hpp"

namespace fnvlp::train {

// Checks the combination before anything is built; throws fnvlp::Error naming the keys.
void validate_methods(const PretrainConfig& cfg);
std::vector<std::unique_ptr<negatives::Method>> make_methods(const PretrainConfig& cfg,
                                                             const negatives::MethodEnv& env);

}  // namespace fnvlp::train
