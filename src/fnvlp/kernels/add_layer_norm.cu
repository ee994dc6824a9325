// CUDA kernels of kernels/add_layer_norm.hpp: y = LayerNorm(a + b) and its backward. A warp per
// row (its sums by shuffles, equal on every lane), the row re-read from L1 for each pass; dγ and
// dβ as per-chunk column sums added in chunk order, so no atomics and the same bits every run.
#include <cuda_bf16.h>

#include <stdexcept>
#include <string>

#include "fnvlp/kernels/add_layer_norm_launch.hpp"

namespace fnvlp::kernels::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 4;  // warps per block of the row kernels
constexpr int kColTile = 32;      // columns per block of the dγ/dβ kernel
constexpr int kRowLanes = 8;      // row lanes per column there
constexpr int64_t kRowsPerChunk = 128;
constexpr int64_t kMaxChunks = 512;

__device__ __forceinline__ float load(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load(const __nv_bfloat16* p, int64_t i) {
  return __bfloat162float(p[i]);
}
__device__ __forceinline__ void store(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, int64_t i, float v) {
  p[i] = __float2bfloat16_rn(v);
}

// Butterfly sum: every lane adds the same pairs (x + y and y + x are the same float), so every
// lane holds the same total.
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <typename TB>
__global__ void __launch_bounds__(kWarp* kRowsPerBlock)
    forward_kernel(const float* __restrict__ a, const TB* __restrict__ b,
                   const float* __restrict__ gamma, const float* __restrict__ beta, float eps,
                   int64_t rows, int64_t w, float* __restrict__ sum, float* __restrict__ y,
                   float* __restrict__ mean, float* __restrict__ rstd) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const int64_t off = row * w;
  const float inv_w = 1.0f / static_cast<float>(w);
  float acc = 0.0f;
  for (int64_t j = threadIdx.x; j < w; j += kWarp) {
    const float s = a[off + j] + load(b, off + j);
    sum[off + j] = s;
    acc += s;
  }
  const float mu = warp_sum(acc) * inv_w;
  float sq = 0.0f;
  for (int64_t j = threadIdx.x; j < w; j += kWarp) {
    const float d = sum[off + j] - mu;
    sq += d * d;
  }
  const float rs = 1.0f / sqrtf(warp_sum(sq) * inv_w + eps);
  for (int64_t j = threadIdx.x; j < w; j += kWarp)
    y[off + j] = (sum[off + j] - mu) * rs * gamma[j] + beta[j];
  if (threadIdx.x == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

template <typename TB>
__global__ void __launch_bounds__(kWarp* kRowsPerBlock)
    backward_rows_kernel(const float* __restrict__ g_y, const float* __restrict__ g_sum,
                         const float* __restrict__ sum, const float* __restrict__ mean,
                         const float* __restrict__ rstd, const float* __restrict__ gamma,
                         int64_t rows, int64_t w, float* __restrict__ da, TB* __restrict__ db) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const int64_t off = row * w;
  const float inv_w = 1.0f / static_cast<float>(w);
  const float mu = mean[row], rs = rstd[row];
  float su = 0.0f, sux = 0.0f;
  for (int64_t j = threadIdx.x; j < w; j += kWarp) {
    const float u = g_y[off + j] * gamma[j], xh = (sum[off + j] - mu) * rs;
    su += u;
    sux += u * xh;
  }
  const float mu_u = warp_sum(su) * inv_w, mu_ux = warp_sum(sux) * inv_w;
  for (int64_t j = threadIdx.x; j < w; j += kWarp) {
    const float xh = (sum[off + j] - mu) * rs;
    float ds = rs * (g_y[off + j] * gamma[j] - mu_u - xh * mu_ux);
    if (g_sum != nullptr) ds += g_sum[off + j];
    da[off + j] = ds;
    store(db, off + j, ds);
  }
}

// partial[0][chunk][j] = Σ g_y x̂ and partial[1][chunk][j] = Σ g_y over the chunk's rows: eight
// row lanes per column, then their eight sums in lane order.
__global__ void __launch_bounds__(kColTile* kRowLanes)
    backward_columns_kernel(const float* __restrict__ g_y, const float* __restrict__ sum,
                            const float* __restrict__ mean, const float* __restrict__ rstd,
                            int64_t rows, int64_t w, int64_t rows_per_chunk, int64_t chunks,
                            float* __restrict__ partial) {
  __shared__ float sg[kRowLanes][kColTile + 1], sb[kRowLanes][kColTile + 1];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kColTile + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float pg = 0.0f, pb = 0.0f;
  if (j < w) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) {
      const float g = g_y[r * w + j];
      pg += g * ((sum[r * w + j] - mean[r]) * rstd[r]);
      pb += g;
    }
  }
  sg[threadIdx.y][threadIdx.x] = pg;
  sb[threadIdx.y][threadIdx.x] = pb;
  __syncthreads();
  if (threadIdx.y != 0 || j >= w) return;
  float tg = 0.0f, tb = 0.0f;
  for (int k = 0; k < kRowLanes; ++k) {
    tg += sg[k][threadIdx.x];
    tb += sb[k][threadIdx.x];
  }
  partial[chunk * w + j] = tg;
  partial[(chunks + chunk) * w + j] = tb;
}

