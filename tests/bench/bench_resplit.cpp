// Peak memory and time of resuming a uniform epoch on another rank count (issue 27 benchmark):
// rank 0 of R_NEW ranks loads the state of R_OLD ranks stopped halfway through an epoch of N pairs
// (UniformSampler::load_state, which replays the finished segment block by block), or, with
// --whole-pool, the replay it replaced (every pair still planned sorted into one pool).
//   build/tests/bench/bench_resplit N R_OLD R_NEW BATCH [--whole-pool]
// Prints the growth of the peak resident set over the load (VmHWM after, reset by
// /proc/self/clear_refs, minus VmRSS before), its wall time and the batches left.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "../unit/data/whole_pool_replay.hpp"
#include "fnvlp/data/sampler.hpp"
#include "proc_status.hpp"

int main(int argc, char** argv) {
  using namespace fnvlp::data;
  using fnvlp::bench::status_mib;
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s N R_OLD R_NEW BATCH [--whole-pool]\n", argv[0]);
    return 2;
  }
  const int64_t n = std::atoll(argv[1]), batch = std::atoll(argv[4]);
  const int r_old = std::atoi(argv[2]), r_new = std::atoi(argv[3]);
  const bool whole = argc > 5 && std::string(argv[5]) == "--whole-pool";
  const uint64_t seed = 7;
  const int64_t epoch = 1;
  nlohmann::json st;
  int64_t cursor = 0;
  {
    UniformSampler s(BlockPartition(n, r_old), batch, seed, 0);
    s.start_epoch(epoch);
    cursor = s.batches_per_epoch() / 2;
    std::vector<int64_t> ids;
    for (int64_t b = 0; b < cursor; ++b) s.next(ids);
    st = s.state();
  }
  const double rss0 = status_mib("VmRSS:");
  std::ofstream("/proc/self/clear_refs") << "5";
  const auto t0 = std::chrono::steady_clock::now();
  int64_t left = 0;
  if (whole) {
    left = static_cast<int64_t>(
        whole_pool::reference(n, {{r_old, batch}, {r_new, batch}}, {cursor}, seed, epoch, 0)
            .size());
  } else {
    UniformSampler s(BlockPartition(n, r_new), batch, seed, 0);
    s.load_state(st);
    left = s.batches_remaining();
  }
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s N=%lld %d->%d ranks B=%lld: peak +%.1f MiB, %.2f s, %lld batches left\n",
              whole ? "whole-pool" : "by-block", static_cast<long long>(n), r_old, r_new,
              static_cast<long long>(batch), status_mib("VmHWM:") - rss0, sec,
              static_cast<long long>(left));
  return 0;
}
