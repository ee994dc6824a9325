// fnvlp-finetune: retrieval fine-tuning (ITC + ITM) from a pretrained checkpoint, validated with
// ITM re-ranked retrieval at every epoch end; the best model by r_mean is kept in RUN/best/.
#include <cxxopts.hpp>
#include <iostream>
#include <string>
#include <vector>

#include "fnvlp/comm/job_main.hpp"
#include "fnvlp/core/config.hpp"
#include "fnvlp/finetune/finetune.hpp"
#include "fnvlp/store/run_lock.hpp"

#include "resume_data_option.hpp"

int main(int argc, char** argv) {
  return fnvlp::job_main(
      argc, argv, "fnvlp-finetune", [](fnvlp::Comm& comm, int argc, char** argv) {
        std::vector<std::string> config_paths;
        fnvlp::finetune::FinetuneOptions opt;
        std::vector<std::string> overrides;
        std::string resume_data;
        cxxopts::Options cli("fnvlp-finetune", "retrieval fine-tuning (run under srun/mpirun)");
        // clang-format off
    cli.add_options()
      ("config", "YAML config (jobs/configs/retrieval_*.yaml); repeat to layer overlays",
       cxxopts::value(config_paths))
      ("init", "pretrained checkpoint directory (weights and model config)",
       cxxopts::value(opt.init))
      ("init-from", "weights of other projects instead (ALBEF_4M.pth, an fnvlp export; DeiT + "
       "BERT files), safetensors or torch.save, into the config's model (repeatable)",
       cxxopts::value(opt.init_from))
      ("data", "training shards", cxxopts::value(opt.data_dir))
      ("val", "validation shards, evaluated at every epoch end", cxxopts::value(opt.val_dir))
      ("out", "run directory", cxxopts::value(opt.run_dir))
      ("set", "override a config key: --set eval.k_test=32 (repeatable)",
       cxxopts::value(overrides))
      ("resume", "auto (newest committed checkpoint) or a checkpoint directory",
       cxxopts::value(opt.resume));
        // clang-format on
        fnvlp::add_resume_data_option(cli, resume_data);
        const auto parsed = fnvlp::parse_cli(cli, argc, argv, comm, {"data", "out"});
        if (!parsed) return 0;
        opt.resume_on_changed_data = fnvlp::resume_on_changed_data(resume_data);
        const auto cfg =
            fnvlp::load_job_config<fnvlp::finetune::FinetuneConfig>(comm, config_paths, overrides);
        // One job writes a run directory: another live owner is a usage error (exit 2).
        const auto owner = fnvlp::store::own_directory(comm, opt.run_dir);
        return fnvlp::finetune::run_finetuning(comm, cfg, opt);
      });
}
