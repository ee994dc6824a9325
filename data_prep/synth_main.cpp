// fnvlp-synth: the embedded default dataset (rendered shapes + templated captions, ALBEF JSON with
// a "label" key). Same bytes for the same seed on any number of ranks.
#include <spdlog/spdlog.h>

#include <cxxopts.hpp>
#include <iostream>

#include "fnvlp/comm/job_main.hpp"
#include "fnvlp/data/synth.hpp"

int main(int argc, char** argv) {
  return fnvlp::job_main(argc, argv, "fnvlp-synth", [](fnvlp::Comm& comm, int argc, char** argv) {
    fnvlp::data::synth::Options o;
    cxxopts::Options cli("fnvlp-synth",
                         "Render the synthetic shapes dataset (optionally under mpirun/srun)");
    // clang-format off
    cli.add_options()
      ("out", "output directory", cxxopts::value(o.out_dir))
      ("images", "number of images", cxxopts::value(o.images)->default_value("10000"))
      ("captions-per-image", "captions per image",
       cxxopts::value(o.captions_per_image)->default_value("5"))
      ("classes", "semantic classes (shape x colour, at most 64)",
       cxxopts::value(o.classes)->default_value("16"))
      ("image-size", "square side in pixels", cxxopts::value(o.image_size)->default_value("64"))
      ("seed", "random seed (output is a pure function of it)",
       cxxopts::value(o.seed)->default_value("0"))
      ("val-fraction", "fraction of images (the last ones) in the val split",
       cxxopts::value(o.val_fraction)->default_value("0.1"));
    // clang-format on
    const auto parsed = fnvlp::parse_cli(cli, argc, argv, comm, {"out"});
    if (!parsed) return 0;
    if (comm.is_root()) {
      spdlog::info("fnvlp-synth: {} images x {} captions, {} classes, {} px, seed {} -> {}",
                   o.images, o.captions_per_image, o.classes, o.image_size, o.seed, o.out_dir);
    }
    const auto r = fnvlp::data::synth::generate(o, comm);
    if (comm.is_root()) {
      spdlog::info(
          "fnvlp-synth: {} images ({} train, {} val), {} captions, {:.2f} s, "
          "{:.0f} images/s ({} ranks) -> {}",
          r.images, r.train, r.val, r.captions, r.seconds, r.images / r.seconds, comm.size(),
          o.out_dir);
    }
    return 0;
  });
}
