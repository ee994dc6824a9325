#pragma once
// Exact per-row order statistics of a small dense similarity matrix, with the diagonal left out:
// FALCON's scheduler input (falcon.txt §3.2) needs, for every member i of a search space of M
// pairs, the m evenly spaced quantiles of {S[i, j] : j != i}. Unlike the streaming kernels of
// simstat (kernels.hpp: exact k-th largest, histogram quantiles over N columns never held at
// once), a search space's S [M, M] is in memory, so each row is sorted exactly.
//
// Kokkos kernel on the default execution space (S, a host buffer, is copied there when that is a
// device); the header is free of Kokkos so that torch translation units (negatives/falcon.cpp) can
// call it.
#include <cstdint>
#include <vector>

namespace fnvlp::similarity {

// For each row i of S (row-major [M, M], M >= 2): out[i * R + l] = the value at 0-based ascending
// rank ranks[l] (0 <= ranks[l] <= M - 2) among the M - 1 off-diagonal entries of row i. NaN is
// refused (fnvlp::Error), as the order would be undefined. Initialises Kokkos for the process if
// no job did (a KokkosRuntime kept until exit).
void row_order_statistics(const float* S, int64_t M, const std::vector<int64_t>& ranks, float* out);

}  // namespace fnvlp::similarity
