// Memory per rank of GloFND's partitioned state (issue 4 benchmark): a rank allocates and touches
// the λ / Adam state of its block only. Prints the state bytes and the resident-set growth for
// N pairs over R ranks, against what GloFND's reference code holds (λ for all N anchors, both
// modalities, on every rank).
//   build/tests/bench/bench_glofnd_memory [N=4000000] [R=8]
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "fnvlp/data/sampler.hpp"
#include "fnvlp/negatives/glofnd.hpp"

namespace {
long rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  return -1;
}
}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 4000000;
  const int ranks = argc > 2 ? std::atoi(argv[2]) : 8;
  const fnvlp::data::BlockPartition part(n, ranks);
  for (int r : {0, ranks - 1}) {
    const long before = rss_kib();
    fnvlp::negatives::GlofndState state(part.block(r), {});
    // Touch every anchor's state once, as an epoch of updates does.
    const auto cos = torch::full({1, 4}, 0.5f);
    const auto neg = torch::ones({1, 4}, torch::kBool);
    for (int64_t p = part.block(r).begin; p < part.block(r).end; p += 4096)
      state.image.update_and_filter(cos, neg, {p});
    const long after = rss_kib();
    const size_t bytes = state.image.state_bytes() + state.text.state_bytes();
    std::printf(
        "N=%lld R=%d rank %d: block %lld pairs, state %.1f MiB (%.1f B/pair), RSS +%.1f MiB; "
        "all N on one rank would be %.1f MiB\n",
        static_cast<long long>(n), ranks, r, static_cast<long long>(part.block(r).size()),
        bytes / 1048576.0, static_cast<double>(bytes) / part.block(r).size(),
        (after - before) / 1024.0, bytes / 1048576.0 * n / part.block(r).size());
  }
  return 0;
}
