#include "fnvlp/negatives/quantile_pick.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "fnvlp/core/error.hpp"

namespace fnvlp::negatives {

int64_t quantile_rank(double q, int64_t n) {
  FNVLP_CHECK(q >= 0.0 && q <= 1.0, "quantile q must lie in [0, 1], got " << q);
  FNVLP_CHECK(n >= 1, "quantile of an empty candidate set");
  // std::llround rounds half away from zero; q·(n−1) is non-negative, so this is floor(x + 0.5).
  return std::min<int64_t>(n - 1, std::llround(q * static_cast<double>(n - 1)));
}

int64_t quantile_pick(const float* row, const int64_t* candidates, int64_t n, double q,
                      std::vector<int64_t>& scratch) {
  const int64_t r = quantile_rank(q, n);
  scratch.assign(candidates, candidates + n);
  // Strict total order on (value, index): ties never depend on the candidates' listing order.
  auto less = [row](int64_t a, int64_t b) {
    return row[a] < row[b] || (row[a] == row[b] && a < b);
  };
  if (r == n - 1) return *std::max_element(scratch.begin(), scratch.end(), less);
  if (r == 0) return *std::min_element(scratch.begin(), scratch.end(), less);
  std::nth_element(scratch.begin(), scratch.begin() + r, scratch.end(), less);
  return scratch[static_cast<size_t>(r)];
}

ValueStats value_stats(std::vector<double> values) {
  ValueStats s;
  s.n = static_cast<int64_t>(values.size());
  if (values.empty()) {
    s.mean = s.p5 = s.p95 = std::numeric_limits<double>::quiet_NaN();
    return s;
  }
  double sum = 0;
  for (double v : values) sum += v;
  s.mean = sum / static_cast<double>(values.size());
  std::sort(values.begin(), values.end());
  s.p5 = values[static_cast<size_t>(quantile_rank(0.05, s.n))];
  s.p95 = values[static_cast<size_t>(quantile_rank(0.95, s.n))];
  return s;
}

}  // namespace fnvlp::negatives
