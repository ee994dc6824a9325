#include "fnvlp/train/batch_source.hpp"

namespace fnvlp::train {

namespace {
double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

BatchSource::BatchSource(const data::PairDataset& dataset, data::Sampler& sampler, int depth,
                         bool synchronous)
    : dataset_(dataset), sampler_(sampler) {
  if (!synchronous) prefetch_ = std::make_unique<data::Prefetcher>(dataset, sampler, depth);
}

void BatchSource::set_prepare(Prepare prepare) {
  prepare_ = std::move(prepare);
  if (!prefetch_) return;
  if (!prepare_) return prefetch_->set_prepare(nullptr);
  prefetch_->set_prepare([this](data::Batch& b, int64_t i) { prepare_(b, first_step_ + i); });
}

void BatchSource::restart(int64_t first_step) {
  epoch_start_ = std::chrono::steady_clock::now();
  wait_epoch_ = 0;
  halt();  // the reading thread reads first_step_: write it while none runs
  first_step_ = first_step;
  served_ = 0;
}

void BatchSource::start_epoch(int64_t epoch, int64_t first_step) {
  restart(first_step);
  if (prefetch_) return prefetch_->start_epoch(epoch);
  sampler_.start_epoch(epoch);
  state_ = sampler_.state();
}

void BatchSource::resume(const nlohmann::json& state, int64_t first_step) {
  restart(first_step);
  if (prefetch_) return prefetch_->resume(state);
  sampler_.load_state(state);
  state_ = sampler_.state();
}

void BatchSource::halt() {
  if (prefetch_) prefetch_->halt();
}

bool BatchSource::next(data::Batch& out) {
  if (prefetch_) return prefetch_->next(out);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int64_t> ids;
  if (!sampler_.next(ids)) return false;
  out = dataset_.read(ids);
  state_ = sampler_.state();
  const double dt = since(t0);
  wait_ += dt;
  wait_epoch_ += dt;
  if (prepare_) prepare_(out, first_step_ + served_);  // the step's own work, not data wait
  ++served_;
  return true;
}

const nlohmann::json& BatchSource::state() const { return prefetch_ ? prefetch_->state() : state_; }

double BatchSource::wait_seconds() const { return prefetch_ ? prefetch_->wait_seconds() : wait_; }

double BatchSource::wait_fraction() const {
  if (prefetch_) return prefetch_->wait_fraction();
  const double t = since(epoch_start_);
  return t > 0 ? wait_epoch_ / t : 0.0;
}

}  // namespace fnvlp::train
