#pragma once
// Batch composition (ARCHITECTURE.md §7). The dataset's pairs [0, N) are split into one contiguous
// block per rank; a rank builds its batches only from pairs of its own block, so per-anchor state
// (GloFND's λ and moments) lives on exactly one rank and never travels per step.
//
// A Sampler yields the pair_ids of this rank's next batch. Every rank must run the same number of
// batches per epoch (collectives happen every step), so batches_per_epoch() is a value all ranks
// agree on: UniformSampler computes it from the partition, which every rank knows; a sampler whose
// count depends on local data must agree it through Comm::allreduce_min before the epoch starts.
//
// Randomness is counter-based (mix64 of a key and a counter), never std:: distributions, whose
// output is implementation-defined: the same seed, epoch and rank count give the same batches on
// every platform and compiler.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

namespace fnvlp::data {

// Pair ids [begin, end).
struct PairRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool contains(int64_t pair_id) const { return pair_id >= begin && pair_id < end; }
  bool operator==(const PairRange& o) const { return begin == o.begin && end == o.end; }
};

// [0, num_pairs) in `ranks` contiguous blocks; the first num_pairs % ranks blocks hold one more
// pair.
class BlockPartition {
 public:
  BlockPartition(int64_t num_pairs, int ranks);
  PairRange block(int rank) const;
  int owner(int64_t pair_id) const;  // the rank whose block holds pair_id, O(1)
  int64_t num_pairs() const { return num_pairs_; }
  int ranks() const { return ranks_; }
  int64_t min_block_size() const { return num_pairs_ / ranks_; }

 private:
  int64_t num_pairs_;
  int ranks_;
};

// SplitMix64's finaliser: a bijection on 64 bits with full avalanche.
uint64_t mix64(uint64_t x);
// Combines key parts in order (seed, epoch, ...) into one key.
uint64_t hash_key(std::initializer_list<uint64_t> parts);
// The counter-th 64-bit draw of the stream `key`.
inline uint64_t counter_random(uint64_t key, uint64_t counter) {
  return mix64(key + mix64(counter + 0x9E3779B97F4A7C15ull));
}
// Uniform integer in [0, n) from one draw (multiply-shift; bias below n / 2^64).
inline uint64_t uniform_below(uint64_t draw, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(draw) * n) >> 64);
}
// Fisher-Yates shuffle in place, draws from the stream `key`.
void shuffle(std::vector<int64_t>& v, uint64_t key);

class Sampler {
 public:
  virtual ~Sampler() = default;
  // Begins epoch `epoch` from its first batch (discarding any cursor).
  virtual void start_epoch(int64_t epoch) = 0;
  // Fills pair_ids with the next batch of this rank; false at the end of the epoch.
  virtual bool next(std::vector<int64_t>& pair_ids) = 0;
  // Batches of a full epoch, equal on every rank.
  virtual int64_t batches_per_epoch() const = 0;
  // Everything needed to continue mid-epoch with exactly the same batches (load_state on a fresh
  // sampler of the same configuration, then next()).
  virtual nlohmann::json state() const = 0;
  virtual void load_state(const nlohmann::json& state) = 0;
};

// Uniform sampling without replacement inside the rank's block: epoch e is a permutation of the
// block keyed by (seed, e, block range), cut into batches of batch_size; the tail of fewer than a
// full batch is dropped, and so is every batch past batches_per_epoch() = min_block_size /
// batch_size, so all ranks run the same number of steps (blocks differ in size by at most one).
//
// state() is the same on every rank (seed, epoch, cursor, batch size, rank count): a checkpoint
// stores one copy and every rank loads it. Resuming with another rank count or batch size:
//  - at an epoch boundary (cursor 0 or a completed epoch followed by start_epoch) nothing special
//    happens: the next epoch is drawn with the new partition;
//  - mid-epoch, the epoch continues with the pairs it still had planned (the unconsumed part of
//    every old rank's permutation, which every rank can recompute from the state): each new rank
//    takes those inside its new block, shuffled by (seed, epoch, block, segment), and the epoch
//    runs min over ranks of (those pairs / batch_size) more batches. No pair is seen twice in the
//    epoch; a few planned ones may be dropped to keep ranks in step. The state records the
//    segments, so a resumed run is itself resumable exactly. Replaying them holds one block of
//    each configuration at a time: memory O(N / R), not O(N).
class UniformSampler : public Sampler {
 public:
  UniformSampler(const BlockPartition& partition, int64_t batch_size, uint64_t seed, int rank);

  void start_epoch(int64_t epoch) override;
  bool next(std::vector<int64_t>& pair_ids) override;
  int64_t batches_per_epoch() const override;
  nlohmann::json state() const override;
  void load_state(const nlohmann::json& state) override;

  // Batches left in the current epoch (after a mid-epoch resize: of its last segment).
  int64_t batches_remaining() const { return segment_batches_ - cursor_; }
  int64_t epoch() const { return epoch_; }
  const PairRange& block() const { return block_; }
  int64_t batch_size() const { return batch_size_; }
  uint64_t seed() const { return seed_; }

 private:
  struct Segment {  // a finished part of the current epoch, run under another configuration
    int ranks;
    int64_t batch_size;
    int64_t cursor;
  };
  void build_order();
  BlockPartition segment_partition(size_t k) const;
  int64_t segment_batch_size(size_t k) const;
  std::vector<int64_t> planned_in(size_t k, PairRange range) const;
  int64_t batches_of_segment(size_t k) const;

  BlockPartition partition_;
  int64_t batch_size_;
  uint64_t seed_;
  PairRange block_;
  int64_t epoch_ = -1;
  int64_t cursor_ = 0;           // batches handed out in the current segment
  int64_t segment_batches_ = 0;  // batches of the current segment
  std::vector<Segment> segments_;
  std::vector<int64_t> order_;  // this rank's pairs for the current segment, in batch order
  // The replay's memo while build_order runs: batches_of_segment(k) (-1: not yet), and per finished
  // segment the last rank planned_in read with its planned, undrawn pairs (sorted).
  mutable std::vector<int64_t> batches_cache_;
  mutable std::vector<std::pair<int, std::vector<int64_t>>> rest_cache_;
};

}  // namespace fnvlp::data
