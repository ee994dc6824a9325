#include "fnvlp/model/attention.hpp"

#include <ATen/Parallel.h>
#include <cblas.h>
#include <torch/version.h>

#include <atomic>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "fnvlp/core/blas.hpp"
#include "fnvlp/core/error.hpp"
#include "fnvlp/core/intraop_loops.hpp"
#include "fnvlp/kernels/simd_math.hpp"

namespace fnvlp::model {

namespace {

using simd::exp_nonpositive;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Row i of `rows` rows of n scores (already scale * q.k): add the key mask, then softmax in place.
FNVLP_SIMD_CLONES void softmax_rows(float* s, int64_t rows, int64_t n, const float* mask) {
  for (int64_t i = 0; i < rows; ++i) {
    float* row = s + i * n;
    if (mask)
      for (int64_t j = 0; j < n; ++j) row[j] += mask[j];
    // A NaN score is never the maximum, but row[j] - m keeps it NaN, so the sum and with it the
    // whole row become NaN (as libtorch's softmax): the trainer's finite check sees it.
    float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < n; ++j) m = row[j] > m ? row[j] : m;
    for (int64_t j = 0; j < n; ++j) row[j] = exp_nonpositive(row[j] - m);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; ++j) sum += row[j];
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < n; ++j) row[j] *= inv;
  }
}

// Softmax backward in place: dS = P * (dP - sum_j dP_j P_j), row by row.
FNVLP_SIMD_CLONES void softmax_backward_rows(const float* p, float* dp, int64_t rows, int64_t n) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* pr = p + i * n;
    float* dr = dp + i * n;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < n; ++j) dot += pr[j] * dr[j];
    for (int64_t j = 0; j < n; ++j) dr[j] = pr[j] * (dr[j] - dot);
  }
}

// A [B, L, *] block read or written in place: element (b, l, c) at p[b * sb + l * sl + c].
template <typename T>
struct Block {
  T* p;
  int64_t sb, sl;
  T* at(int64_t b, int64_t col) const { return p + b * sb + col; }
  Block from_col(int64_t col) const { return {p + col, sb, sl}; }  // q | k | v of a fused tensor
};
using Operand = Block<const float>;
using Output = Block<float>;

struct Dims {
  int64_t B, Lq, Lk, H, d;
  float scale;
  // Row of the keys, values and key mask that query row b attends to: kv_index[b], or b itself.
  const int64_t* kv_index = nullptr;
  int64_t head_block() const { return Lq * Lk; }  // one (b, h) score matrix
  int64_t kv_row(int64_t b) const { return kv_index ? kv_index[b] : b; }
};

int blas_int(int64_t v) { return fnvlp::blas_int(v, "attention"); }

// The softmax passes are independent per row: spread them over libtorch's intra-op threads (the
// SGEMMs stay serial calls: OpenBLAS threads a large one itself and runs a small one alone).
template <typename F>
void for_rows(const Dims& s, F&& f) {
  at::parallel_for(0, s.B * s.H, 8, [&](int64_t begin, int64_t end) {
    for (int64_t bh = begin; bh < end; ++bh) f(bh);
  });
}

// P[b, h] = softmax(scale Q_bh K_bh^T + M_b); O[b, :, h] = P[b, h] V_bh.
void attention_forward(const Dims& s, Operand q, Operand k, Operand v, const float* mask,
                       float* probs, Output out) {
  const int Lq = blas_int(s.Lq), Lk = blas_int(s.Lk), d = blas_int(s.d);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Lq, Lk, d, s.scale, q.at(b, h * s.d),
                  blas_int(q.sl), k.at(s.kv_row(b), h * s.d), blas_int(k.sl), 0.0f,
                  probs + (b * s.H + h) * s.head_block(), Lk);
  for_rows(s, [&](int64_t bh) {
    softmax_rows(probs + bh * s.head_block(), s.Lq, s.Lk,
                 mask ? mask + s.kv_row(bh / s.H) * s.Lk : nullptr);
  });
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Lq, d, Lk, 1.0f,
                  probs + (b * s.H + h) * s.head_block(), Lk, v.at(s.kv_row(b), h * s.d),
                  blas_int(v.sl), 0.0f, out.at(b, h * s.d), blas_int(out.sl));
}

