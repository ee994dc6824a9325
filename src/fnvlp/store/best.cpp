#include "fnvlp/store/best.hpp"

#include <spdlog/spdlog.h>

#include <filesystem>

#include "fnvlp/store/pretrained.hpp"
#include "fnvlp/store/run_dir.hpp"

namespace fnvlp::store {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
CheckpointConfig keep_one() {
  CheckpointConfig c;
  c.keep_last = 1;
  return c;
}
}  // namespace

BestCheckpoint::BestCheckpoint(const std::string& run_dir, const Comm& comm, std::string metric)
    : run_dir_(run_dir),
      metric_(std::move(metric)),
      comm_(comm),
      ckpt_(run_dir + "/best", comm, keep_one()) {
  std::vector<double> state = {0, -1};
  comm_.collective([&] {
    if (!comm_.is_root() || !fs::exists(json_path())) return;
    const json j = json::parse(read_file(json_path()), nullptr, false);
    FNVLP_CHECK(j.is_object() && j.contains("value") && j.contains("step") &&
                    j.value("metric", "") == metric_,
                json_path() << ": not a best-checkpoint record for metric " << metric_);
    state = {j["value"].get<double>(), static_cast<double>(j["step"].get<int64_t>())};
  });
  comm_.bcast(state.data(), state.size());
  value_ = state[0];
  step_ = static_cast<int64_t>(state[1]);
}

bool BestCheckpoint::update(const json& metrics, int64_t step, int64_t epoch,
                            const torch::nn::Module& model, const model::ModelConfig& mc) {
  FNVLP_CHECK(metrics.contains(metric_) && metrics[metric_].is_number(),
              "best checkpoint: validation metrics have no number '" << metric_ << "'");
  const double v = metrics[metric_].get<double>();
  if (has_best() && !(v > value_)) return false;  // every rank sees the same metrics
  const CheckpointInfo info = ckpt_.save(step, [&](const std::string& dir) {
    if (!comm_.is_root()) return;
    save_module(dir, "model", model);
    write_model_config(dir, mc);
  });
  value_ = v;
  step_ = step;
  comm_.collective([&] {
    if (!comm_.is_root()) return;
    const json rec = {{"metric", metric_},      {"value", v},
                      {"step", step},           {"epoch", epoch},
                      {"checkpoint", info.dir}, {"metrics", metrics}};
    write_file_atomic(json_path(), rec.dump(2) + "\n");
    spdlog::info("best: {} = {:.2f} at step {} (epoch {}) -> {}", metric_, v, step, epoch,
                 info.dir);
  });
  return true;
}

}  // namespace fnvlp::store
