// fnvlp-shard: image-caption data -> checksummed HDF5 shards + manifest.json (ARCHITECTURE.md §2).
#include <spdlog/spdlog.h>

#include <cxxopts.hpp>
#include <iostream>

#include "fnvlp/comm/job_main.hpp"
#include "fnvlp/comm/watchdog.hpp"
#include "fnvlp/core/config.hpp"
#include "fnvlp/data/shard_job.hpp"

int main(int argc, char** argv) {
  return fnvlp::job_main(argc, argv, "fnvlp-shard", [](fnvlp::Comm& comm, int argc, char** argv) {
    fnvlp::data::ShardJobOptions o;
    double watchdog_s = 1800;
    cxxopts::Options cli("fnvlp-shard",
                         "Shard image-caption data into HDF5 (run under mpirun/srun)");
    // clang-format off
    cli.add_options()
      ("input", "ALBEF JSON, COCO captions JSON or Flickr token file", cxxopts::value(o.input))
      ("format", "albef | coco | flickr-token", cxxopts::value(o.format)->default_value(o.format))
      ("image-root", "directory the records' image paths are relative to", cxxopts::value(o.image_root))
      ("vocab", "WordPiece vocabulary (bert-base-uncased)", cxxopts::value(o.vocab))
      ("out", "output dataset directory", cxxopts::value(o.out))
      ("split-file", "JSON {split: [image ids]}", cxxopts::value(o.split_file))
      ("split", "split to keep (with --split-file)", cxxopts::value(o.split))
      ("image-size", "raw: the stored square's side in pixels", cxxopts::value(o.image_size)->default_value("128"))
      ("image-codec", "raw (decoded squares) | jpeg (JPEG streams at their aspect ratio, for "
       "crops from the full image and ~5x fewer bytes)", cxxopts::value(o.image_codec)->default_value(o.image_codec))
      ("max-side", "jpeg: longest stored side in pixels", cxxopts::value(o.max_side)->default_value(std::to_string(o.max_side)))
      ("jpeg-quality", "jpeg: encoder quality 1..100", cxxopts::value(o.jpeg_quality)->default_value(std::to_string(o.jpeg_quality)))
      ("max-len", "tokens per caption incl. [CLS]/[SEP]", cxxopts::value(o.max_len)->default_value("30"))
      ("shard-size", "captions per shard", cxxopts::value(o.shard_size)->default_value("4096"))
      ("max-reject-fraction", "fail above this fraction of rejected inputs",
       cxxopts::value(o.max_reject_fraction)->default_value("0.01"))
      ("max-image-bytes", "reject image files larger than this unread",
       cxxopts::value(o.max_image_bytes)->default_value(std::to_string(o.max_image_bytes)))
      ("allow-outside-root", "read images that resolve outside --image-root (absolute paths, "
       "'..', symlinks) instead of rejecting them", cxxopts::value(o.allow_outside_root))
      ("image-chunk", "images per HDF5 chunk (1..64)", cxxopts::value(o.image_chunk)->default_value("8"))
      ("threads", "helper threads per rank (decode, checksums)", cxxopts::value(o.threads)->default_value("1"))
      ("verify", "check DIR (manifest, sha256, every chunk) instead of sharding", cxxopts::value<std::string>())
      ("watchdog-s", "abort the job (exit 4) when a rank reports no progress for this many "
       "seconds (<= 0: off)", cxxopts::value(watchdog_s)->default_value("1800"));
    // clang-format on
    const auto parsed = fnvlp::parse_cli(cli, argc, argv, comm);
    if (!parsed) return 0;
    const cxxopts::ParseResult& args = *parsed;
    const fnvlp::ToolWatchdog dog(comm, watchdog_s);
    if (args.count("verify")) {
      const std::string dir = args["verify"].as<std::string>();
      int64_t pairs = 0;
      const auto problems = fnvlp::data::verify_dataset_collective(comm, dir, &pairs);
      if (comm.is_root()) {
        for (const auto& p : problems) spdlog::error("verify: {}", p);
        if (problems.empty())
          spdlog::info("verify: {} OK ({} pairs, every chunk read)", dir, pairs);
        else
          spdlog::error("verify: {} FAILED with {} problem(s)", dir, problems.size());
      }
      return problems.empty() ? 0 : 1;
    }
    if (comm.is_root())
      spdlog::info("fnvlp-shard options:\n{}", fnvlp::config::dump(fnvlp::config::to_yaml(o)));
    const auto r = fnvlp::data::run_shard_job(comm, o);
    if (comm.is_root())
      spdlog::info(
          "fnvlp-shard: {} pairs, {} images, {} shards, {} rejected, {:.1f} s, {:.0f} images/s "
          "({} ranks) -> {}",
          r.num_pairs, r.num_images, r.num_shards, r.rejects, r.seconds,
          r.images_decoded / r.seconds, comm.size(), o.out);
    if (comm.is_root()) spdlog::info("fnvlp-shard: phases on rank 0: {}", r.phases);
    return 0;
  });
}
