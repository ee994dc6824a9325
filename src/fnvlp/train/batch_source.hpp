#pragma once
// Where the trainer's batches come from: the Prefetcher (reads ahead on a thread) for samplers
// that depend only on their own state, or the sampler driven synchronously on the trainer thread
// when its batches depend on state updated every step (FALCON's policy picks each batch's
// members with the current φ, falcon.txt Alg. 2).
#include <chrono>
#include <functional>
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

  // Work on every batch before next() returns it, with the step that batch will be (first_step
  // of the start_epoch/resume call, then one more per batch): on the prefetch thread, or inside
  // next() when synchronous. The trainer's image augmentation, so that with a core of its own the
  // reading thread takes it off the step. Set before the first start_epoch/resume.
  using Prepare = std::function<void(data::Batch&, int64_t step)>;
  void set_prepare(Prepare prepare);

  void start_epoch(int64_t epoch, int64_t first_step);
  void resume(const nlohmann::json& state, int64_t first_step);
  // Stops reading ahead so the caller may touch the sampler (between epochs).
  void halt();
  bool next(data::Batch& out);
  // Sampler state after the last batch returned by next().
  const nlohmann::json& state() const;
  double wait_seconds() const;
  double wait_fraction() const;  // of the wall time since the epoch started (synchronous)

 private:
  void restart(int64_t first_step);  // stops the reader, resets the epoch's counters
  const data::PairDataset& dataset_;
  data::Sampler& sampler_;
  std::unique_ptr<data::Prefetcher> prefetch_;
  Prepare prepare_;
  int64_t first_step_ = 0;  // the step of the first batch since start_epoch/resume
  int64_t served_ = 0;      // synchronous: batches returned since then
  nlohmann::json state_;
  double wait_ = 0, wait_epoch_ = 0;
  std::chrono::steady_clock::time_point epoch_start_;
};

}  // namespace fnvlp::train
