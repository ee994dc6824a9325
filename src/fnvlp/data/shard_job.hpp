#pragma once
// fnvlp-shard: image-caption inputs -> checksummed HDF5 shards + manifest (ARCHITECTURE.md §2).
#include <cstdint>
#include <string>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/core/config_fields.hpp"

namespace fnvlp::data {

struct ShardJobOptions {
  // clang-format off
  FNVLP_CONFIG_FIELDS(
      (std::string, input, ),
      (std::string, format, "albef"),
      (std::string, image_root, ),
      (std::string, vocab, ),
      (std::string, out, ),
      (std::string, split_file, ),
      (std::string, split, ),
      (int64_t, image_size, 128, config::at_least(1)),
      // raw: decoded image_size squares; jpeg: JPEG streams at their aspect ratio, longer side
      // at most max_side, so that training crops from the full image
      (std::string, image_codec, "raw"),
      (int64_t, max_side, 384, config::at_least(8)),
      (int64_t, jpeg_quality, 95, config::within(1, 100)),
      (int64_t, max_len, 30, config::at_least(2)),
      (int64_t, shard_size, 4096, config::at_least(1)),
      (double, max_reject_fraction, 0.01, config::within(0, 1)),
      (int64_t, image_chunk, 8, config::within(1, 64)),
      // an image file above this size is rejected unread (image_too_large)
      (int64_t, max_image_bytes, int64_t{64} << 20, config::at_least(1)),
      // images resolving outside image_root (absolute paths, '..', symlinks) are read, not
      // rejected (image_outside_root)
      (bool, allow_outside_root, false),
      // helper threads per rank for decoding and checksums
      (int64_t, threads, 1, config::at_least(1)))
  // clang-format on
};

struct ShardJobResult {
  int64_t num_pairs = 0;
  int64_t num_images = 0;
  int64_t num_shards = 0;
  int64_t rejects = 0;
  int64_t images_decoded =
      0;  // decode calls over all ranks (an image split across shards counts twice)
  double seconds = 0;
  std::string phases;  // rank 0's wall time per phase
};

// Collective over `comm`. Throws CollectiveError (same message on every rank) when the input is
// unusable or rejects exceed max_reject_fraction; then no manifest exists and no shard is left.
ShardJobResult run_shard_job(const Comm& comm, const ShardJobOptions& options);

// Collective, before a job opens DIR's shards: each shard's size and sha256 against the manifest,
// the files spread over the ranks (shard i hashed on rank i mod size). Every rank throws the same
// CollectiveError naming each file that differs, so no unverified byte reaches libhdf5. Rank 0
// logs the bytes hashed and the time.
void verify_shard_checksums(const Comm& comm, const std::string& dir);

// Collective verification of DIR: shards are split across ranks. Returns every problem found
// (identical list on every rank).
std::vector<std::string> verify_dataset_collective(const Comm& comm, const std::string& dir,
                                                   int64_t* pairs_checked = nullptr);

}  // namespace fnvlp::data
