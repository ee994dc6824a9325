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

// `pairs` (sorted) shuffled with the key of segment `segment` of `epoch` in `range`.
std::vector<int64_t> shuffled(std::vector<int64_t> pairs, PairRange range, uint64_t seed,
                              int64_t epoch, size_t segment) {
  shuffle(pairs, hash_key({seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(range.begin),
                           static_cast<uint64_t>(range.end), static_cast<uint64_t>(segment)}));
  return pairs;
}

}  // namespace

// Segment k's partition and batch size (the current configuration after the finished segments).
BlockPartition UniformSampler::segment_partition(size_t k) const {
  return k < segments_.size() ? BlockPartition(partition_.num_pairs(), segments_[k].ranks)
                              : partition_;
}

int64_t UniformSampler::segment_batch_size(size_t k) const {
  return k < segments_.size() ? segments_[k].batch_size : batch_size_;
}

// The pairs of `range` the epoch still had planned when segment k began, sorted. Segment 0 plans
// every pair; segment k > 0 plans what the ranks of segment k - 1 had planned and not drawn, and
// only the ranks whose blocks meet `range` can hold such pairs. So the replay holds a block of
// each configuration at a time, never the whole dataset.
std::vector<int64_t> UniformSampler::planned_in(size_t k, PairRange range) const {
  std::vector<int64_t> out;
  if (k == 0) {
    out.resize(static_cast<size_t>(range.size()));
    std::iota(out.begin(), out.end(), range.begin);
    return out;
  }
  const Segment& s = segments_[k - 1];
  const BlockPartition p = segment_partition(k - 1);
  const int64_t batches = batches_of_segment(k - 1);
  FNVLP_CHECK(s.cursor >= 0 && s.cursor <= batches,
              "sampler state: segment " << k - 1 << " cursor " << s.cursor << " outside its "
                                        << batches << " batches");
  if (range.size() <= 0) return out;
  if (rest_cache_.size() < k) rest_cache_.resize(k, {-1, {}});
  for (int r = p.owner(range.begin); r <= p.owner(range.end - 1); ++r) {
    // Consecutive ranges meet the same old blocks: the last one's rest is kept per segment.
    auto& [cached_rank, rest] = rest_cache_[k - 1];
    if (cached_rank != r) {
      const PairRange b = p.block(r);
      const std::vector<int64_t> o = shuffled(planned_in(k - 1, b), b, seed_, epoch_, k - 1);
      rest.assign(o.begin() + s.cursor * s.batch_size, o.begin() + batches * s.batch_size);
      std::sort(rest.begin(), rest.end());
      cached_rank = r;
    }
    out.insert(out.end(), std::lower_bound(rest.begin(), rest.end(), range.begin),
               std::lower_bound(rest.begin(), rest.end(), range.end));
  }
  return out;  // sorted: the old blocks are visited in order
}

// Batches every rank can run in segment k: the smallest block's share of what it plans.
int64_t UniformSampler::batches_of_segment(size_t k) const {
  const BlockPartition p = segment_partition(k);
  if (k == 0) return p.min_block_size() / segment_batch_size(k);
  if (k < batches_cache_.size() && batches_cache_[k] >= 0) return batches_cache_[k];
  int64_t least = std::numeric_limits<int64_t>::max();
  for (int r = 0; r < p.ranks(); ++r)
    least = std::min<int64_t>(least, static_cast<int64_t>(planned_in(k, p.block(r)).size()));
  const int64_t batches = least / segment_batch_size(k);
  if (batches_cache_.size() <= k) batches_cache_.resize(k + 1, -1);
  batches_cache_[k] = batches;
  return batches;
}

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
  batches_cache_.clear();
  rest_cache_.clear();
  const size_t k = segments_.size();
  order_ = shuffled(planned_in(k, block_), block_, seed_, epoch_, k);
  segment_batches_ = batches_of_segment(k);
  batches_cache_.clear();
  rest_cache_ = {};
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