// Given dO, with S = scale Q K^T + M and P = softmax(S):
//   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - rowsum(dP * P)),
//   dQ = scale dS K,  dK = scale dS^T Q.
// Every dq block is written whole (beta = 0). So are dk and dv without kv_index; with it, rows
// shared by several queries sum their contributions (beta = 1, in query order, so the result is
// deterministic): dk and dv must then start at zero.
void attention_backward(const Dims& s, Operand q, Operand k, Operand v, const float* probs,
                        Operand dout, float* scratch, Output dq, Output dk, Output dv) {
  const int Lq = blas_int(s.Lq), Lk = blas_int(s.Lk), d = blas_int(s.d);
  const float kv_beta = s.kv_index ? 1.0f : 0.0f;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Lq, Lk, d, 1.0f, dout.at(b, h * s.d),
                  blas_int(dout.sl), v.at(s.kv_row(b), h * s.d), blas_int(v.sl), 0.0f,
                  scratch + (b * s.H + h) * s.head_block(), Lk);
  for_rows(s, [&](int64_t bh) {
    softmax_backward_rows(probs + bh * s.head_block(), scratch + bh * s.head_block(), s.Lq, s.Lk);
  });
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const float* p = probs + (b * s.H + h) * s.head_block();
      const float* ds = scratch + (b * s.H + h) * s.head_block();
      const int64_t c = h * s.d, kb = s.kv_row(b);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Lk, d, Lq, 1.0f, p, Lk, dout.at(b, c),
                  blas_int(dout.sl), kv_beta, dv.at(kb, c), blas_int(dv.sl));
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Lq, d, Lk, s.scale, ds, Lk,
                  k.at(kb, c), blas_int(k.sl), 0.0f, dq.at(b, c), blas_int(dq.sl));
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Lk, d, Lq, s.scale, ds, Lk, q.at(b, c),
                  blas_int(q.sl), kv_beta, dk.at(kb, c), blas_int(dk.sl));
    }
}

// Row-major [B, L, C] with unit column stride (a fused projection's output, or a view of one).
torch::Tensor rows_view(const torch::Tensor& t) { return t.stride(2) == 1 ? t : t.contiguous(); }

Operand operand(const torch::Tensor& t) { return {t.data_ptr<float>(), t.stride(0), t.stride(1)}; }
Output output(torch::Tensor& t) { return {t.data_ptr<float>(), t.stride(0), t.stride(1)}; }

// [B, 1, 1, Lk] or [B, Lk] additive mask as B x Lk contiguous floats.
torch::Tensor flat_mask(const torch::Tensor& m, int64_t B, int64_t Lk) {
  if (m.numel() == 0) return {};
  FNVLP_CHECK(m.numel() == B * Lk && m.size(0) == B && m.size(-1) == Lk,
              "attention: mask " << m.sizes() << " does not match [" << B << ", " << Lk << "]");
  return m.reshape({B, Lk}).to(torch::kFloat).contiguous();
}

Dims dims(int64_t B, int64_t Lq, int64_t Lk, int64_t width, int64_t heads) {
  FNVLP_CHECK(heads > 0 && width % heads == 0,
              "attention: width " << width << " not divisible by " << heads << " heads");
  const int64_t d = width / heads;
  return {B, Lq, Lk, heads, d, static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)))};
}

