#include "fnvlp/store/pretrained.hpp"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <filesystem>

#include "fnvlp/comm/job_main.hpp"
#include "fnvlp/core/config.hpp"
#include "fnvlp/store/checkpoint.hpp"
#include "fnvlp/store/run_dir.hpp"

namespace fnvlp::store {

namespace fs = std::filesystem;

std::string resolve_checkpoint_dir(const std::string& dir) {
  std::error_code ec;
  const fs::path p = fs::canonical(dir, ec);
  FNVLP_CHECK(!ec, "checkpoint '" << dir << "' cannot be opened: " << ec.message());
  return p.string();
}

void write_model_config(const std::string& dir, const model::ModelConfig& mc) {
  write_file((fs::path(dir) / kModelConfigFile).string(), config::dump(config::to_yaml(mc)));
}

model::ModelConfig checkpoint_model_config(const std::string& dir) {
  const fs::path own = fs::path(dir) / kModelConfigFile;
  model::ModelConfig mc;
  if (fs::exists(own)) {
    config::from_yaml(config::load(own.string()), mc);
  } else {
    const fs::path run_config = fs::path(dir).parent_path().parent_path() / "config.yaml";
    FNVLP_CHECK(fs::exists(run_config), "checkpoint '" << dir << "' has no " << kModelConfigFile
                                                       << " and its run has no "
                                                       << run_config.string());
    const YAML::Node root = config::load(run_config.string());
    FNVLP_CHECK(root.IsMap() && root["model"],
                run_config.string() << " has no 'model' section (checkpoint '" << dir << "')");
    config::from_yaml(root["model"], mc);
  }
  mc.validate();
  return mc;
}

model::ModelConfig open_pretrained(const Comm& comm, const std::string& dir) {
  std::string yaml;
  comm.collective([&] {
    if (!comm.is_root()) return;
    const std::string resolved = resolve_checkpoint_dir(dir);
    const std::string why = verify_checkpoint(resolved, /*checksums=*/true);
    FNVLP_CHECK(why.empty(), "checkpoint '" << dir << "' cannot be used: " << why);
    yaml = config::dump(config::to_yaml(checkpoint_model_config(resolved)));
  });
  comm.bcast(yaml);
  model::ModelConfig mc;
  config::from_yaml(YAML::Load(yaml), mc);
  return mc;
}

void refuse_other_vocabulary(const std::string& checkpoint, const std::string& vocab_sha256,
                             const std::string& data_dir) {
  const fs::path state = fs::path(resolve_checkpoint_dir(checkpoint)) / "trainer.json";
  if (vocab_sha256.empty() || !fs::exists(state)) return;
  const auto j = nlohmann::json::parse(read_file(state.string()), nullptr, false);
  const std::string then =
      j.is_object() && j.contains("data") ? j["data"].value("vocab_sha256", std::string()) : "";
  if (then.empty() || then == vocab_sha256) return;
  throw UsageError("checkpoint " + checkpoint + " was trained on token ids of vocabulary " + then +
                   "; " + data_dir + " is tokenised with vocabulary " + vocab_sha256 +
                   " (its manifest.json): shard the data with the checkpoint's vocabulary");
}

void load_pretrained_weights(const Comm& comm, const std::string& dir, torch::nn::Module& model) {
  comm.collective([&] { load_module(resolve_checkpoint_dir(dir), "model", model); });
  if (comm.is_root()) spdlog::info("loaded model weights from {}", resolve_checkpoint_dir(dir));
}

}  // namespace fnvlp::store
