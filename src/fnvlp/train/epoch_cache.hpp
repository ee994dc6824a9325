#pragma once
// sampler.embeddings=cached (issue 27): the grouped samplers (GRIT, FALCON) compose epoch e + 1
// from the embeddings each pair of the rank's block got in its last training forward pass
// (falcon.txt §3.2 builds S from cached [CLS] embeddings, so no extra forward pass; App. C.2: the
// previous epoch's) instead of a second pass over the block at the end
// of epoch e (sampler.embeddings=refresh). Pairs no step has embedded yet (dropped with the tail of
// every epoch so far) are embedded at the epoch end, in eval mode, and stay unseen until a step
// embeds them.
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/data/sampler.hpp"

namespace fnvlp::train {

class EpochCache {
 public:
  EpochCache() = default;
  EpochCache(const data::PairRange& block, int64_t dim);
  bool enabled() const { return img_.defined(); }

  // This step's local rows: pair_id [B] (pairs of the block), img and txt [B, D] (any device or
  // floating type; stored as float32 on the host).
  void record(const torch::Tensor& pair_id, const torch::Tensor& img, const torch::Tensor& txt);
  // Pairs of the block no training pass has embedded, ascending.
  std::vector<int64_t> unseen() const;
  // Rows of `pair_ids` ([n, D] each, row-major) embedded outside training; they stay unseen.
  void fill(const std::vector<int64_t>& pair_ids, const std::vector<float>& img,
            const std::vector<float>& txt);
  // [block, D] float32 views of the cache (row k = pair block.begin + k).
  const torch::Tensor& image() const { return img_; }
  const torch::Tensor& text() const { return txt_; }

  // Checkpoint (collective): per pair, D image floats, D text floats and the seen flag, by
  // global pair_id, so a resume on another rank count gets its new block's rows.
  void save(const std::string& dir, const Comm& comm, int64_t num_pairs) const;
  void load(const std::string& dir, const Comm& comm);
  // What save() writes for a set of num_pairs pairs: every pair's row (2 D + 1 floats) and its
  // valid byte, whichever rank owns it (the free-space check's estimate).
  uint64_t state_bytes(int64_t num_pairs) const {
    return static_cast<uint64_t>(num_pairs) * ((2 * static_cast<uint64_t>(dim_) + 1) * 4 + 1);
  }

 private:
  data::PairRange block_;
  int64_t dim_ = 0;
  torch::Tensor img_, txt_;    // [block, D] float32, host
  std::vector<uint8_t> seen_;  // 1 once a training step embedded the pair
};

}  // namespace fnvlp::train