// Autograd wrappers. Each saves its inputs and the probabilities (as the matmul formulation
// saves the softmax output); the scores themselves are never kept.
struct SelfAttentionFn : public torch::autograd::Function<SelfAttentionFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& qkv_in,
                               const torch::Tensor& mask, int64_t heads) {
    const torch::Tensor qkv = rows_view(qkv_in);
    const int64_t B = qkv.size(0), L = qkv.size(1), W = qkv.size(2) / 3;
    const Dims s = dims(B, L, L, W, heads);
    const Operand all = operand(qkv);
    torch::Tensor probs = torch::empty({B, heads, L, L}, qkv.options());
    torch::Tensor out = torch::empty({B, L, W}, qkv.options());
    const torch::Tensor m = flat_mask(mask, B, L);
    attention_forward(s, all, all.from_col(W), all.from_col(2 * W),
                      m.defined() ? m.data_ptr<float>() : nullptr, probs.data_ptr<float>(),
                      output(out));
    ctx->save_for_backward({qkv, probs});
    ctx->saved_data["heads"] = heads;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &qkv = saved[0], &probs = saved[1];
    const int64_t heads = ctx->saved_data["heads"].toInt();
    const int64_t B = qkv.size(0), L = qkv.size(1), W = qkv.size(2) / 3;
    const Dims s = dims(B, L, L, W, heads);
    const torch::Tensor dout = rows_view(grads[0]);
    torch::Tensor dqkv = torch::empty({B, L, 3 * W}, qkv.options());
    torch::Tensor scratch = torch::empty_like(probs);
    const Operand all = operand(qkv);
    Output g = output(dqkv);
    attention_backward(s, all, all.from_col(W), all.from_col(2 * W), probs.data_ptr<float>(),
                       operand(dout), scratch.data_ptr<float>(), g, g.from_col(W),
                       g.from_col(2 * W));
    return {dqkv, torch::Tensor(), torch::Tensor()};
  }
};

