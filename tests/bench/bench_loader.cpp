// The training loader's work per batch, without a step: PairDataset::read of a random batch (the
// HDF5 path the trainer's prefetch thread runs) and Augmenter::train of its images (for jpeg
// shards the decode too), timed apart.
// A GPU step shorter than this waits for its batch (tests/bench/README.md, "GPU step").
// Usage: bench_loader --data SHARDS [--batch 64] [--image-res 256] [--threads 1] [--batches 20]
//        [--cache-mb 0]; one JSON line. tests/bench/gpu_pretrain.sh runs it on each preset.
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cxxopts.hpp>
#include <vector>

#include "fnvlp/data/augment.hpp"
#include "fnvlp/data/dataset.hpp"
#include "fnvlp/data/sampler.hpp"

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options cli("bench_loader", "the loader's read and augmentation per batch");
  cli.add_options()("data", "shard directory", cxxopts::value<std::string>())(
      "batch", "pairs per batch", cxxopts::value<int64_t>()->default_value("64"))(
      "batches", "timed batches", cxxopts::value<int64_t>()->default_value("20"))(
      "image-res", "augmented image side (the model's)",
      cxxopts::value<int64_t>()->default_value("256"))("threads", "intra-op threads (augmentation)",
                                                       cxxopts::value<int>()->default_value("1"))(
      "cache-mb", "chunk cache per shard, MiB (0: the trainer's default)",
      cxxopts::value<int64_t>()->default_value("0"))(
      "seed", "", cxxopts::value<uint64_t>()->default_value("1"));
  const auto a = cli.parse(argc, argv);
  if (!a.count("data")) {
    std::fprintf(stderr, "%s\n", cli.help().c_str());
    return 2;
  }
  at::set_num_threads(a["threads"].as<int>());
  fnvlp::data::PairDatasetOptions opt;
  opt.chunk_cache_bytes = a["cache-mb"].as<int64_t>() << 20;
  const fnvlp::data::PairDataset ds(a["data"].as<std::string>(), opt);
  const int64_t b = a["batch"].as<int64_t>(), n = ds.num_pairs();
  const fnvlp::data::Augmenter aug(fnvlp::data::AugmentConfig{}, a["image-res"].as<int64_t>());
  // The trainer's own sampler (one rank): the batches it would read, epoch after epoch.
  fnvlp::data::UniformSampler sampler(fnvlp::data::BlockPartition(n, 1), b,
                                      a["seed"].as<uint64_t>(), 0);
  int64_t epoch = 0;
  sampler.start_epoch(epoch);
  if (sampler.batches_per_epoch() == 0) {
    std::fprintf(stderr, "bench_loader: %lld pairs make no batch of %lld\n",
                 static_cast<long long>(n), static_cast<long long>(b));
    return 2;
  }
  std::vector<double> read_ms, aug_ms;
  torch::Generator gen = at::detail::createCPUGenerator(1);
  for (int64_t i = -2; i < a["batches"].as<int64_t>(); ++i) {  // 2 untimed: files, caches
    std::vector<int64_t> ids;
    while (!sampler.next(ids)) sampler.start_epoch(++epoch);
    auto t0 = std::chrono::steady_clock::now();
    const fnvlp::data::Batch batch = ds.read(ids);
    const double r = ms_since(t0);
    t0 = std::chrono::steady_clock::now();
    const torch::Tensor x = aug.train(batch, gen);
    const double g = ms_since(t0);
    if (i >= 0) {
      read_ms.push_back(r);
      aug_ms.push_back(g);
    }
  }
  const double r = median(read_ms), g = median(aug_ms);
  std::printf(
      "{\"pairs\": %lld, \"codec\": \"%s\", \"image_size\": %lld, \"batch\": %lld, \"threads\": "
      "%d, \"cache_mb\": "
      "%lld, \"read_ms\": %.2f, \"augment_ms\": %.2f, \"samples_per_s\": %.1f}\n",
      static_cast<long long>(n), fnvlp::data::image_codec_name(ds.manifest().image_codec),
      static_cast<long long>(ds.image_size()), static_cast<long long>(b), a["threads"].as<int>(),
      static_cast<long long>(a["cache-mb"].as<int64_t>()), r, g, 1000.0 * b / (r + g));
  return 0;
}
