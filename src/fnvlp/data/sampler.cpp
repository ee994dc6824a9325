#include "fnvlp/data/sampler.hpp"

#include <algorithm>
#include <limits>
#include <numeric>

#include "fnvlp/core/error.hpp"

namespace fnvlp::data {

using json = nlohmann::json;

BlockPartition::BlockPartition(int64_t num_pairs, int ranks)
    : num_pairs_(num_pairs), ranks_(ranks) {
  FNVLP_CHECK(ranks >= 1, "block partition needs at least one rank, got " << ranks);
  FNVLP_CHECK(num_pairs >= 0, "block partition of a negative pair count " << num_pairs);
}

PairRange BlockPartition::block(int rank) const {
  FNVLP_CHECK(rank >= 0 && rank < ranks_, "rank " << rank << " outside 0.." << ranks_ - 1);
  const int64_t q = num_pairs_ / ranks_, rem = num_pairs_ % ranks_;
  const int64_t begin = rank * q + std::min<int64_t>(rank, rem);
  return {begin, begin + q + (rank < rem ? 1 : 0)};
}

int BlockPartition::owner(int64_t pair_id) const {
  FNVLP_CHECK(pair_id >= 0 && pair_id < num_pairs_,
              "pair_id " << pair_id << " outside [0, " << num_pairs_ << ")");
  const int64_t q = num_pairs_ / ranks_, rem = num_pairs_ % ranks_;
  // The first `rem` blocks have q + 1 pairs, the rest q.
  const int64_t big = rem * (q + 1);
  if (pair_id < big) return static_cast<int>(pair_id / (q + 1));
  return static_cast<int>(rem + (pair_id - big) / q);
}

uint64_t mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t hash_key(std::initializer_list<uint64_t> parts) {
  uint64_t h = 0x6A09E667F3BCC909ull;  // any fixed non-zero start
  for (uint64_t p : parts) h = mix64(h ^ mix64(p + 0x9E3779B97F4A7C15ull));
  return h;
}

void shuffle(std::vector<int64_t>& v, uint64_t key) {
  for (size_t i = v.size(); i > 1; --i) {
    const auto j = static_cast<size_t>(uniform_below(counter_random(key, i), i));
    std::swap(v[i - 1], v[j]);
  }
}

namespace {

// Pairs of `pool` (sorted; null = every pair) inside `range`, shuffled with the segment's key.
std::vector<int64_t> segment_order(const std::vector<int64_t>* pool, PairRange range, uint64_t seed,
                                   int64_t epoch, size_t segment) {
  std::vector<int64_t> out;
  if (pool == nullptr) {
    out.resize(static_cast<size_t>(range.size()));
    std::iota(out.begin(), out.end(), range.begin);
  } else {
    auto lo = std::lower_bound(pool->begin(), pool->end(), range.begin);
    auto hi = std::lower_bound(lo, pool->end(), range.end);
    out.assign(lo, hi);
  }
  shuffle(out, hash_key({seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(range.begin),
                         static_cast<uint64_t>(range.end), static_cast<uint64_t>(segment)}));
  return out;
}

// Batches every rank can run in a segment: the smallest block's share of the pool.
int64_t segment_batches(const std::vector<int64_t>* pool, const BlockPartition& p,
                        int64_t batch_size) {
  if (pool == nullptr) return p.min_block_size() / batch_size;
  int64_t least = std::numeric_limits<int64_t>::max();
  for (int r = 0; r < p.ranks(); ++r) {
    const PairRange b = p.block(r);
    const auto n = std::lower_bound(pool->begin(), pool->end(), b.end) -
                   std::lower_bound(pool->begin(), pool->end(), b.begin);
    least = std::min<int64_t>(least, n);
  }
  return least / batch_size;
}

}  // namespace

UniformSampler::UniformSampler(const BlockPartition& partition, int64_t batch_size, uint64_t seed,
                               int rank)
    : partition_(partition), batch_size_(batch_size), seed_(seed) {
  FNVLP_CHECK(batch_size >= 1, "batch_size must be positive, got " << batch_size);
  block_ = partition_.block(rank);
  FNVLP_CHECK(partition_.min_block_size() >= batch_size,
              "batch_size " << batch_size << " exceeds the smallest rank block ("
                            << partition_.min_block_size() << " of " << partition_.num_pairs()
                            << " pairs over " << partition_.ranks() << " ranks): no full batch");
}

void UniformSampler::start_epoch(int64_t epoch) {
  FNVLP_CHECK(epoch >= 0, "epoch must be non-negative, got " << epoch);
  epoch_ = epoch;
  cursor_ = 0;
  segments_.clear();
  build_order();
}

int64_t UniformSampler::batches_per_epoch() const {
  return partition_.min_block_size() / batch_size_;
}

void UniformSampler::build_order() {
  // Replay the finished segments of this epoch to find the pairs it still has planned.
  std::vector<int64_t> pool;
  const std::vector<int64_t>* pool_ptr = nullptr;
  for (size_t k = 0; k < segments_.size(); ++k) {
    const Segment& s = segments_[k];
    const BlockPartition p(partition_.num_pairs(), s.ranks);
    const int64_t batches = segment_batches(pool_ptr, p, s.batch_size);
    FNVLP_CHECK(s.cursor >= 0 && s.cursor <= batches,
                "sampler state: segment " << k << " cursor " << s.cursor << " outside its "
                                          << batches << " batches");
    std::vector<int64_t> rest;
    for (int r = 0; r < s.ranks; ++r) {
      const std::vector<int64_t> o = segment_order(pool_ptr, p.block(r), seed_, epoch_, k);
      rest.insert(rest.end(), o.begin() + s.cursor * s.batch_size,
                  o.begin() + batches * s.batch_size);
    }
    std::sort(rest.begin(), rest.end());
    pool = std::move(rest);
    pool_ptr = &pool;
  }
  order_ = segment_order(pool_ptr, block_, seed_, epoch_, segments_.size());
  segment_batches_ = segment_batches(pool_ptr, partition_, batch_size_);
}

bool UniformSampler::next(std::vector<int64_t>& pair_ids) {
  FNVLP_CHECK(epoch_ >= 0, "UniformSampler::next before start_epoch or load_state");
  if (cursor_ >= segment_batches_) return false;
  const auto first = order_.begin() + cursor_ * batch_size_;
  pair_ids.assign(first, first + batch_size_);
  ++cursor_;
  return true;
}

json UniformSampler::state() const {
  json segs = json::array();
  for (const Segment& s : segments_)
    segs.push_back({{"ranks", s.ranks}, {"batch_size", s.batch_size}, {"cursor", s.cursor}});
  return {{"sampler", "uniform"},
          {"seed", seed_},
          {"epoch", epoch_},
          {"cursor", cursor_},
          {"batch_size", batch_size_},
          {"num_pairs", partition_.num_pairs()},
          {"ranks", partition_.ranks()},
          {"segments", segs}};
}

void UniformSampler::load_state(const json& st) {
  uint64_t seed = 0;
  int64_t epoch = 0, cursor = 0, batch_size = 0, num_pairs = 0;
  int ranks = 0;
  std::vector<Segment> segments;
  try {
    FNVLP_CHECK(st.at("sampler").get<std::string>() == "uniform",
                "sampler state is for a '" << st.at("sampler").get<std::string>()
                                           << "' sampler, not 'uniform'");
    seed = st.at("seed").get<uint64_t>();
    epoch = st.at("epoch").get<int64_t>();
    cursor = st.at("cursor").get<int64_t>();
    batch_size = st.at("batch_size").get<int64_t>();
    num_pairs = st.at("num_pairs").get<int64_t>();
    ranks = st.at("ranks").get<int>();
    for (const auto& s : st.at("segments"))
      segments.push_back({s.at("ranks").get<int>(), s.at("batch_size").get<int64_t>(),
                          s.at("cursor").get<int64_t>()});
  } catch (const json::exception& e) {
    FNVLP_FAIL("malformed sampler state: " << e.what());
  }
  FNVLP_CHECK(num_pairs == partition_.num_pairs(), "sampler state is for a dataset of "
                                                       << num_pairs << " pairs, this one has "
                                                       << partition_.num_pairs());
  FNVLP_CHECK(ranks >= 1 && batch_size >= 1 && cursor >= 0,
              "malformed sampler state " << st.dump());
  for (const Segment& s : segments)
    FNVLP_CHECK(s.ranks >= 1 && s.batch_size >= 1 && s.cursor >= 0,
                "malformed sampler state segment in " << st.dump());
  seed_ = seed;
  epoch_ = epoch;
  segments_ = std::move(segments);
  cursor_ = cursor;
  const bool same = ranks == partition_.ranks() && batch_size == batch_size_;
  if (!same && epoch_ >= 0 && (cursor > 0 || !segments_.empty())) {
    // Mid-epoch under another configuration: what was consumed becomes a finished segment.
    segments_.push_back({ranks, batch_size, cursor});
    cursor_ = 0;
  }
  if (epoch_ < 0) return;  // saved before the first epoch: start_epoch comes next
  build_order();
  FNVLP_CHECK(cursor_ <= segment_batches_, "sampler state: cursor "
                                               << cursor_ << " past the " << segment_batches_
                                               << " batches of epoch " << epoch_);
}

}  // namespace fnvlp::data
