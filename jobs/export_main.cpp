// fnvlp-export: a committed checkpoint's model as one safetensors file in ALBEF's parameter names
// (store/weights_io.hpp), for PyTorch users: ALBEF's own code, Hugging Face, timm (README.md
// "Weights in and out" loads it). Runs as one process (or rank 0 of any launch).
#include <cstdio>
#include <cxxopts.hpp>
#include <string>

#include "fnvlp/comm/job_main.hpp"
#include "fnvlp/model/albef.hpp"
#include "fnvlp/store/pretrained.hpp"
#include "fnvlp/store/weights_io.hpp"
#include "fnvlp/version.hpp"

int main(int argc, char** argv) {
  return fnvlp::job_main(argc, argv, "fnvlp-export", [](fnvlp::Comm& comm, int argc, char** argv) {
    std::string checkpoint, out;
    cxxopts::Options cli(
        "fnvlp-export", "a checkpoint's model as safetensors in ALBEF's names (model_pretrain.py)");
    // clang-format off
    cli.add_options()
      ("checkpoint", "committed checkpoint directory (RUN/checkpoints/latest, RUN/best, ...)",
       cxxopts::value(checkpoint))
      ("out", "the .safetensors file to write (atomically)", cxxopts::value(out));
    // clang-format on
    if (!fnvlp::parse_cli(cli, argc, argv, comm, {"checkpoint", "out"})) return 0;
    const fnvlp::model::ModelConfig mc = fnvlp::store::open_pretrained(comm, checkpoint);
    fnvlp::model::Albef model(mc);
    fnvlp::store::load_pretrained_weights(comm, checkpoint, *model);
    comm.collective([&] {
      if (!comm.is_root()) return;
      fnvlp::store::export_albef_safetensors(
          *model, out,
          {{"fnvlp.checkpoint", fnvlp::store::resolve_checkpoint_dir(checkpoint)},
           {"fnvlp.version", std::string(fnvlp::kVersion) + " " + fnvlp::kGitCommit}});
      std::printf("fnvlp-export: %s -> %s (%lld parameters, ALBEF names)\n", checkpoint.c_str(),
                  out.c_str(), static_cast<long long>(model->num_parameters()));
    });
    return 0;
  });
}
