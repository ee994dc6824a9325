#pragma once
// FALCON's scheduler input Ŝ (falcon.txt §3.2): for every row i of a search space's similarity
// matrix S [M, M], the m evenly spaced quantiles of its off-diagonal entries {S[i, j] : j != i},
// then a row-wise softmax:
//     v[i, l] = the entry at ascending rank r(l / (m − 1), M − 1),  l = 0 .. m − 1
//     Ŝ[i, :] = softmax(v[i, :])
// with the rank convention of quantile_pick.hpp (r(q, n) = round(q · (n − 1))). The rows of Ŝ are
// ascending (softmax is monotone): the paper sorts them before the MLP for permutation invariance,
// which holds here by construction.
//
// quantile_values is the torch reference (a full per-row sort, O(M² log M)). The scheduler
// computes v with the similarity/ Kokkos kernel (row_quantiles.hpp, the same ranks and values,
// checked bitwise in tests) and passes it to FalconScheduler::begin_search_space_quantiles.
#include <torch/torch.h>

#include <cstdint>

namespace fnvlp::negatives {

// v above: S float [M, M] (M >= 2, any device), m >= 2 -> float [M, m], ascending per row.
torch::Tensor quantile_values(const torch::Tensor& S, int64_t m);

// Ŝ = row-wise softmax of v [M, m].
torch::Tensor quantile_softmax(const torch::Tensor& values);

// Ŝ = quantile_softmax(quantile_values(S, m)).
torch::Tensor quantile_profile(const torch::Tensor& S, int64_t m);

}  // namespace fnvlp::negatives
