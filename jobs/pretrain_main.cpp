// fnvlp-pretrain: ALBEF-style pretraining over MPI ranks (ARCHITECTURE.md §1, §5, §7).
#include <algorithm>
#include <cstring>
#include <cxxopts.hpp>
#include <iostream>

#include "fnvlp/comm/job_main.hpp"
#include "fnvlp/core/config.hpp"
#include "fnvlp/store/run_lock.hpp"
#include "fnvlp/train/trainer.hpp"

#include "resume_data_option.hpp"

int main(int argc, char** argv) {
  return fnvlp::job_main(
      argc, argv, "fnvlp-pretrain", [](fnvlp::Comm& comm, int argc, char** argv) {
        std::vector<std::string> config_paths;
        fnvlp::train::PretrainOptions opt;
        std::vector<std::string> overrides;
        std::string resume_data;
        bool print_config = false;
        cxxopts::Options cli("fnvlp-pretrain", "ALBEF-style pretraining (run under srun/mpirun)");
        // clang-format off
    cli.add_options()
      ("config", "YAML config (jobs/configs/*.yaml); repeat to layer overlays "
       "(--config tiny.yaml --config methods/glofnd.yaml)", cxxopts::value(config_paths))
      ("data", "sharded dataset directory (fnvlp-shard)", cxxopts::value(opt.data_dir))
      ("out", "run directory", cxxopts::value(opt.run_dir))
      ("val", "held-out shards: zero-shot retrieval at every epoch end", cxxopts::value(opt.val_dir))
      ("set", "override a config key: --set train.batch_size=64 (repeatable)",
       cxxopts::value(overrides))
      ("resume", "auto (newest committed checkpoint) or a checkpoint directory",
       cxxopts::value(opt.resume))
      ("init-from", "start from other projects' weights: DeiT/ViT (timm), BERT (Hugging Face) "
       "or ALBEF files, safetensors or torch.save (repeatable: --init-from deit.pth --init-from "
       "bert.safetensors); report in RUN/init_weights.json", cxxopts::value(opt.init_from))
      ("print-config", "print the resolved config (every key with its value after --config and "
       "--set) as YAML and exit", cxxopts::value(print_config));
        // clang-format on
        fnvlp::add_resume_data_option(cli, resume_data);
        // --print-config needs no data or run directory.
        const bool printing = std::any_of(argv + 1, argv + argc, [](const char* a) {
          return std::strcmp(a, "--print-config") == 0;
        });
        const auto parsed = fnvlp::parse_cli(
            cli, argc, argv, comm,
            printing ? std::vector<std::string>{} : std::vector<std::string>{"data", "out"});
        if (!parsed) return 0;
        opt.resume_on_changed_data = fnvlp::resume_on_changed_data(resume_data);
        std::vector<std::string> notes;
        const auto cfg = fnvlp::load_job_config<fnvlp::train::PretrainConfig>(comm, config_paths,
                                                                              overrides, &notes);
        if (comm.is_root())
          for (const auto& n : notes) std::cerr << "fnvlp-pretrain: " << n << "\n";
        opt.config_yaml = fnvlp::config::dump(fnvlp::config::to_yaml(cfg));
        if (print_config) {
          if (comm.is_root()) std::cout << opt.config_yaml;
          return 0;
        }
        // One job writes a run directory: another live owner is a usage error (exit 2).
        const auto owner = fnvlp::store::own_directory(comm, opt.run_dir);
        return fnvlp::train::run_pretraining(comm, cfg, opt);
      });
}
