#pragma once
// The training data, from data.* and augment.*: the training shards and --val's, this rank's block
// of pairs and the augmentation.
#include <memory>
#include <string>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/data/augment.hpp"
#include "fnvlp/data/dataset.hpp"
#include "fnvlp/data/sampler.hpp"
#include "fnvlp/model/model_config.hpp"
#include "fnvlp/train/pretrain_config.hpp"

namespace fnvlp::train {

// Collective where data.verify is full: every rank hashes its share of the shards in `dir` and all
// agree (data/shard_job.hpp) before libhdf5 opens any of them; then the dataset, which checks the
// shards' sizes against the manifest.
data::PairDataset open_verified_shards(const Comm& comm, ShardVerify verify,
                                       const std::string& dir);

struct TrainingData {
  // Throws naming the directory when its captions are longer than model.max_len.
  TrainingData(const Comm& comm, const DataConfig& data, const data::AugmentConfig& augment,
               const model::ModelConfig& model, const std::string& train_dir,
               const std::string& val_dir);
  data::PairRange block() const { return partition.block(rank); }

  std::string dir;  // --data
  data::PairDataset train;
  std::unique_ptr<data::PairDataset> val;  // --val (null without)
  data::BlockPartition partition;          // the pairs of each rank
  data::Augmenter augment;                 // the training augmentation
  int rank = 0;
};

}  // namespace fnvlp::train
