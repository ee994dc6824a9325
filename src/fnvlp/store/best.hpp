#pragma once
// Best-so-far model of a fine-tuning run, by a validation metric (r_mean by default):
//   RUN/best/step-NNNNNNN/   model.pt + model.yaml, committed like any checkpoint (checkpoint.hpp)
//   RUN/best/latest          -> the best one (only one is kept)
//   RUN/best.json            {"metric", "value", "step", "epoch", "checkpoint", "metrics"}
// fnvlp-eval --checkpoint RUN/best/latest evaluates it. After a resume the tracker continues from
// best.json, so a re-run of an already evaluated epoch (same weights, same score) saves nothing.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/model/model_config.hpp"
#include "fnvlp/store/checkpoint.hpp"

namespace fnvlp::store {

class BestCheckpoint {
 public:
  // Collective: creates RUN/best/ and reads RUN/best.json if present.
  BestCheckpoint(const std::string& run_dir, const Comm& comm, std::string metric = "r_mean");

  // Collective: when metrics[metric] is strictly above the best so far, saves `model` and
  // rewrites best.json; returns whether it did.
  bool update(const nlohmann::json& metrics, int64_t step, int64_t epoch,
              const torch::nn::Module& model, const model::ModelConfig& mc);

  bool has_best() const { return step_ >= 0; }
  double best_value() const { return value_; }
  int64_t best_step() const { return step_; }
  std::string json_path() const { return run_dir_ + "/best.json"; }

 private:
  std::string run_dir_, metric_;
  const Comm& comm_;
  CheckpointManager ckpt_;
  double value_ = 0;
  int64_t step_ = -1;
};

}  // namespace fnvlp::store
