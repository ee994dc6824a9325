#pragma once
// Zero-shot image-text retrieval of a model over a sharded dataset, as ALBEF evaluates it (Li et
// al., "Align before Fuse", NeurIPS 2021, §5 and its evaluation code): ITC similarity of every
// distinct image against every caption, then for each query its top k_test candidates by ITC
// re-scored by the ITM head (positive-class logit), every other candidate at -inf.
//
// Distribution over Comm. Images (distinct image_ids, in order of first pair) and captions (pairs,
// in pair_id order) are encoded in chunks of `batch_size` on a fixed global grid, chunk blocks
// split over ranks, and all-gathered (ITC embeddings, image tokens, text hidden states), so every
// feature is computed in the same batch whatever the rank count. A rank then owns the query rows of
// the chunks it encoded (images for text retrieval, captions for image retrieval): it computes
// those ITC rows (matmul per grid chunk), their top-k and the ITM forward passes (one batch of k
// candidates per query). Only integer hit counts (and, on request, per-query ranks) are reduced,
// so the results are identical for any rank count.
//
// Memory per rank: all image tokens [images, 1+P, vision_width] and text hidden states [pairs, L,
// text_width] in float (Flickr8k val with `small`: about 220 MB).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/core/config_fields.hpp"
#include "fnvlp/eval/retrieval.hpp"

namespace fnvlp::data {
class PairDataset;
}
namespace fnvlp::model {
class AlbefImpl;
}

namespace fnvlp::eval {

struct RetrievalEvalConfig {
  // clang-format off
  FNVLP_CONFIG_FIELDS(
      // ITM re-ranked candidates per query (ALBEF: 256 COCO, 128 Flickr)
      (int64_t, k_test, 128, config::at_least(1)),
      // encoding chunk (fixed global grid: part of the result's definition)
      (int64_t, batch_size, 64, config::at_least(1)))
  // clang-format on
  void validate() const;
};

// Per pair of a dataset, read from the shards' small columns (no image is decoded).
struct DatasetIndex {
  std::vector<int64_t> image_id;          // [pairs]
  std::vector<int64_t> label;             // [pairs], -1 unknown
  std::vector<int64_t> image_first_pair;  // [images]: the pair whose image stands for it
  std::vector<int64_t> text_image;        // [pairs]: row of the pair's image in image_first_pair
  int64_t num_pairs() const { return static_cast<int64_t>(image_id.size()); }
  int64_t num_images() const { return static_cast<int64_t>(image_first_pair.size()); }
};
DatasetIndex index_dataset(const data::PairDataset& ds);

struct RetrievalEvalResult {
  RetrievalMetrics itm;  // ITM re-ranked (ALBEF's reported numbers)
  RetrievalMetrics itc;  // ITC similarity only
  // Class-level retrieval where labels are known (a hit = any item of the query's class ranks
  // within K; queries with a known label only, the whole gallery ranked): what a false-negative
  // filter is for, which the image-level hit (only the query's own image or captions) cannot see.
  bool has_class = false;
  RetrievalMetrics class_itm, class_itc;
  int64_t class_queries_images = 0, class_queries_texts = 0;
  int64_t k_test = 0;  // as used (clamped to the gallery sizes)
  int64_t pairs = 0, images = 0;
  double seconds = 0;
  // Per query, 0-based rank of its best positive (filled when asked): text retrieval per image,
  // image retrieval per caption.
  std::vector<int64_t> i2t_itc_rank, i2t_itm_rank, t2i_itc_rank, t2i_itm_rank;
  // ALBEF's keys (txt_r1 ... r_mean) for ITM, the same with prefix "itc_", k_test, pairs, images;
  // with labels the class-level ones with prefix "class_" and "class_itc_", and their query counts.
  nlohmann::json to_json(const std::string& prefix = "") const;
};

// Frozen image features of the distinct images (ViT [CLS] output before the ITC projection,
// vision_width floats each), in image_first_pair order, on every rank.
struct ImageFeatures {
  std::vector<float> cls;  // [images, vision_width]
  int64_t dim = 0;
};

// Collective. The model is put in eval mode (and left there). With `features` the ViT [CLS]
// features of the images are returned too (the linear probe's input).
RetrievalEvalResult evaluate_retrieval(const Comm& comm, model::AlbefImpl& model,
                                       const data::PairDataset& ds, const RetrievalEvalConfig& cfg,
                                       bool per_query_ranks = false,
                                       ImageFeatures* features = nullptr);

// Collective: only the ViT [CLS] features of the distinct images (for a probe's training set).
ImageFeatures encode_image_features(const Comm& comm, model::AlbefImpl& model,
                                    const data::PairDataset& ds, const DatasetIndex& index,
                                    int64_t batch_size);

}  // namespace fnvlp::eval