// kv_index: empty (query row b reads kv row b) or int64 [B] (row kv_index[b]); the mask, if any,
// covers kv's rows.
struct CrossAttentionFn : public torch::autograd::Function<CrossAttentionFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q_in,
                               const torch::Tensor& kv_in, const torch::Tensor& mask,
                               const torch::Tensor& kv_index, int64_t heads) {
    const torch::Tensor q = rows_view(q_in), kv = rows_view(kv_in);
    const int64_t B = q.size(0), Lq = q.size(1), Lk = kv.size(1), W = q.size(2);
    Dims s = dims(B, Lq, Lk, W, heads);
    if (kv_index.numel() > 0) s.kv_index = kv_index.data_ptr<int64_t>();
    const Operand kvo = operand(kv);
    torch::Tensor probs = torch::empty({B, heads, Lq, Lk}, q.options());
    torch::Tensor out = torch::empty({B, Lq, W}, q.options());
    const torch::Tensor m = flat_mask(mask, kv.size(0), Lk);
    attention_forward(s, operand(q), kvo, kvo.from_col(W),
                      m.defined() ? m.data_ptr<float>() : nullptr, probs.data_ptr<float>(),
                      output(out));
    ctx->save_for_backward({q, kv, probs, kv_index});
    ctx->saved_data["heads"] = heads;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &q = saved[0], &kv = saved[1], &probs = saved[2], &kv_index = saved[3];
    const int64_t heads = ctx->saved_data["heads"].toInt();
    const int64_t B = q.size(0), Lq = q.size(1), Lk = kv.size(1), W = q.size(2);
    Dims s = dims(B, Lq, Lk, W, heads);
    if (kv_index.numel() > 0) s.kv_index = kv_index.data_ptr<int64_t>();
    const torch::Tensor dout = rows_view(grads[0]);
    torch::Tensor dq = torch::empty({B, Lq, W}, q.options());
    torch::Tensor dkv = s.kv_index ? torch::zeros({kv.size(0), Lk, 2 * W}, kv.options())
                                   : torch::empty({kv.size(0), Lk, 2 * W}, kv.options());
    torch::Tensor scratch = torch::empty_like(probs);
    const Operand kvo = operand(kv);
    Output g = output(dkv);
    attention_backward(s, operand(q), kvo, kvo.from_col(W), probs.data_ptr<float>(), operand(dout),
                       scratch.data_ptr<float>(), output(dq), g, g.from_col(W));
    return {dq, dkv, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

void check_input(const torch::Tensor& t, int64_t parts, const char* what) {
  FNVLP_CHECK(t.defined() && t.dim() == 3 && t.size(2) % parts == 0,
              what << ": expected [B, L, " << parts << " x width], got "
                   << (t.defined() ? t.sizes() : at::IntArrayRef{}));
  FNVLP_CHECK(fused_attention_applies(t), what << ": needs a CPU float32 tensor");
}

}  // namespace

namespace {
std::atomic<AttentionKernel> chosen_kernel{AttentionKernel::kAuto};
// BERT's masked score (albef.cpp): exp(-1e4 + s - max) is exactly 0 in float32.
constexpr double kMaskedScore = -1e4;
// Key rows per tensor-core-friendly block: 8 bf16 (16 bytes) keep a GEMM's leading dimension
// aligned for cuBLAS's vectorised kernels.
constexpr int64_t kCudaKeyAlign = 8;
}  // namespace

namespace {

struct SplitHeadsFn : public torch::autograd::Function<SplitHeadsFn> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const torch::Tensor& x, int64_t n, int64_t heads) {
    const int64_t B = x.size(0), L = x.size(1), d = x.size(2) / n / heads;
    ctx->saved_data["n"] = n;
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["B"] = B;
    ctx->saved_data["L"] = L;
    const auto v = x.view({B, L, n, heads, d}).permute({2, 0, 3, 1, 4});
    torch::autograd::variable_list out;
    for (int64_t i = 0; i < n; ++i) out.push_back(v.select(0, i));
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    const int64_t n = ctx->saved_data["n"].toInt(), heads = ctx->saved_data["heads"].toInt(),
                  B = ctx->saved_data["B"].toInt(), L = ctx->saved_data["L"].toInt();
    const torch::Tensor* first = nullptr;
    for (const auto& t : g)
      if (t.defined()) {
        first = &t;
        break;
      }
    if (first == nullptr) return {torch::Tensor(), torch::Tensor(), torch::Tensor()};
    const int64_t d = first->size(3), row = n * heads * d;
    // The slices of one [B, L, n, h, d] buffer already: that buffer.
    bool packed = true;
    for (int64_t i = 0; i < n && packed; ++i) {
      const auto& t = g[static_cast<size_t>(i)];
      packed = t.defined() && t.scalar_type() == first->scalar_type() &&
               t.device() == first->device() && t.is_alias_of(g[0]) &&
               t.strides() == torch::IntArrayRef({L * row, d, row, 1}) &&
               t.storage_offset() == g[0].storage_offset() + i * heads * d;
    }
    if (packed)
      return {g[0].as_strided({B, L, row}, {L * row, row, 1}, g[0].storage_offset()),
              torch::Tensor(), torch::Tensor()};
    torch::Tensor out = torch::empty({B, L, n, heads, d}, first->options());
    for (int64_t i = 0; i < n; ++i) {
      auto slot = out.select(2, i);
      const auto& t = g[static_cast<size_t>(i)];
      if (t.defined())
        slot.copy_(t.transpose(1, 2));
      else
        slot.zero_();
    }
    return {out.view({B, L, row}), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

std::vector<torch::Tensor> split_heads(const torch::Tensor& x, int64_t n, int64_t heads) {
  FNVLP_CHECK(x.dim() == 3 && n > 0 && heads > 0 && x.size(2) % (n * heads) == 0,
              "split_heads: expected [B, L, n * heads * d]");
  if (!x.requires_grad() || !torch::GradMode::is_enabled()) {
    const int64_t B = x.size(0), L = x.size(1), d = x.size(2) / n / heads;
    return x.view({B, L, n, heads, d}).permute({2, 0, 3, 1, 4}).unbind(0);
  }
  return SplitHeadsFn::apply(x, n, heads);
}

bool sdpa_built() {
#if TORCH_VERSION_MAJOR >= 2
  return true;
#else
  return false;
#endif
}

void set_attention_kernel(AttentionKernel kernel) {
  FNVLP_CHECK(kernel != AttentionKernel::kSdpa || sdpa_built(),
              "attention kernel sdpa needs libtorch >= 2.0 (at::scaled_dot_product_attention); "
              "this is libtorch " TORCH_VERSION ": use auto or materialised");
  chosen_kernel = kernel;
}

torch::Tensor materialised_attention(const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v, const torch::Tensor& additive_mask,
                                     double p, bool training, int64_t key_align) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  const int64_t Lk = k.size(-2), pad = (key_align - Lk % key_align) % key_align;
  torch::Tensor keys = k, values = v, mask = additive_mask;
  if (pad > 0) {
    keys = at::constant_pad_nd(k, {0, 0, 0, pad});
    values = at::constant_pad_nd(v, {0, 0, 0, pad});
    mask = mask.defined() ? at::constant_pad_nd(mask, {0, pad}, kMaskedScore)
                          : at::constant_pad_nd(torch::zeros({1, 1, 1, Lk}, q.options()), {0, pad},
                                                kMaskedScore);
  }
  auto scores = torch::matmul(q, keys.transpose(-2, -1));
  // One pass for the scale and the mask: M + scale * (Q K^T).
  scores = mask.defined() ? torch::add(mask, scores, scale) : scores.mul_(scale);
  auto probs = torch::softmax(scores, -1);
  if (p > 0.0 && training) probs = torch::dropout(probs, p, /*train=*/true);
  return torch::matmul(probs, values);
}

torch::Tensor sdpa_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& additive_mask, double p, bool training) {
#if TORCH_VERSION_MAJOR >= 2
  std::optional<at::Tensor> mask;
  if (additive_mask.defined()) mask = additive_mask;
  return at::scaled_dot_product_attention(q, k, v, mask, training ? p : 0.0);
#else
  FNVLP_FAIL("sdpa_attention needs libtorch >= 2.0; this is libtorch " TORCH_VERSION);
#endif
}

torch::Tensor heads_attention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, const torch::Tensor& additive_mask, double p,
                              bool training) {
  const AttentionKernel kernel = chosen_kernel;
  const bool sdpa = kernel == AttentionKernel::kSdpa ||
                    (kernel == AttentionKernel::kAuto && sdpa_built() && q.is_cuda() &&
                     !at::globalContext().deterministicAlgorithms());
  if (sdpa) return sdpa_attention(q, k, v, additive_mask, p, training);
  return materialised_attention(q, k, v, additive_mask, p, training,
                                q.is_cuda() ? kCudaKeyAlign : 1);
}