__global__ void sum_chunks_kernel(const float* __restrict__ partial, int64_t chunks, int64_t w,
                                  float* __restrict__ dgamma, float* __restrict__ dbeta) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= w) return;
  float tg = 0.0f, tb = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) {
    tg += partial[c * w + j];
    tb += partial[(chunks + c) * w + j];
  }
  dgamma[j] = tg;
  dbeta[j] = tb;
}

void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("add_layer_norm: ") + what +
                             " kernel: " + cudaGetErrorString(e));
}

unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

}  // namespace

void add_layer_norm_forward(const float* a, const void* b, Dtype b_type, const float* gamma,
                            const float* beta, float eps, int64_t rows, int64_t w, float* sum,
                            float* y, float* mean, float* rstd, cudaStream_t stream) {
  if (rows == 0) return;
  const dim3 block(kWarp, kRowsPerBlock);
  if (b_type == Dtype::kBFloat16)
    forward_kernel<<<row_blocks(rows), block, 0, stream>>>(
        a, static_cast<const __nv_bfloat16*>(b), gamma, beta, eps, rows, w, sum, y, mean, rstd);
  else
    forward_kernel<<<row_blocks(rows), block, 0, stream>>>(a, static_cast<const float*>(b), gamma,
                                                           beta, eps, rows, w, sum, y, mean, rstd);
  check_launch("forward");
}

int64_t add_layer_norm_chunks(int64_t rows) {
  const int64_t c = (rows + kRowsPerChunk - 1) / kRowsPerChunk;
  return c < 1 ? 1 : (c > kMaxChunks ? kMaxChunks : c);
}

void add_layer_norm_backward(const float* g_y, const float* g_sum, const float* sum,
                             const float* mean, const float* rstd, const float* gamma, int64_t rows,
                             int64_t w, float* da, void* db, Dtype b_type, float* partial,
                             float* dgamma, float* dbeta, cudaStream_t stream) {
  const int64_t chunks = add_layer_norm_chunks(rows);
  if (rows > 0) {
    const dim3 block(kWarp, kRowsPerBlock);
    if (b_type == Dtype::kBFloat16)
      backward_rows_kernel<<<row_blocks(rows), block, 0, stream>>>(
          g_y, g_sum, sum, mean, rstd, gamma, rows, w, da, static_cast<__nv_bfloat16*>(db));
    else
      backward_rows_kernel<<<row_blocks(rows), block, 0, stream>>>(
          g_y, g_sum, sum, mean, rstd, gamma, rows, w, da, static_cast<float*>(db));
    check_launch("backward rows");
  }
  const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
  const dim3 cgrid(static_cast<unsigned>((w + kColTile - 1) / kColTile),
                   static_cast<unsigned>(chunks));
  backward_columns_kernel<<<cgrid, dim3(kColTile, kRowLanes), 0, stream>>>(
      g_y, sum, mean, rstd, rows, w, rows_per_chunk, chunks, partial);
  check_launch("backward columns");
  constexpr int kSumThreads = 256;
  sum_chunks_kernel<<<static_cast<unsigned>((w + kSumThreads - 1) / kSumThreads), kSumThreads, 0,
                      stream>>>(partial, chunks, w, dgamma, dbeta);
  check_launch("backward chunk sums");
}

}  // namespace fnvlp::kernels::cuda
