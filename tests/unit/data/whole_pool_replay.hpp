#pragma once
// The whole-pool replay of a resized uniform epoch that UniformSampler's block-by-block replay
// replaced (it sorts every planned pair into one pool after each finished segment): the reference
// of tests/unit/data/test_sampler_replay.cpp and the baseline of tests/bench/bench_resplit.cpp.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "fnvlp/data/sampler.hpp"

namespace fnvlp::data::whole_pool {

struct Config {
  int ranks;
  int64_t batch;
};

// The whole-pool replay: after each finished segment the sorted pool of every pair still planned.
inline std::vector<int64_t> pool_order(const std::vector<int64_t>* pool, PairRange range,
                                       uint64_t seed, int64_t epoch, size_t segment) {
  std::vector<int64_t> out;
  if (pool == nullptr) {
    out.resize(static_cast<size_t>(range.size()));
    std::iota(out.begin(), out.end(), range.begin);
  } else {
    out.assign(std::lower_bound(pool->begin(), pool->end(), range.begin),
               std::lower_bound(pool->begin(), pool->end(), range.end));
  }
  shuffle(out, hash_key({seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(range.begin),
                         static_cast<uint64_t>(range.end), static_cast<uint64_t>(segment)}));
  return out;
}

inline int64_t pool_batches(const std::vector<int64_t>* pool, const BlockPartition& p,
                            int64_t batch) {
  if (pool == nullptr) return p.min_block_size() / batch;
  int64_t least = std::numeric_limits<int64_t>::max();
  for (int r = 0; r < p.ranks(); ++r) {
    const PairRange b = p.block(r);
    least = std::min<int64_t>(least, std::lower_bound(pool->begin(), pool->end(), b.end) -
                                         std::lower_bound(pool->begin(), pool->end(), b.begin));
  }
  return least / batch;
}

// Batches of `rank` in the last configuration after the finished (config, cursor) segments.
inline std::vector<std::vector<int64_t>> reference(int64_t n, const std::vector<Config>& configs,
                                                   const std::vector<int64_t>& cursors,
                                                   uint64_t seed, int64_t epoch, int rank) {
  std::vector<int64_t> pool;
  const std::vector<int64_t>* pool_ptr = nullptr;
  for (size_t k = 0; k < cursors.size(); ++k) {
    const BlockPartition p(n, configs[k].ranks);
    const int64_t batches = pool_batches(pool_ptr, p, configs[k].batch);
    std::vector<int64_t> rest;
    for (int r = 0; r < p.ranks(); ++r) {
      const auto o = pool_order(pool_ptr, p.block(r), seed, epoch, k);
      rest.insert(rest.end(), o.begin() + cursors[k] * configs[k].batch,
                  o.begin() + batches * configs[k].batch);
    }
    std::sort(rest.begin(), rest.end());
    pool = std::move(rest);
    pool_ptr = &pool;
  }
  const size_t k = cursors.size();
  const BlockPartition p(n, configs[k].ranks);
  const auto o = pool_order(pool_ptr, p.block(rank), seed, epoch, k);
  std::vector<std::vector<int64_t>> out;
  const int64_t batches = pool_batches(pool_ptr, p, configs[k].batch);
  for (int64_t b = 0; b < batches; ++b)
    out.emplace_back(o.begin() + b * configs[k].batch, o.begin() + (b + 1) * configs[k].batch);
  return out;
}

}  // namespace fnvlp::data::whole_pool
