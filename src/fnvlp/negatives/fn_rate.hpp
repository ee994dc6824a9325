#pragma once
// In-batch rate of known false negatives, for telemetry (FALCON Fig. 2: the fraction of a batch's
// negatives that are in fact positives grows with the grouping quantile q). Every ordered pair
// (i, j), i != j, of the batch's members is a negative of the contrastive loss; it is a known
// false negative when both share an image_id (image rate) or a known label (label rate).
#include <cstdint>
#include <vector>

namespace fnvlp::negatives {

struct BatchFnRate {
  double image = 0;       // pairs sharing an image_id / all b(b − 1) ordered pairs
  double label = 0;       // pairs sharing a label / ordered pairs with both labels != -1
  int64_t negatives = 0;  // b(b − 1)
  int64_t labelled = 0;   // ordered pairs with both labels known
  // NaN when labelled == 0 (no label known), and image is NaN when b < 2.
};

// image_id, label: [b] each (label -1 = unknown). O(b log b).
BatchFnRate batch_false_negative_rate(const int64_t* image_id, const int64_t* label, int64_t b);
inline BatchFnRate batch_false_negative_rate(const std::vector<int64_t>& image_id,
                                             const std::vector<int64_t>& label) {
  return batch_false_negative_rate(image_id.data(), label.data(),
                                   static_cast<int64_t>(image_id.size()));
}

}  // namespace fnvlp::negatives
