#pragma once
// The CUDA launches behind kernels/add_layer_norm.hpp, on raw device pointers (the .cu file does
// not include libtorch: nvcc compiles it in seconds). Rows of width w, contiguous; statistics in
// fp32. Only in builds with FNVLP_WITH_CUDA.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace fnvlp::kernels::cuda {

enum class Dtype { kFloat, kBFloat16 };

// s = a + b, y = (s − μ) σ̂ γ + β per row; mean and rstd [rows] for the backward.
void add_layer_norm_forward(const float* a, const void* b, Dtype b_type, const float* gamma,
                            const float* beta, float eps, int64_t rows, int64_t w, float* sum,
                            float* y, float* mean, float* rstd, cudaStream_t stream);

// The number of row chunks the backward sums dγ and dβ over: a function of `rows` alone, so the
// order of every sum is fixed for a shape (bitwise repeatable, as train.deterministic asks).
int64_t add_layer_norm_chunks(int64_t rows);

// ds = σ̂ (g_y γ − mean(g_y γ) − x̂ mean(g_y γ x̂)) + g_sum (g_sum may be null), written to da (fp32)
// and db (b_type); dγ = Σ g_y x̂ and dβ = Σ g_y through partial [2, chunks, w] (scratch).
void add_layer_norm_backward(const float* g_y, const float* g_sum, const float* sum,
                             const float* mean, const float* rstd, const float* gamma, int64_t rows,
                             int64_t w, float* da, void* db, Dtype b_type, float* partial,
                             float* dgamma, float* dbeta, cudaStream_t stream);

}  // namespace fnvlp::kernels::cuda
