#pragma once
// Embeddings of every pair of a dataset with the current model (no augmentation): what the epoch
// exports (embeddings/epoch-EEE.h5), the grouped samplers and zero-shot validation read.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/data/augment.hpp"
#include "fnvlp/data/dataset.hpp"
#include "fnvlp/data/embeddings.hpp"
#include "fnvlp/data/sampler.hpp"
#include "fnvlp/model/albef.hpp"

namespace fnvlp::train {

// Collective: each rank encodes its block of `ds` in batches of `batch`; every rank receives all
// rows in pair_id order (blocks are contiguous and in rank order). The model is left in train mode.
data::Embeddings embed_dataset(const Comm& comm, model::Albef& model,
                               const data::Augmenter& augment, const data::PairDataset& ds,
                               int64_t batch, int64_t epoch, int64_t step);

// Collective: zero-shot ITC retrieval on held-out pairs (the learning signal a user watches): the
// metrics.jsonl record (val_* keys), logged on rank 0; the embeddings are written to `path`.
nlohmann::json zero_shot_validation(const Comm& comm, model::Albef& model,
                                    const data::Augmenter& augment, const data::PairDataset& val,
                                    int64_t batch, int64_t epoch, int64_t step,
                                    const std::string& path);

// This rank's block rows [block, E] of an export of every pair (copies).
std::pair<torch::Tensor, torch::Tensor> block_rows(const data::Embeddings& e,
                                                   const data::PairRange& block);

}  // namespace fnvlp::train
