#pragma once
// Grouped mini-batch sampling (GRIT-VLP's grouping, FALCON's quantile-based construction and the
// quantile heuristics of falcon.txt §3.1, App. C.1–C.3) as a fnvlp::data::Sampler.
//
// Epoch layout for rank r with block P_r (ARCHITECTURE.md §7):
//  - Without cached embeddings for the epoch (always epoch 0, the warm start of App. C.2) the epoch
//    is uniform, batch for batch identical to UniformSampler (it delegates to one).
//  - With embeddings (set_embeddings(e, img, txt): the rank's block embedded at the end of epoch
//    e − 1) the block is shuffled, keyed by (seed, e, block), and cut into search spaces of |M|
//    consecutive pairs; the last one holds the remaining n mod |M| pairs. Search space s is
//    composed into floor(|M_s| / B) batches by Alg. 1 (search_space.hpp); its M_s mod B leftover
//    pairs are not used this epoch (Alg. 2). Membership reshuffles every epoch (App. C.2).
//  - Ranks stay in step: a grouped epoch runs
//        G(n) = floor(n / |M|) · floor(|M| / B) + floor((n mod |M|) / B)
//    batches with n = the partition's SMALLEST block size. G is non-decreasing in n and blocks
//    differ by at most one pair, so every rank has at least G(min) batches; a rank with a larger
//    block stops after G(min) (dropping at most the end of its last search space). Note G(n) <=
//    floor(n / B): a grouped epoch may have fewer batches than the uniform one.
//
// Quantile of each pick: a fixed q (GRIT: q = 1; the heuristics q = 0.5, 0), a per-epoch schedule
// (hardening / softening), or a QSource (FALCON's policy, falcon.hpp) consulted per pick.
//
// Randomness is counter-based (fnvlp::data::counter_random): the first member of batch k of
// search space s is drawn from the stream (seed, epoch, block, s) at counter k; a QSource gets the
// key (seed, epoch, block, s, k) for the batch. So state() only needs the epoch, the search space
// index, the batches composed in it and its unselected set: load_state() on a fresh sampler of the
// same configuration (with the same embeddings set) continues with exactly the remaining batches,
// without replaying earlier compositions or a policy. A mid-epoch grouped state is per rank and
// needs the same rank count and batch size (unlike UniformSampler's); an epoch-boundary state
// resumes under any, and a mid-epoch one on other ranks through resplit() with every old rank's
// state: the epoch goes on with the pairs the old ranks had not drawn (the unselected part of
// each one's current search space and its spaces not yet entered), each new rank taking those of
// its block, shuffled (keyed apart from an ordinary epoch) and composed into search spaces of |M|
// as usual; all ranks run G(the smallest block's share) batches. The state records the old ranks'
// cursors, so the re-split epoch is itself resumable at the new rank count (not re-split again).
//
// Threads: with a fixed q or a schedule the sampler may run on the Prefetcher's thread (it touches
// only its own members; S is built with torch on that thread, under NoGradGuard). With a QSource
// the q of each pick depends on the policy updated after every step, so that mode must be driven
// synchronously from the trainer thread (no read-ahead).
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fnvlp/data/sampler.hpp"
#include "fnvlp/negatives/method_config.hpp"
#include "fnvlp/negatives/quantile_pick.hpp"
#include "fnvlp/negatives/search_space.hpp"

namespace fnvlp::negatives {

struct GroupedConfig {
  int64_t search_space = 1920;  // |M| (GRIT-VLP 1920; FALCON 2400 / 5664 / 28320)
  QSchedule schedule = QSchedule::kFixed;
  double q = 1.0;  // kFixed
  // kHardening (q_start <= q_end) / kSoftening (q_start >= q_end): q is linear in the epoch index,
  // q_start at epoch 1 (the first grouped epoch), q_end at epoch `epochs` − 1 (the last one):
  //     q(e) = q_start + (q_end − q_start) · clamp((e − 1) / (epochs − 2), 0, 1)
  // (epochs <= 2: a single grouped epoch at most, q = q_start). Callers pick the defaults:
  // hardening 0 -> 1, softening 1 -> 0.
  double q_start = 0.0;
  double q_end = 1.0;
  int64_t epochs = 1;  // the run's epoch count

