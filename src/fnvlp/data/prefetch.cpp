#include "fnvlp/data/prefetch.hpp"

#include "fnvlp/core/error.hpp"

namespace fnvlp::data {

using Clock = std::chrono::steady_clock;

Prefetcher::Prefetcher(const PairDataset& dataset, Sampler& sampler, int depth, int window)
    : dataset_(dataset),
      sampler_(sampler),
      depth_(static_cast<size_t>(depth)),
      window_(static_cast<size_t>(window)) {
  FNVLP_CHECK(depth >= 1, "prefetch depth must be at least 1, got " << depth);
  FNVLP_CHECK(window >= 1, "wait window must be at least 1 step, got " << window);
}

Prefetcher::~Prefetcher() { stop(); }

void Prefetcher::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  queue_.clear();
  stop_ = false;
  ended_ = true;
}

void Prefetcher::set_prepare(Prepare prepare) {
  FNVLP_CHECK(!thread_.joinable(), "Prefetcher::set_prepare while an epoch is being read");
  prepare_ = std::move(prepare);
}

void Prefetcher::start_epoch(int64_t epoch) {
  stop();
  sampler_.start_epoch(epoch);
  launch();
}

void Prefetcher::resume(const nlohmann::json& state) {
  stop();
  sampler_.load_state(state);
  launch();
}

void Prefetcher::launch() {
  consumed_state_ = sampler_.state();
  ended_ = false;
  error_ = nullptr;
  last_return_ = Clock::now();
  thread_ = std::thread([this] { run(); });
}

void Prefetcher::run() {
  auto push = [this](Item&& item) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(item));
    }
    cv_.notify_all();
  };
  try {
    std::vector<int64_t> ids;
    for (int64_t index = 0;; ++index) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || queue_.size() < depth_; });
        if (stop_) return;
      }
      Item item;
      if (!sampler_.next(ids)) {
        item.end = true;
        push(std::move(item));
        return;
      }
      item.state = sampler_.state();
      item.batch = dataset_.read(ids);
      if (prepare_) prepare_(item.batch, index);
      push(std::move(item));
    }
  } catch (...) {
    Item item;
    item.error = std::current_exception();
    push(std::move(item));
  }
}

bool Prefetcher::next(Batch& out) {
  if (error_) std::rethrow_exception(error_);
  if (ended_) return false;
  const auto t0 = Clock::now();
  Item item;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !queue_.empty(); });
    item = std::move(queue_.front());
    queue_.pop_front();
  }
  cv_.notify_all();
  const auto t1 = Clock::now();
  if (item.error || item.end) {
    // The thread has returned after pushing its last item.
    if (thread_.joinable()) thread_.join();
    ended_ = true;
    if (item.error) {
      error_ = item.error;
      std::rethrow_exception(error_);
    }
    return false;
  }
  out = std::move(item.batch);
  consumed_state_ = std::move(item.state);
  ++delivered_;
  const double wait = std::chrono::duration<double>(t1 - t0).count();
  const double period = std::chrono::duration<double>(t1 - last_return_).count();
  last_return_ = t1;
  wait_total_ += wait;
  recent_.emplace_back(wait, period);
  while (recent_.size() > window_) recent_.pop_front();
  return true;
}

double Prefetcher::wait_fraction() const {
  double wait = 0, period = 0;
  for (const auto& [w, p] : recent_) {
    wait += w;
    period += p;
  }
  return period > 0 ? wait / period : 0.0;
}

}  // namespace fnvlp::data
