#include "fnvlp/negatives/fn_rate.hpp"

#include <algorithm>
#include <limits>

#include "fnvlp/core/error.hpp"

namespace fnvlp::negatives {

namespace {

// Ordered pairs (i != j) with equal values: Σ over groups of c(c − 1).
int64_t equal_pairs(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  int64_t pairs = 0;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j < v.size() && v[j] == v[i]) ++j;
    const auto c = static_cast<int64_t>(j - i);
    pairs += c * (c - 1);
    i = j;
  }
  return pairs;
}

}  // namespace

BatchFnRate batch_false_negative_rate(const int64_t* image_id, const int64_t* label, int64_t b) {
  FNVLP_CHECK(b >= 0, "negative batch size " << b);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  BatchFnRate r;
  r.negatives = b * (b - 1);
  r.image = r.negatives > 0 ? static_cast<double>(equal_pairs({image_id, image_id + b})) /
                                  static_cast<double>(r.negatives)
                            : nan;
  std::vector<int64_t> known;
  for (int64_t i = 0; i < b; ++i)
    if (label[i] != -1) known.push_back(label[i]);
  const auto k = static_cast<int64_t>(known.size());
  r.labelled = k * (k - 1);
  r.label = r.labelled > 0
                ? static_cast<double>(equal_pairs(known)) / static_cast<double>(r.labelled)
                : nan;
  return r;
}

}  // namespace fnvlp::negatives
