// fnvlp-finetune: retrieval fine-tuning (ITC + ITM) from a pretrained checkpoint, validated with
// ITM re-ranked retrieval at every epoch end; the best model by r_mean is kept in RUN/best/.
#include <cxxopts.hpp>
#include <iostream>

#include "fnvlp/comm/job_main.hpp"
#include "fnvlp/core/config.hpp"
#include "fnvlp/finetune/finetune.hpp"

int main(int argc, char** argv) {
  return fnvlp::job_main(
      argc, argv, "fnvlp-finetune", [](fnvlp::Comm& comm, int argc, char** argv) {
        std::string config_path;
        fnvlp::finetune::FinetuneOptions opt;
        std::vector<std::string> overrides;
        cxxopts::Options cli("fnvlp-finetune", "retrieval fine-tuning (run under srun/mpirun)");
        // clang-format off
    cli.add_options()
      ("config", "YAML config (jobs/configs/retrieval_*.yaml)", cxxopts::value(config_path))
      ("init", "pretrained checkpoint directory (weights and model config)",
       cxxopts::value(opt.init))
      ("data", "training shards", cxxopts::value(opt.data_dir))
      ("val", "validation shards, evaluated at every epoch end", cxxopts::value(opt.val_dir))
      ("out", "run directory", cxxopts::value(opt.run_dir))
      ("set", "override a config key: --set eval.k_test=32 (repeatable)",
       cxxopts::value(overrides))
      ("resume", "auto (newest committed checkpoint) or a checkpoint directory",
       cxxopts::value(opt.resume))
      ("h,help", "show this help");
        // clang-format on
        const auto args = cli.parse(argc, argv);
        if (args.count("help")) {
          if (comm.is_root()) std::cout << cli.help() << "\n";
          return 0;
        }
        FNVLP_CHECK(!opt.data_dir.empty() && !opt.run_dir.empty(), "--data and --out are required");
        const auto cfg =
            fnvlp::config::load_typed<fnvlp::finetune::FinetuneConfig>(config_path, overrides);
        return fnvlp::finetune::run_finetuning(comm, cfg, opt);
      });
}
