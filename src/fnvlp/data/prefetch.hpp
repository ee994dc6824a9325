#pragma once
// Reads batches ahead on a background thread so the training step does not wait for I/O.
//
//   Prefetcher pf(dataset, sampler, /*depth=*/2);
//   for (int64_t e = first_epoch; e < epochs; ++e) {
//     pf.start_epoch(e);              // or pf.resume(checkpoint_state) for the first one
//     Batch b;
//     while (pf.next(b)) { step(b); if (save) ckpt["sampler"] = pf.state(); }
//   }
//
// The thread owns the sampler while an epoch runs (between start_epoch/resume and next()
// returning false): touch the sampler only between epochs. Because the thread runs ahead,
// the sampler's own state() is `depth` batches ahead of the trainer; state() here returns the
// sampler state right after the last batch handed to the consumer, which is what a checkpoint
// must hold. An exception on the thread (a failed read, a sampler error) is rethrown by next().
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "fnvlp/data/dataset.hpp"
#include "fnvlp/data/sampler.hpp"

namespace fnvlp::data {

class Prefetcher {
 public:
  // `window`: steps over which wait_fraction() is computed.
  Prefetcher(const PairDataset& dataset, Sampler& sampler, int depth = 2, int window = 50);
  ~Prefetcher();  // stops the thread (an in-flight read finishes first) and joins it
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Work on each batch after its read, on the reading thread (where it overlaps the consumer's
  // step): called with the batch and its index since the last start_epoch/resume (0, 1, ...). An
  // exception from it reaches the consumer as a failed read does. Set while no epoch runs.
  using Prepare = std::function<void(Batch&, int64_t index)>;
  void set_prepare(Prepare prepare);

  // Stops any running epoch, calls sampler.start_epoch(epoch) and starts reading ahead.
  void start_epoch(int64_t epoch);
  // Stops reading ahead (an in-flight read finishes first); the sampler is the caller's again
  // until the next start_epoch/resume. The trainer ends epochs by an agreed step count, so the
  // thread may still be running when it wants to hand the sampler new epoch data.
  void halt() { stop(); }
  // Stops any running epoch, calls sampler.load_state(state) and reads ahead from there.
  void resume(const nlohmann::json& state);

  // The next batch of the epoch; false at its end (and again until the next start_epoch).
  bool next(Batch& out);

  // Sampler state after the last batch returned by next() (the state at the start of the epoch
  // before the first one).
  const nlohmann::json& state() const { return consumed_state_; }

  int64_t batches_delivered() const { return delivered_; }
  // Seconds next() spent blocked waiting for the reader, in total.
  double wait_seconds() const { return wait_total_; }
  // Time blocked in next() / wall time from one next() return to the next, over the last
  // `window` batches (the first batch of an epoch counts from start_epoch/resume). 0 before any.
  double wait_fraction() const;

 private:
  struct Item {
    Batch batch;
    nlohmann::json state;  // sampler state after this batch
    bool end = false;
    std::exception_ptr error;
  };
  void stop();
  void launch();
  void run();

  const PairDataset& dataset_;
  Sampler& sampler_;
  Prepare prepare_;
  const size_t depth_;
  const size_t window_;

  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool stop_ = false;
  bool ended_ = true;         // no epoch running: next() returns false
  std::exception_ptr error_;  // the reader's failure, rethrown by every next() until restarted

  nlohmann::json consumed_state_;
  int64_t delivered_ = 0;
  double wait_total_ = 0;
  std::chrono::steady_clock::time_point last_return_;
  std::deque<std::pair<double, double>> recent_;  // (wait, period) of the last steps
};

}  // namespace fnvlp::data
