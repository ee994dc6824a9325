#pragma once
// The q-quantile picker of FALCON Alg. 1 line 8 (falcon.txt App. C.1): among the unselected
// candidates j of the last selected member's row S[i, :], take the one whose similarity S[i, j]
// sits at quantile q. q = 1 is the most similar candidate (GRIT-VLP's grouping), q = 0 the least
// similar.
//
// Rank convention (used everywhere in negatives/, also by quantile_profile and the q telemetry):
// candidates are ordered ascending by (S[i, j], j) — equal similarities are ordered by candidate
// index, so the pick is deterministic whatever order the candidates are listed in — and the
// q-quantile of n candidates is the one at 0-based ascending rank
//     r(q, n) = round(q · (n − 1)),  round half away from zero.
// So q = 1 gives the largest similarity (the highest index among ties), q = 0 the smallest (the
// lowest index among ties), q = 0.5 the lower-or-upper median by rounding.
#include <cstdint>
#include <vector>

namespace fnvlp::negatives {

// r(q, n) above; q in [0, 1], n >= 1 (throws fnvlp::Error otherwise).
int64_t quantile_rank(double q, int64_t n);

// The candidate (an element of `candidates`, i.e. a column of `row`) at rank r(q, n) of
// row[candidates[k]], k < n. O(n) (nth_element on `scratch`, which is resized and reused so a
// caller picking repeatedly allocates once). Values must not be NaN (SearchSpace checks S once).
int64_t quantile_pick(const float* row, const int64_t* candidates, int64_t n, double q,
                      std::vector<int64_t>& scratch);

inline int64_t quantile_pick(const float* row, const std::vector<int64_t>& candidates, double q) {
  std::vector<int64_t> scratch;
  return quantile_pick(row, candidates.data(), static_cast<int64_t>(candidates.size()), q, scratch);
}

// Summary of a set of values for telemetry (q per batch, λ per anchor): mean and the 5th / 95th
// percentiles with the rank convention above (p_x = the value at ascending rank r(x, n)).
// n = 0 gives NaN everywhere.
struct ValueStats {
  double mean = 0, p5 = 0, p95 = 0;
  int64_t n = 0;
};
ValueStats value_stats(std::vector<double> values);

}  // namespace fnvlp::negatives
