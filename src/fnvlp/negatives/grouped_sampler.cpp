#include "fnvlp/negatives/grouped_sampler.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "fnvlp/core/error.hpp"

namespace fnvlp::negatives {

using json = nlohmann::json;

namespace {

// Stream tags: keep the draws of different purposes apart.
constexpr uint64_t kTagSpaces = 0x5350414345ull;   // block shuffle into search spaces
constexpr uint64_t kTagFirst = 0x4649525354ull;    // first member of each batch
constexpr uint64_t kTagBatch = 0x4241544348ull;    // the QSource's per-batch key
constexpr uint64_t kTagResplit = 0x5245535054ull;  // a re-split epoch's draws

// Identifies the embeddings a grouped state was composed from: a hash of the float bit patterns.
uint64_t fingerprint(const torch::Tensor& img, const torch::Tensor& txt) {
  uint64_t h =
      data::hash_key({static_cast<uint64_t>(img.size(0)), static_cast<uint64_t>(img.size(1))});
  for (const torch::Tensor* t : {&img, &txt}) {
    const float* p = t->data_ptr<float>();
    const int64_t n = t->numel();
    for (int64_t i = 0; i < n; ++i) {
      uint32_t bits;
      std::memcpy(&bits, p + i, sizeof bits);
      h = data::mix64(h ^ bits) + 0x9E3779B97F4A7C15ull;
    }
  }
  return h;
}

// An ordinary grouped epoch's order of `block` (cut into search spaces of |M| consecutive pairs).
std::vector<int64_t> space_order(uint64_t seed, int64_t epoch, data::PairRange block) {
  std::vector<int64_t> order(static_cast<size_t>(block.size()));
  for (int64_t k = 0; k < block.size(); ++k) order[static_cast<size_t>(k)] = block.begin + k;
  data::shuffle(
      order, data::hash_key({seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(block.begin),
                             static_cast<uint64_t>(block.end), kTagSpaces}));
  return order;
}

json stats_json(const ValueStats& s) {
  if (s.n == 0) return {{"n", 0}};
  return {{"n", s.n}, {"mean", s.mean}, {"p5", s.p5}, {"p95", s.p95}};
}

}  // namespace

void GroupedConfig::validate(int64_t batch_size) const {
  FNVLP_CHECK(search_space >= batch_size, "grouped sampler: search space |M| = "
                                              << search_space << " is smaller than the batch size "
                                              << batch_size);
  auto in01 = [](double v) { return v >= 0.0 && v <= 1.0; };
  FNVLP_CHECK(in01(q), "grouped sampler: q = " << q << " outside [0, 1]");
  FNVLP_CHECK(in01(q_start) && in01(q_end), "grouped sampler: q_start = " << q_start
                                                                          << ", q_end = " << q_end
                                                                          << " must lie in [0, 1]");
  FNVLP_CHECK(epochs >= 1, "grouped sampler: epochs = " << epochs);
  if (schedule == QSchedule::kHardening)
    FNVLP_CHECK(q_start <= q_end,
                "hardening schedule needs q_start <= q_end, got " << q_start << " -> " << q_end);
  if (schedule == QSchedule::kSoftening)
    FNVLP_CHECK(q_start >= q_end,
                "softening schedule needs q_start >= q_end, got " << q_start << " -> " << q_end);
}

double GroupedConfig::q_at(int64_t epoch) const {
  if (schedule == QSchedule::kFixed) return q;
  // Linear from the first grouped epoch (1) to the last (epochs − 1); see the header.
  double t = 0.0;
  if (epochs > 2)
    t = std::clamp(static_cast<double>(epoch - 1) / static_cast<double>(epochs - 2), 0.0, 1.0);
  return q_start + (q_end - q_start) * t;
}

int64_t grouped_batches(int64_t n, int64_t search_space, int64_t batch_size) {
  FNVLP_CHECK(search_space >= 1 && batch_size >= 1,
              "grouped_batches: |M| = " << search_space << ", B = " << batch_size);
  return (n / search_space) * (search_space / batch_size) + (n % search_space) / batch_size;
}

GroupedSampler::GroupedSampler(const data::BlockPartition& partition, int64_t batch_size,
                               uint64_t seed, int rank, const GroupedConfig& config,
                               QSource* q_source)
    : partition_(partition),
      batch_size_(batch_size),
      seed_(seed),
      rank_(rank),
      config_(config),
      q_source_(q_source),
      uniform_(partition, batch_size, seed, rank) {
  config_.validate(batch_size);
  block_ = partition_.block(rank);
  FNVLP_CHECK(grouped_batches_per_epoch() >= 1,
              "grouped sampler: the smallest rank block ("
                  << partition_.min_block_size() << " pairs) with |M| = " << config_.search_space
                  << " and B = " << batch_size << " gives no batch");
}

int64_t GroupedSampler::grouped_batches_per_epoch() const {
  if (!resplit_.is_null()) return resplit_batches_;
  return grouped_batches(partition_.min_block_size(), config_.search_space, batch_size_);
}

int64_t GroupedSampler::batches_per_epoch() const {
  return grouped_ ? grouped_batches_per_epoch() : uniform_batches_per_epoch();
}

double GroupedSampler::epoch_q() const {
  return grouped_ && q_source_ == nullptr ? config_.q_at(epoch_)
                                          : std::numeric_limits<double>::quiet_NaN();
}

int64_t GroupedSampler::search_spaces() const {
  return (static_cast<int64_t>(order_.size()) + config_.search_space - 1) / config_.search_space;
}

uint64_t GroupedSampler::block_key(uint64_t tag) const {
  const uint64_t key =
      data::hash_key({seed_, static_cast<uint64_t>(epoch_), static_cast<uint64_t>(block_.begin),
                      static_cast<uint64_t>(block_.end), tag});
  return resplit_.is_null() ? key : data::hash_key({key, kTagResplit});
}

void GroupedSampler::set_embeddings(int64_t epoch, const torch::Tensor& img,
                                    const torch::Tensor& txt) {
  FNVLP_CHECK(epoch >= 0, "set_embeddings: negative epoch " << epoch);
  FNVLP_CHECK(img.dim() == 2 && txt.dim() == 2 && img.sizes() == txt.sizes() &&
                  img.size(0) == block_.size(),
              "set_embeddings: rank " << rank_ << " owns pairs [" << block_.begin << ", "
                                      << block_.end << ") and needs image and text embeddings ["
                                      << block_.size() << ", E], got " << img.sizes() << " and "
                                      << txt.sizes());
  torch::NoGradGuard no_grad;
  img_ = img.detach().to(torch::kCPU, torch::kFloat).contiguous().clone();
  txt_ = txt.detach().to(torch::kCPU, torch::kFloat).contiguous().clone();
  FNVLP_CHECK(torch::isfinite(img_).all().item<bool>() && torch::isfinite(txt_).all().item<bool>(),
              "set_embeddings: non-finite embeddings for epoch " << epoch << " on rank " << rank_);
  emb_epoch_ = epoch;
  emb_fingerprint_ = fingerprint(img_, txt_);
}

void GroupedSampler::build_order() { order_ = space_order(seed_, epoch_, block_); }

void GroupedSampler::start_epoch(int64_t epoch) {
  FNVLP_CHECK(epoch >= 0, "epoch must be non-negative, got " << epoch);
  epoch_ = epoch;
  grouped_ = img_.defined() && emb_epoch_ == epoch;
  resplit_ = nullptr;
  space_ = -1;
  space_batches_ = 0;
  done_ = 0;
  current_.reset();
  last_ = ComposedBatch();
  if (!grouped_) {
    order_.clear();
    uniform_.start_epoch(epoch);
    return;
  }
  build_order();
}

void GroupedSampler::enter_space(int64_t space) {
  FNVLP_CHECK(space >= 0 && space < search_spaces(), "grouped sampler: search space "
                                                         << space << " past the " << search_spaces()
                                                         << " of rank " << rank_ << "'s block");
  const int64_t first = space * config_.search_space;
  const int64_t size = std::min(config_.search_space, static_cast<int64_t>(order_.size()) - first);
  std::vector<int64_t> members(order_.begin() + first, order_.begin() + first + size);
  std::vector<int64_t> rows(members.size());
  for (size_t k = 0; k < members.size(); ++k) rows[k] = members[k] - block_.begin;
  torch::NoGradGuard no_grad;
  const auto idx = torch::tensor(rows, torch::kLong);
  current_ = std::make_unique<SearchSpace>(std::move(members), img_.index_select(0, idx),
                                           txt_.index_select(0, idx));
  space_ = space;
  space_batches_ = 0;
  if (q_source_ != nullptr) q_source_->begin_search_space(current_->similarity());
}

bool GroupedSampler::next(std::vector<int64_t>& pair_ids) {
  FNVLP_CHECK(epoch_ >= 0, "GroupedSampler::next before start_epoch or load_state");
  if (!grouped_) {
    last_ = ComposedBatch();
    return uniform_.next(pair_ids);
  }
  if (done_ >= grouped_batches_per_epoch()) return false;
  while (current_ == nullptr || space_batches_ >= current_->size() / batch_size_)
    enter_space(space_ + 1);
  const uint64_t draw =
      data::counter_random(data::hash_key({block_key(kTagFirst), static_cast<uint64_t>(space_)}),
                           static_cast<uint64_t>(space_batches_));
  if (q_source_ != nullptr) {
    q_source_->begin_batch(data::hash_key({block_key(kTagBatch), static_cast<uint64_t>(space_),
                                           static_cast<uint64_t>(space_batches_)}));
    last_ = current_->next_batch(
        batch_size_, [this](int64_t row) { return q_source_->q(row); }, draw);
  } else {
    last_ = current_->next_batch(batch_size_, config_.q_at(epoch_), draw);
  }
  ++space_batches_;
  ++done_;
  pair_ids = last_.pair_ids;
  return true;
}

ValueStats GroupedSampler::last_batch_q() const { return value_stats(last_.q); }

ValueStats GroupedSampler::q_stats_from_state(const json& state) {
  ValueStats s;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  s.mean = s.p5 = s.p95 = nan;
  if (!state.is_object() || !state.contains("last_q")) return s;
  const json& q = state.at("last_q");
  s.n = q.value("n", int64_t{0});
  if (s.n > 0) {
    s.mean = q.at("mean").get<double>();
    s.p5 = q.at("p5").get<double>();
    s.p95 = q.at("p95").get<double>();
  }
  return s;
}

json GroupedSampler::state() const {
  json st = {{"sampler", q_source_ != nullptr ? "falcon" : "grouped"},
             {"seed", seed_},
             {"epoch", epoch_},
             {"batch_size", batch_size_},
             {"num_pairs", partition_.num_pairs()},
             {"ranks", partition_.ranks()},
             {"search_space", config_.search_space},
             {"grouped", grouped_},
             {"last_q", stats_json(last_batch_q())}};
  if (!grouped_) {
    st["uniform"] = uniform_.state();
    return st;
  }
  st["block"] = {block_.begin, block_.end};
  st["embeddings_fingerprint"] = emb_fingerprint_;
  st["done"] = done_;
  st["space"] = space_;
  st["space_batches"] = space_batches_;
  st["unselected"] = current_ != nullptr ? current_->unselected_mask() : std::string();
  if (!resplit_.is_null()) st["resplit"] = resplit_;
  return st;
}

namespace {

// The pairs old rank `rank` (of `p`) had not drawn in its grouped epoch: the unselected members of
// its current search space and every space it had not entered, sorted. Its search spaces are those
// of an ordinary epoch (space_order of its block).
std::vector<int64_t> undrawn(const data::BlockPartition& p, int rank, const json& st, uint64_t seed,
                             int64_t epoch, int64_t search_space) {
  const data::PairRange b = p.block(rank);
  const std::vector<int64_t> order = space_order(seed, epoch, b);
  const int64_t space = st.at("space").get<int64_t>();
  std::vector<int64_t> out;
  int64_t next = 0;
  if (space >= 0) {
    const int64_t first = space * search_space;
    FNVLP_CHECK(first < b.size(), "sampler state of rank " << rank << ": search space " << space
                                                           << " past its block of " << b.size());
    const int64_t size = std::min(search_space, b.size() - first);
    for (int64_t k :
         SearchSpace::decode_unselected_mask(st.at("unselected").get<std::string>(), size))
      out.push_back(order[static_cast<size_t>(first + k)]);
    next = first + size;
  }
  out.insert(out.end(), order.begin() + next, order.end());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

void GroupedSampler::resplit(const std::vector<json>& old) {
  FNVLP_CHECK(!old.empty(), "grouped sampler: resplit without the old ranks' states");
  const auto ranks = static_cast<int>(old.size());
  json cursors = json::array();
  int64_t epoch = -1, batch = 0;
  try {
    for (int r = 0; r < ranks; ++r) {
      const json& st = old[static_cast<size_t>(r)];
      const data::PairRange b = data::BlockPartition(partition_.num_pairs(), ranks).block(r);
      FNVLP_CHECK(!st.contains("resplit"),
                  "grouped sampler: rank " << r << "'s state is of a re-split epoch itself");
      FNVLP_CHECK(st.at("grouped").get<bool>() && st.at("ranks").get<int>() == ranks &&
                      st.at("num_pairs").get<int64_t>() == partition_.num_pairs() &&
                      st.at("search_space").get<int64_t>() == config_.search_space &&
                      st.at("seed").get<uint64_t>() == seed_ &&
                      st.at("block").at(0).get<int64_t>() == b.begin &&
                      st.at("block").at(1).get<int64_t>() == b.end &&
                      (r == 0 || (st.at("epoch").get<int64_t>() == epoch &&
                                  st.at("batch_size").get<int64_t>() == batch)),
                  "grouped sampler: state " << r << " of " << ranks
                                            << " does not continue the same grouped epoch with "
                                               "|M| = "
                                            << config_.search_space << ": " << st.dump());
      epoch = st.at("epoch").get<int64_t>();
      batch = st.at("batch_size").get<int64_t>();
      cursors.push_back({{"space", st.at("space")}, {"unselected", st.at("unselected")}});
    }
  } catch (const json::exception& e) {
    FNVLP_FAIL("malformed sampler state for a re-split: " << e.what());
  }
  FNVLP_CHECK(emb_epoch_ == epoch && img_.defined(), "grouped sampler: re-splitting epoch "
                                                         << epoch << " needs its embeddings "
                                                         << "(set_embeddings first)");
  epoch_ = epoch;
  grouped_ = true;
  resplit_ = {{"ranks", ranks}, {"batch_size", batch}, {"old", cursors}};
  build_resplit_order();
  space_ = -1;
  space_batches_ = 0;
  done_ = 0;
  current_.reset();
  last_ = ComposedBatch();
}

// One old rank at a time: memory O(N / R_old + N / R), time O(N).
void GroupedSampler::build_resplit_order() {
  const int ranks = resplit_.at("ranks").get<int>();
  const json& cursors = resplit_.at("old");
  const data::BlockPartition old(partition_.num_pairs(), ranks);
  std::vector<int64_t> mine, share(static_cast<size_t>(partition_.ranks()), 0);
  for (int r = 0; r < ranks; ++r) {
    const std::vector<int64_t> rest =
        undrawn(old, r, cursors.at(static_cast<size_t>(r)), seed_, epoch_, config_.search_space);
    for (int64_t id : rest) ++share[static_cast<size_t>(partition_.owner(id))];
    mine.insert(mine.end(), std::lower_bound(rest.begin(), rest.end(), block_.begin),
                std::lower_bound(rest.begin(), rest.end(), block_.end));
  }
  order_ = std::move(mine);
  data::shuffle(order_, block_key(kTagSpaces));
  resplit_batches_ = grouped_batches(*std::min_element(share.begin(), share.end()),
                                     config_.search_space, batch_size_);
}

void GroupedSampler::load_state(const json& st) {
  const std::string kind = q_source_ != nullptr ? "falcon" : "grouped";
  try {
    const auto saved = st.at("sampler").get<std::string>();
    FNVLP_CHECK(saved == kind,
                "sampler state is for a '" << saved << "' sampler, not '" << kind << "'");
    FNVLP_CHECK(st.at("num_pairs").get<int64_t>() == partition_.num_pairs(),
                "sampler state is for a dataset of " << st.at("num_pairs").get<int64_t>()
                                                     << " pairs, this one has "
                                                     << partition_.num_pairs());
    const int64_t epoch = st.at("epoch").get<int64_t>();
    const bool grouped = st.at("grouped").get<bool>();
    last_ = ComposedBatch();
    space_ = -1;
    space_batches_ = 0;
    done_ = 0;
    current_.reset();
    order_.clear();
    resplit_ = nullptr;
    if (!grouped) {
      uniform_.load_state(st.at("uniform"));
      epoch_ = epoch;
      grouped_ = false;
      return;
    }
    // A grouped epoch mid-way: the composition is per rank, so the configuration must match.
    FNVLP_CHECK(st.at("ranks").get<int>() == partition_.ranks() &&
                    st.at("batch_size").get<int64_t>() == batch_size_ &&
                    st.at("search_space").get<int64_t>() == config_.search_space &&
                    st.at("seed").get<uint64_t>() == seed_ &&
                    st.at("block").at(0).get<int64_t>() == block_.begin &&
                    st.at("block").at(1).get<int64_t>() == block_.end,
                "a grouped sampler state mid-epoch resumes only with the same ranks, batch size, "
                "search space, seed and block; state: "
                    << st.at("ranks") << " ranks, B = " << st.at("batch_size")
                    << ", |M| = " << st.at("search_space") << ", block " << st.at("block")
                    << "; this run: " << partition_.ranks() << " ranks, B = " << batch_size_
                    << ", |M| = " << config_.search_space << ", block [" << block_.begin << ", "
                    << block_.end << ")");
    FNVLP_CHECK(emb_epoch_ == epoch && img_.defined(),
                "grouped sampler state of epoch "
                    << epoch << " needs that epoch's embeddings "
                    << "(set_embeddings before load_state); have "
                    << (emb_epoch_ < 0 ? std::string("none") : std::to_string(emb_epoch_)));
    FNVLP_CHECK(st.at("embeddings_fingerprint").get<uint64_t>() == emb_fingerprint_,
                "grouped sampler state of epoch "
                    << epoch << " was composed from other embeddings than the ones set now");
    epoch_ = epoch;
    grouped_ = true;
    resplit_ = st.value("resplit", json());
    if (resplit_.is_null())
      build_order();
    else
      build_resplit_order();
    const int64_t done = st.at("done").get<int64_t>();
    const int64_t space = st.at("space").get<int64_t>();
    const int64_t space_batches = st.at("space_batches").get<int64_t>();
    FNVLP_CHECK(done >= 0 && done <= grouped_batches_per_epoch() && space >= -1 &&
                    space < search_spaces() && space_batches >= 0,
                "malformed grouped sampler state " << st.dump());
    if (space >= 0) {
      enter_space(space);
      current_->set_unselected_mask(st.at("unselected").get<std::string>());
      FNVLP_CHECK(space_batches <= current_->size() / batch_size_ &&
                      current_->remaining() == current_->size() - space_batches * batch_size_,
                  "grouped sampler state: search space "
                      << space << " has " << current_->remaining() << " unselected pairs after "
                      << space_batches << " batches of " << batch_size_);
      space_batches_ = space_batches;
    }
    done_ = done;
  } catch (const json::exception& e) {
    FNVLP_FAIL("malformed sampler state: " << e.what());
  }
}

FalconSampler::FalconSampler(const data::BlockPartition& partition, int64_t batch_size,
                             uint64_t seed, int rank, int64_t search_space, QSource& q_source)
    : GroupedSampler(
          partition, batch_size, seed, rank,
          [&] {
            GroupedConfig c;
            c.search_space = search_space;
            return c;
          }(),
          &q_source) {}

}  // namespace fnvlp::negatives
