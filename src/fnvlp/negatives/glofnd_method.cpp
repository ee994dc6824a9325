#include "fnvlp/negatives/glofnd_method.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "fnvlp/similarity/simstat.hpp"
#include "fnvlp/store/checkpoint.hpp"

namespace fnvlp::negatives {

namespace {
GlofndOptions with_alpha(GlofndOptions o, double alpha) {
  o.alpha = alpha;
  return o;
}
std::vector<int64_t> block_pair_ids(const data::PairRange& block) {
  std::vector<int64_t> ids(static_cast<size_t>(block.size()));
  for (int64_t p = block.begin; p < block.end; ++p) ids[static_cast<size_t>(p - block.begin)] = p;
  return ids;
}
}  // namespace

GlofndMethod::GlofndMethod(const MethodEnv& env, double alpha, int64_t start_epoch,
                           GlofndOptions opt)
    : env_(env),
      start_epoch_(start_epoch),
      opt_(with_alpha(opt, alpha)),
      state_(env.block(), opt_, env.device) {
  FNVLP_CHECK(!opt_.exact_init || start_epoch_ >= 1,
              "negatives.glofnd.exact_init needs negatives.start_epoch >= 1 (the exact quantiles "
              "come from the previous epoch's embeddings)");
}

bool GlofndMethod::wants_epoch_export(int64_t next_epoch) const {
  if (!opt_.exact_init || next_epoch < start_epoch_) return false;
  if (next_epoch == start_epoch_) return true;
  return opt_.reanchor_every > 0 && (next_epoch - start_epoch_) % opt_.reanchor_every == 0;
}

// GloFND's tracker moves each λ by at most ~lr per visit, about one visit per epoch; starting it
// at the exact quantile removes that lag. Reported: the cost and how far λ was from the exact
// values when they replaced it (mean |λ − exact| over the block's anchors, per side).
void GlofndMethod::epoch_exported(int64_t next_epoch, const std::string& path) {
  const auto t0 = std::chrono::steady_clock::now();
  const data::PairRange b = env_.block();
  similarity::ExactThresholds exact;
  env_.comm.collective(
      [&] { exact = similarity::exact_thresholds(path, b.begin, b.size(), opt_.alpha); });
  std::vector<double> gap(4, 0.0);  // sum |λ − exact| and count, image then text
  auto restart = [&](GlofndSide& side, const std::vector<float>& thr, double* g) {
    const std::vector<float> lambda = side.lambdas();
    for (size_t i = 0; i < thr.size(); ++i)
      if (!std::isnan(thr[i])) {
        g[0] += std::abs(static_cast<double>(lambda[i]) - thr[i]);
        g[1] += 1;
      }
    side.restart_from(thr);
  };
  restart(state_.image, exact.image, &gap[0]);
  restart(state_.text, exact.text, &gap[2]);
  env_.comm.allreduce_sum(gap);
  const double seconds = env_.comm.allreduce_max(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  restart_ = {{"glofnd_exact_init_epoch", next_epoch},
              {"glofnd_exact_init_seconds", seconds},
              {"glofnd_exact_init_gap_image", gap[1] > 0 ? gap[0] / gap[1] : 0.0},
              {"glofnd_exact_init_gap_text", gap[3] > 0 ? gap[2] / gap[3] : 0.0}};
  if (env_.comm.is_root())
    spdlog::info(
        "glofnd: λ of epoch {} restarted from the exact (1−α)-quantiles of {} in {:.2f} s "
        "(mean |λ − exact| before: image {:.4f}, text {:.4f})",
        next_epoch, path, seconds, restart_["glofnd_exact_init_gap_image"].get<double>(),
        restart_["glofnd_exact_init_gap_text"].get<double>());
}

std::vector<int64_t> GlofndMethod::static_key(const data::Batch& host, const StepPosition& at) {
  if (at.epoch < start_epoch_) return {0};
  // The most rows of one anchor in the batch: the update's round count.
  std::vector<int64_t> ids = to_vector(host.pair_id);
  std::sort(ids.begin(), ids.end());
  int64_t rounds = ids.empty() ? 0 : 1, run = 1;
  for (size_t i = 1; i < ids.size(); ++i) {
    run = ids[i] == ids[i - 1] ? run + 1 : 1;
    rounds = std::max(rounds, run);
  }
  return {rounds};
}

void GlofndMethod::stage(const data::Batch& host, const StepPosition& at,
                         const std::vector<int64_t>& key) {
  staged_active_ = key.at(0) > 0;
  if (!staged_active_) return;
  state_.image.set_epoch(at.epoch);
  state_.text.set_epoch(at.epoch);
  const std::vector<int64_t> pids = to_vector(host.pair_id);
  state_.image.stage(pids, key[0]);
  state_.text.stage(pids, key[0]);
  fn_.allocate(env_.device);
  if (!finite_.defined())
    finite_ = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(env_.device));
}

void GlofndMethod::commit(StepContext& s) {
  if (!staged_active_) return;
  state_.image.commit(s.finite);
  state_.text.commit(s.finite);
  finite_.copy_(s.finite);
}

void GlofndMethod::after_device_step(const StepPosition&) {
  if (!staged_active_) return;
  lambda_image_.push_back(state_.image.staged_lambdas().clone());
  lambda_text_.push_back(state_.text.staged_lambdas().clone());
  lambda_finite_.push_back(finite_.clone());
}

void GlofndMethod::adjust_itc(StepContext& s, loss::ItcInputs& in) {
  if (s.static_step) {
    if (!staged_active_) return;
    torch::NoGradGuard no_grad;
    const loss::ItcCosine cos = loss::itc_cosine(in);
    in.exclude_i2t = state_.image.update_and_filter_staged(cos.i2t, s.negative);
    in.exclude_t2i = state_.text.update_and_filter_staged(cos.t2i, s.negative);
    fn_.record(in.exclude_i2t, in.exclude_t2i, s.negative, s.batch.label, s.label_all);
    return;
  }
  if (s.epoch < start_epoch_) return;
  torch::NoGradGuard no_grad;
  state_.image.set_epoch(s.epoch);
  state_.text.set_epoch(s.epoch);
  const loss::ItcCosine cos = loss::itc_cosine(in);
  const std::vector<int64_t> pids = to_vector(s.host.pair_id);
  in.exclude_i2t = state_.image.update_and_filter(cos.i2t, s.negative, pids);
  in.exclude_t2i = state_.text.update_and_filter(cos.t2i, s.negative, pids);
  lambda_image_.push_back(state_.image.last_lambdas());
  lambda_text_.push_back(state_.text.last_lambdas());
  step_updated_ = true;
  fn_.record(in.exclude_i2t, in.exclude_t2i, s.negative, s.batch.label, s.label_all);
}

// The step's λ updates are undone and its λ leave the telemetry window; its filter counts stay
// (they describe what the filter did in the forward pass that was computed).
void GlofndMethod::skipped_step(StepContext&) {
  if (!step_updated_) return;
  state_.image.undo_last_update();
  state_.text.undo_last_update();
  lambda_image_.pop_back();
  lambda_text_.pop_back();
  step_updated_ = false;
}

void GlofndMethod::telemetry(nlohmann::json& m) {
  fn_.report(env_.comm, m);
  if (!restart_.empty()) {
    m.update(restart_);
    restart_ = nlohmann::json();
  }
  // The static step's rows of skipped steps leave here (the eager step pops them at the skip).
  torch::Tensor keep;
  if (!lambda_finite_.empty()) {
    const int64_t b = lambda_image_.empty() ? 0 : lambda_image_[0].numel();
    keep = torch::stack(lambda_finite_).gt(0).repeat_interleave(b).to(torch::kCPU);
    lambda_finite_.clear();
  }
  auto stats = [&](std::vector<torch::Tensor>& window, const char* side) {
    std::vector<float> local;
    if (!window.empty()) {  // one copy from the device per window
      torch::Tensor h = torch::cat(window).to(torch::kCPU).contiguous();
      if (keep.defined()) h = h.masked_select(keep).contiguous();
      local.assign(h.data_ptr<float>(), h.data_ptr<float>() + h.numel());
    }
    window.clear();
    std::vector<float> all = env_.comm.allgatherv(local);
    if (all.empty()) return;
    std::sort(all.begin(), all.end());
    double mean = 0;
    for (float x : all) mean += x;
    auto at = [&](double q) {
      return all[static_cast<size_t>(std::floor(q * static_cast<double>(all.size() - 1)))];
    };
    m[std::string("lambda_") + side + "_mean"] = mean / static_cast<double>(all.size());
    m[std::string("lambda_") + side + "_p5"] = at(0.05);
    m[std::string("lambda_") + side + "_p95"] = at(0.95);
  };
  stats(lambda_image_, "image");
  stats(lambda_text_, "text");
}

void GlofndMethod::save(const std::string& dir) {
  const std::vector<int64_t> ids = block_pair_ids(env_.block());
  store::save_per_pair(dir, "glofnd_image", env_.comm, ids, state_.image.export_rows(),
                       GlofndSide::kCols, env_.num_pairs);
  store::save_per_pair(dir, "glofnd_text", env_.comm, ids, state_.text.export_rows(),
                       GlofndSide::kCols, env_.num_pairs);
}

uint64_t GlofndMethod::state_bytes() const {
  // save_per_pair's file per side: kCols floats and a valid byte for every pair of the set.
  return 2 * static_cast<uint64_t>(env_.num_pairs) * (GlofndSide::kCols * sizeof(float) + 1);
}

// λ state by global pair_id: the rank's current block, whatever the rank count that wrote it.
void GlofndMethod::load(const std::string& dir, int) {
  const std::vector<int64_t> ids = block_pair_ids(env_.block());
  for (auto* side : {&state_.image, &state_.text}) {
    const std::string name = side == &state_.image ? "glofnd_image" : "glofnd_text";
    const store::PerPairRows rows = store::load_per_pair(dir, name, env_.comm, ids);
    FNVLP_CHECK(rows.cols == GlofndSide::kCols && rows.num_pairs_total == env_.num_pairs,
                dir << "/" << name << ".h5: " << rows.num_pairs_total << " pairs x " << rows.cols
                    << " columns, the dataset has " << env_.num_pairs << " pairs");
    const auto missing = std::count(rows.valid.begin(), rows.valid.end(), uint8_t{0});
    FNVLP_CHECK(missing == 0, dir << "/" << name << ".h5: " << missing
                                  << " pairs of this rank's block have no saved state");
    side->import_rows(rows.values);
  }
}

// The rank's block of the export: its own λ rows, no gather.
void GlofndMethod::export_embeddings(data::Embeddings& e) {
  const data::PairRange block = env_.block();
  FNVLP_CHECK(e.first == block.begin && e.size() == block.size(),
              "GloFND exports the thresholds of pairs " << block.begin << ".." << block.end
                                                        << ", the export holds " << e.first << ".."
                                                        << e.first + e.size());
  e.glofnd_lambda_image = state_.image.lambdas();
  e.glofnd_lambda_text = state_.text.lambdas();
}

}  // namespace fnvlp::negatives