  void validate(int64_t batch_size) const;  // throws fnvlp::Error naming the bad field
  double q_at(int64_t epoch) const;
};

// The quantile of each pick, from outside the sampler (FALCON's scheduler).
class QSource {
 public:
  virtual ~QSource() = default;
  // The sampler enters a search space: S float [M, M] on the CPU (S = S_i2t + S_t2i).
  virtual void begin_search_space(const torch::Tensor& S) = 0;
  // The sampler starts composing a batch of the current search space; `key` is unique to
  // (seed, epoch, block, search space, batch) and seeds the batch's counter-based draws.
  virtual void begin_batch(uint64_t key) = 0;
  // The quantile of the pick from local row `row` (0..M-1) of the current search space.
  virtual double q(int64_t row) = 0;
};

// Batches of a grouped epoch for a block of n pairs: G(n) above.
int64_t grouped_batches(int64_t n, int64_t search_space, int64_t batch_size);

class GroupedSampler : public data::Sampler {
 public:
  // As UniformSampler, plus the grouping config; q_source (not owned, may be null) switches the
  // picks to it (FALCON) and must outlive the sampler.
  GroupedSampler(const data::BlockPartition& partition, int64_t batch_size, uint64_t seed, int rank,
                 const GroupedConfig& config, QSource* q_source = nullptr);

  // The cached embeddings of this rank's block for epoch `epoch` (computed at the end of epoch
  // − 1): float [block.size(), E], row k = pair block().begin + k, L2-normalised. Copied (to the
  // CPU). Call between epochs (not while a Prefetcher runs this sampler).
  void set_embeddings(int64_t epoch, const torch::Tensor& img, const torch::Tensor& txt);

  void start_epoch(int64_t epoch) override;
  bool next(std::vector<int64_t>& pair_ids) override;
  // Batches of the current epoch (after start_epoch / load_state; before: the uniform count).
  // Equal on every rank as long as every rank set embeddings for the same epochs.
  int64_t batches_per_epoch() const override;
  nlohmann::json state() const override;
  void load_state(const nlohmann::json& state) override;
  // A grouped epoch stopped mid-way on other ranks: `old` holds every old rank's state(), in rank
  // order (the same epoch, search space and seed; any rank count and batch size). Needs this
  // epoch's embeddings of the new block (set_embeddings) first. Throws fnvlp::Error naming what
  // does not fit, including a state that was itself re-split.
  void resplit(const std::vector<nlohmann::json>& old);

  int64_t uniform_batches_per_epoch() const { return uniform_.batches_per_epoch(); }
  int64_t grouped_batches_per_epoch() const;

  // Batches left in the current epoch (a uniform one: its UniformSampler's).
  int64_t batches_remaining() const {
    return grouped_ ? grouped_batches_per_epoch() - done_ : uniform_.batches_remaining();
  }
  bool grouped() const { return grouped_; }  // the current epoch is grouped
  int64_t epoch() const { return epoch_; }
  double epoch_q() const;  // the fixed / scheduled q of the current grouped epoch (NaN: uniform)
  const data::PairRange& block() const { return block_; }
  const GroupedConfig& config() const { return config_; }

  // The last batch of a grouped epoch (members, rows and q of its picks); empty when uniform.
  const ComposedBatch& last_batch() const { return last_; }
  // mean / p5 / p95 of the q of the last batch's picks (n = 0 when uniform). Also stored in
  // state() under "last_q", so a Prefetcher's consumed state() carries the q of the batch the
  // trainer actually got: read it with q_stats_from_state.
  ValueStats last_batch_q() const;
  static ValueStats q_stats_from_state(const nlohmann::json& state);

 private:
  int64_t search_spaces() const;
  void build_order();
  void build_resplit_order();  // order_ and resplit_batches_ from resplit_
  void enter_space(int64_t space);
  uint64_t block_key(uint64_t tag) const;

  data::BlockPartition partition_;
  int64_t batch_size_;
  uint64_t seed_;
  int rank_;
  data::PairRange block_;
  GroupedConfig config_;
  QSource* q_source_;
  data::UniformSampler uniform_;

  torch::Tensor img_, txt_;  // float CPU [block, E]
  int64_t emb_epoch_ = -1;
  uint64_t emb_fingerprint_ = 0;

  int64_t epoch_ = -1;
  bool grouped_ = false;
  std::vector<int64_t> order_;  // the block's pairs shuffled for this epoch
  int64_t space_ = -1;          // current search space (-1: none entered yet)
  int64_t space_batches_ = 0;   // batches composed in it
  int64_t done_ = 0;            // batches handed out in this epoch
  // A re-split epoch: the old ranks' count, batch size and cursors ({"space", "unselected"} per
  // old rank); null otherwise. resplit_batches_: its batches on every rank.
  nlohmann::json resplit_;
  int64_t resplit_batches_ = 0;
  std::unique_ptr<SearchSpace> current_;
  ComposedBatch last_;
};

// The FALCON variant: q of every pick from a QSource (the FalconScheduler). Same state/resume
// contract; drive it synchronously from the trainer thread.
class FalconSampler : public GroupedSampler {
 public:
  FalconSampler(const data::BlockPartition& partition, int64_t batch_size, uint64_t seed, int rank,
                int64_t search_space, QSource& q_source);
};

}  // namespace fnvlp::negatives
