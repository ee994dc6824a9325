#include "fnvlp/finetune/finetune.hpp"

#include <spdlog/spdlog.h>

#include <memory>
#include <optional>

#include "fnvlp/core/config.hpp"
#include "fnvlp/data/dataset.hpp"
#include "fnvlp/data/shard_job.hpp"
#include "fnvlp/model/albef.hpp"
#include "fnvlp/store/best.hpp"
#include "fnvlp/store/pretrained.hpp"
#include "fnvlp/train/trainer.hpp"

namespace fnvlp::finetune {

int run_finetuning(const Comm& comm, FinetuneConfig cfg, const FinetuneOptions& opt) {
  cfg.eval.validate();
  train::PretrainOptions base;
  base.data_dir = opt.data_dir;
  base.run_dir = opt.run_dir;
  base.resume = opt.resume;
  base.resume_on_changed_data = opt.resume_on_changed_data;
  if (!opt.init.empty()) {
    // The pretrained architecture is what gets fine-tuned: the config's model section yields.
    cfg.model = store::open_pretrained(comm, opt.init);
    base.init_checkpoint = opt.init;
  }
  base.init_from = opt.init_from;
  base.config_yaml = config::dump(config::to_yaml(cfg));

  std::unique_ptr<data::PairDataset> val;
  std::optional<store::BestCheckpoint> best;
  if (!opt.val_dir.empty()) {
    if (cfg.data.verify == train::ShardVerify::kFull)
      data::verify_shard_checksums(comm, opt.val_dir);
    comm.collective([&] { val = std::make_unique<data::PairDataset>(opt.val_dir); });
    base.on_epoch_end = [&](model::AlbefImpl& model, int64_t epoch, int64_t step) {
      if (!best) best.emplace(opt.run_dir, comm, "r_mean");
      const eval::RetrievalEvalResult r = eval::evaluate_retrieval(comm, model, *val, cfg.eval);
      const bool improved = best->update(r.to_json(), step, epoch, model, cfg.model);
      if (comm.is_root())
        spdlog::info(
            "val epoch={} step={} txt_r1={:.2f} img_r1={:.2f} r_mean={:.2f} (ITC only {:.2f}, "
            "k_test {}, {:.0f}s){}",
            epoch, step, r.itm.txt_r1, r.itm.img_r1, r.itm.r_mean(), r.itc.r_mean(), r.k_test,
            r.seconds, improved ? " new best" : "");
      nlohmann::json rec = r.to_json("val_");
      rec["val_best_r_mean"] = best->best_value();
      rec["val_best_step"] = best->best_step();
      return rec;
    };
  }
  return train::run_pretraining(comm, cfg, base);
}

}  // namespace fnvlp::finetune
