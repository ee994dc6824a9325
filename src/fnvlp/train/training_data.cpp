#include "fnvlp/train/training_data.hpp"

#include "fnvlp/core/error.hpp"
#include "fnvlp/data/shard_job.hpp"

namespace fnvlp::train {

data::PairDataset open_verified_shards(const Comm& comm, ShardVerify verify,
                                       const std::string& dir) {
  if (verify == ShardVerify::kFull) data::verify_shard_checksums(comm, dir);
  return data::PairDataset(dir);
}

TrainingData::TrainingData(const Comm& comm, const DataConfig& data,
                           const data::AugmentConfig& augment, const model::ModelConfig& model,
                           const std::string& train_dir, const std::string& val_dir)
    : dir(train_dir),
      train(open_verified_shards(comm, data.verify, train_dir)),
      partition(train.num_pairs(), comm.size()),
      augment(augment, model.image_size),
      rank(comm.rank()) {
  if (!val_dir.empty()) {
    if (data.verify == ShardVerify::kFull) data::verify_shard_checksums(comm, val_dir);
    val = std::make_unique<data::PairDataset>(val_dir);
  }
  FNVLP_CHECK(train.max_len() <= model.max_len, train_dir << ": captions of " << train.max_len()
                                                          << " tokens exceed model.max_len "
                                                          << model.max_len);
}

}  // namespace fnvlp::train
