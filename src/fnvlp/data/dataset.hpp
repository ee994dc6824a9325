#pragma once
// Random access to a sharded dataset (ARCHITECTURE.md §2) by global pair_id, as torch tensors.
//
// The manifest is validated once when the dataset is opened (shard files present with the
// manifest's size, pair ranges tiling [0, N), every shard's attributes and image rows matching);
// the shards then stay open. The small per-pair datasets of a shard (tokens, lengths, ids, labels)
// are loaded into memory the first time a pair of that shard is read, so a rank that only reads
// its own block holds only those shards' columns. Images are read by rows, grouped by shard, in
// ascending order, one hyperslab per run of consecutive rows, with a chunk cache of at least four
// chunks: each chunk is decoded (and its Fletcher32 checked) once per batch. A jpeg dataset's
// image_offset and image_hw load with the columns; its images come back as their stored bytes
// (Batch::encoded), which the consumer decodes (Augmenter), so reads stay short under the lock.
//
// Thread safety: read() may be called from any thread, also concurrently; every HDF5 call inside
// holds h5::global_mutex(), so callers must not hold it themselves.
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "fnvlp/data/image_codec.hpp"
#include "fnvlp/data/manifest.hpp"

namespace fnvlp::data {

struct Batch {
  torch::Tensor images;  // uint8 [b, S, S, 3]; undefined for jpeg shards (encoded)
  // jpeg shards: the stored JPEG of each pair, in batch order, undecoded (Augmenter decodes them)
  std::shared_ptr<const EncodedImages> encoded;
  torch::Tensor tokens;          // int64 [b, L]: [CLS] ... [SEP] [PAD]=0
  torch::Tensor attention_mask;  // int64 [b, L]: 1 for the first lengths[i] tokens
  torch::Tensor pair_id;         // int64 [b]
  torch::Tensor image_id;        // int64 [b]: equal image_id = known positives
  torch::Tensor label;           // int64 [b]: semantic class, -1 unknown
  // What a consumer's prepare hook made of the images on the reading thread (Prefetcher::
  // set_prepare; the trainer's augmented float images) and the index it was given; undefined / -1
  // without a hook.
  torch::Tensor prepared;
  torch::Tensor prepared2;  // a second view where the consumer asks for one (TCL)
  int64_t prepared_for = -1;
  // A consumer's copy of the batch to its device, in flight (train/batch_upload.hpp); null without.
  std::shared_ptr<const void> upload;
  int64_t size() const { return pair_id.defined() ? pair_id.size(0) : 0; }
};

struct PairDatasetOptions {
  // Chunk cache of each shard's images dataset; 0: max(1 MiB, max(4, batch_hint / 16) chunks).
  // Larger values keep chunks across batches (up to a shard's whole image set: each chunk is
  // then decoded once per epoch instead of about once per image read).
  int64_t chunk_cache_bytes = 0;
  int64_t batch_hint = 64;
  // Also compare every shard's sha256 with the manifest at open (reads every byte: slow).
  bool verify_checksums = false;
};

class PairDataset {
 public:
  explicit PairDataset(const std::string& dir, const PairDatasetOptions& options = {});
  ~PairDataset();
  PairDataset(const PairDataset&) = delete;
  PairDataset& operator=(const PairDataset&) = delete;

  const std::string& dir() const { return dir_; }
  const Manifest& manifest() const { return manifest_; }
  int64_t num_pairs() const { return manifest_.num_pairs; }
  int64_t num_images() const { return manifest_.num_images; }
  int64_t image_size() const { return manifest_.image_size; }
  int64_t max_len() const { return manifest_.max_len; }
  int64_t num_shards() const { return static_cast<int64_t>(shards_.size()); }
  // [PAD] [CLS] [SEP] [MASK] ids of the vocabulary the captions were tokenized with: the
  // manifest's, or for a manifest written before it recorded them, looked up in its vocab_path
  // (whose sha256 must match). Throws naming the manifest where neither is available.
  const SpecialTokens& special_tokens() const;

  // (shard index, row in that shard) of a global pair_id, by binary search over the shards.
  std::pair<int64_t, int64_t> locate(int64_t pair_id) const;

  // Reads the pairs in the given order (duplicates allowed).
  Batch read(const std::vector<int64_t>& pair_ids) const;
  // image_id and label of the pairs, in the given order (no image is read).
  void ids(const std::vector<int64_t>& pair_ids, std::vector<int64_t>* image_id,
           std::vector<int32_t>* label) const;

 private:
  struct Shard;
  const Shard& columns(int64_t shard) const;  // loads the per-pair columns once

  std::string dir_;
  PairDatasetOptions options_;
  Manifest manifest_;
  std::vector<int64_t> first_pair_;  // first pair_id of every shard, ascending
  std::vector<std::unique_ptr<Shard>> shards_;
  mutable std::once_flag special_once_;
  mutable SpecialTokens special_;
};

}  // namespace fnvlp::data
