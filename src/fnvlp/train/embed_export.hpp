#pragma once
// Embeddings of every pair of a dataset with the current model (no augmentation): what the epoch
// exports (embeddings/epoch-EEE.h5), the grouped samplers and zero-shot validation read.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/data/augment.hpp"
#include "fnvlp/data/dataset.hpp"
#include "fnvlp/data/embeddings.hpp"
#include "fnvlp/data/sampler.hpp"
#include "fnvlp/model/albef.hpp"

namespace fnvlp::train {

// This rank's embeddings of `pair_ids` (eval mode, no augmentation, no communication), in batches
// of `batch`, in the order given; `first` is pair_ids[0]. The model is left in train mode.
data::Embeddings embed_pairs(model::Albef& model, const data::Augmenter& augment,
                             const data::PairDataset& ds, const std::vector<int64_t>& pair_ids,
                             int64_t batch);

// Collective: each rank encodes its block of `ds` (BlockPartition) in batches of `batch` and gets
// those rows (O(N/R) memory). The model is left in train mode.
data::Embeddings embed_dataset(const Comm& comm, model::Albef& model,
                               const data::Augmenter& augment, const data::PairDataset& ds,
                               int64_t batch, int64_t epoch, int64_t step);

// Collective: zero-shot ITC retrieval on held-out pairs (the learning signal a user watches): the
// metrics.jsonl record (val_* keys), logged on rank 0; the embeddings are written to `path`.
nlohmann::json zero_shot_validation(const Comm& comm, model::Albef& model,
                                    const data::Augmenter& augment, const data::PairDataset& val,
                                    int64_t batch, int64_t epoch, int64_t step,
                                    const std::string& path);

// Collective: every rank's block, in rank order (blocks are contiguous: pair_id order). For small
// sets only (held-out pairs): it is O(N x D) on every rank.
data::Embeddings gather_embeddings(const Comm& comm, const data::Embeddings& block);

// Collective: each rank's block of an export of `total` pairs into one file at `path` (written
// under path.tmp, renamed when complete). Same bytes as data::write_embeddings of the whole.
void write_embeddings_collective(const Comm& comm, const std::string& path,
                                 const data::Embeddings& block, int64_t total);

// The rows of `e` as [rows, D] image and text tensors: views of its vectors, valid while `e` is
// (the grouped samplers copy what they are given).
std::pair<torch::Tensor, torch::Tensor> embedding_tensors(const data::Embeddings& e);

}  // namespace fnvlp::train