bool fused_attention_applies(const torch::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == torch::kFloat && t.layout() == torch::kStrided;
}

torch::Tensor fused_self_attention(const torch::Tensor& qkv, const torch::Tensor& additive_mask,
                                   int64_t heads) {
  check_input(qkv, 3, "fused_self_attention");
  // Autograd's apply() does not take undefined tensors: "no mask" travels as an empty one.
  return SelfAttentionFn::apply(
      qkv, additive_mask.defined() ? additive_mask : torch::empty({0}, qkv.options()), heads);
}

torch::Tensor fused_cross_attention(const torch::Tensor& q, const torch::Tensor& kv, int64_t heads,
                                    const torch::Tensor& additive_mask,
                                    const torch::Tensor& kv_index) {
  check_input(q, 1, "fused_cross_attention");
  check_input(kv, 2, "fused_cross_attention");
  torch::Tensor index = torch::empty({0}, torch::kLong);
  if (kv_index.defined()) {
    index = kv_index.to(torch::kCPU, torch::kLong).contiguous();
    FNVLP_CHECK(index.dim() == 1 && index.size(0) == q.size(0), "fused_cross_attention: kv_index "
                                                                    << index.sizes() << " for "
                                                                    << q.size(0) << " query rows");
    if (index.numel() > 0) {
      const int64_t lo = index.min().item<int64_t>(), hi = index.max().item<int64_t>();
      FNVLP_CHECK(lo >= 0 && hi < kv.size(0), "fused_cross_attention: kv_index ["
                                                  << lo << ", " << hi << "] outside [0, "
                                                  << kv.size(0) << ")");
    }
  }
  FNVLP_CHECK((kv_index.defined() || kv.size(0) == q.size(0)) && kv.size(2) == 2 * q.size(2),
              "fused_cross_attention: q " << q.sizes() << " and kv " << kv.sizes() << " disagree");
  return CrossAttentionFn::apply(
      q, kv, additive_mask.defined() ? additive_mask : torch::empty({0}, q.options()), index,
      heads);
}

}  // namespace fnvlp::model
