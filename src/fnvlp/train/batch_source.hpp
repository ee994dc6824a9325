#pragma once
// Where the trainer's batches come from: the Prefetcher (reads ahead on a thread) for samplers
// that depend only on their own state, or the sampler driven synchronously on the trainer thread
// when its batches depend on state updated every step (FALCON's policy picks each batch's
// members with the current φ, falcon.txt Alg. 2).
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>

#include "fnvlp/data/dataset.hpp"
#include "fnvlp/data/prefetch.hpp"
#include "fnvlp/data/sampler.hpp"

namespace fnvlp::train {

class BatchSource {
 public:
  // depth: read-ahead batches; synchronous: no thread, the sampler runs inside next().
  BatchSource(const data::PairDataset& dataset, data::Sampler& sampler, int depth,
              bool synchronous);

  void start_epoch(int64_t epoch);
  void resume(const nlohmann::json& state);
  // Stops reading ahead so the caller may touch the sampler (between epochs).
  void halt();
  bool next(data::Batch& out);
  // Sampler state after the last batch returned by next().
  const nlohmann::json& state() const;
  double wait_seconds() const;
  double wait_fraction() const;  // of the wall time since the epoch started (synchronous)

 private:
  const data::PairDataset& dataset_;
  data::Sampler& sampler_;
  std::unique_ptr<data::Prefetcher> prefetch_;
  nlohmann::json state_;
  double wait_ = 0, wait_epoch_ = 0;
  std::chrono::steady_clock::time_point epoch_start_;
};

}  // namespace fnvlp::train
