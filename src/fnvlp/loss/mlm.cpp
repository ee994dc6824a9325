#include "fnvlp/loss/mlm.hpp"

#include <ATen/Parallel.h>
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "fnvlp/core/blas.hpp"
#include "fnvlp/core/device_copy.hpp"
#include "fnvlp/core/error.hpp"
#include "fnvlp/core/intraop_loops.hpp"
#include "fnvlp/kernels/cpu_float.hpp"
#include "fnvlp/kernels/gemm_few_rows.hpp"
#include "fnvlp/kernels/grad_accumulation.hpp"
#include "fnvlp/kernels/simd_math.hpp"

namespace fnvlp::loss {

MlmMasking mask_tokens(const torch::Tensor& ids, const torch::Tensor& attn, double probability,
                       int64_t vocab_size, int64_t mask_id, const std::vector<int64_t>& never_mask,
                       torch::Generator gen, std::optional<torch::Device> device) {
  FNVLP_CHECK(ids.defined() && ids.dim() == 2, "mlm: ids must be [b, L]");
  const torch::Device to = device.value_or(ids.device());
  FNVLP_CHECK(probability >= 0 && probability <= 1,
              "mlm: probability must be in [0, 1], got " << probability);
  FNVLP_CHECK(vocab_size > 0 && mask_id >= 0 && mask_id < vocab_size,
              "mlm: mask_id " << mask_id << " outside the vocabulary of " << vocab_size);
  const auto cpu_long = torch::TensorOptions().dtype(torch::kLong);
  const torch::Tensor x = ids.to(torch::kCPU, torch::kLong);
  const int64_t b = x.size(0), len = x.size(1);

  torch::Tensor maskable = torch::ones({b, len}, torch::kBool);
  if (attn.defined()) {
    FNVLP_CHECK(attn.sizes() == ids.sizes(),
                "mlm: attention mask " << attn.sizes() << " vs ids " << ids.sizes());
    maskable = attn.to(torch::kCPU).ne(0);
  }
  for (int64_t special : never_mask) maskable = maskable & x.ne(special);

  // Three draws in a fixed order: the generator state alone decides the masks.
  const torch::Tensor u_select = torch::rand({b, len}, gen, torch::kDouble);
  const torch::Tensor u_split = torch::rand({b, len}, gen, torch::kDouble);
  const torch::Tensor random_ids = torch::randint(vocab_size, {b, len}, gen, cpu_long);

  // BERT: selected ~ Bernoulli(p); then [MASK] if u < 0.8, random token if 0.8 <= u < 0.9,
  // unchanged otherwise (ALBEF draws Bernoulli(0.8), then Bernoulli(0.5) of the rest: the same
  // 80/10/10 split).
  const torch::Tensor selected = (u_select < probability) & maskable;
  const torch::Tensor to_mask = selected & (u_split < 0.8);
  const torch::Tensor to_random = selected & (u_split >= 0.8) & (u_split < 0.9);

  torch::Tensor masked = x.masked_fill(to_mask, mask_id);
  masked = torch::where(to_random, random_ids, masked);

  MlmMasking m;
  m.input_ids = to_device_async(masked, to);
  m.labels = to_device_async(x.masked_fill(~selected, -100), to);
  m.positions = selected.reshape({-1}).nonzero().reshape({-1});
  m.targets = to_device_async(x.reshape({-1}).masked_select(selected.reshape({-1})), to);
  return m;
}

MlmMasking pad_positions(const MlmMasking& m, int64_t rows) {
  FNVLP_CHECK(
      m.positions.device().is_cpu() && m.targets.device().is_cpu() && m.labels.device().is_cpu(),
      "mlm: pad_positions takes a masking on the host");
  const int64_t selected = m.positions.size(0), total = m.labels.numel();
  FNVLP_CHECK(rows >= selected && rows <= total,
              "mlm: " << rows << " padded rows for " << selected << " selected of " << total);
  MlmMasking out = m;
  if (rows == selected) return out;
  const torch::Tensor unselected = m.labels.reshape({-1}).eq(-100).nonzero().reshape({-1});
  out.positions = torch::cat({m.positions, unselected.narrow(0, 0, rows - selected)});
  out.targets = torch::cat({m.targets, torch::full({rows - selected}, -100, m.targets.options())});
  return out;
}

int64_t padded_rows(int64_t selected, int64_t multiple, int64_t max_rows) {
  FNVLP_CHECK(multiple > 0 && selected >= 0 && selected <= max_rows,
              "mlm: padded_rows(" << selected << ", " << multiple << ", " << max_rows << ")");
  return std::min(max_rows, std::max<int64_t>(1, (selected + multiple - 1) / multiple) * multiple);
}

torch::Tensor gather_positions(const torch::Tensor& hidden, const torch::Tensor& positions) {
  FNVLP_CHECK(hidden.dim() == 3, "mlm: hidden must be [b, L, D], got " << hidden.sizes());
  FNVLP_CHECK(positions.dim() == 1, "mlm: positions must be [M]");
  return hidden.reshape({-1, hidden.size(2)})
      .index_select(0, to_device_async(positions.to(torch::kLong), hidden.device()));
}

namespace {
void check_logits(const torch::Tensor& logits, const torch::Tensor& targets) {
  FNVLP_CHECK(logits.dim() == 2, "mlm_loss: logits must be [M, V], got " << logits.sizes());
  FNVLP_CHECK(targets.dim() == 1 && targets.size(0) == logits.size(0),
              "mlm_loss: targets must be [" << logits.size(0) << "], got " << targets.sizes());
}

// Row m of x [rows, V]: lse_m = log sum_v exp(x_mv), by its maximum and one pass of exps.
FNVLP_SIMD_CLONES void row_logsumexp(const float* x, int64_t v, int64_t begin, int64_t end,
                                     float* lse) {
  for (int64_t m = begin; m < end; ++m) {
    const float* r = x + m * v;
    float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
    for (int64_t j = 0; j < v; ++j) mx = r[j] > mx ? r[j] : mx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < v; ++j) sum += simd::exp_nonpositive(r[j] - mx);
    lse[m] = mx + std::log(sum);
  }
}

// dx_mv = scale (exp(x_mv - lse_m) - [v == t_m]).
FNVLP_SIMD_CLONES void row_softmax_minus_onehot(const float* x, const float* lse, const int64_t* t,
                                                float scale, int64_t v, int64_t begin, int64_t end,
                                                float* dx) {
  for (int64_t m = begin; m < end; ++m) {
    const float* r = x + m * v;
    float* d = dx + m * v;
    const float l = lse[m];
#pragma omp simd
    for (int64_t j = 0; j < v; ++j) d[j] = scale * simd::exp_nonpositive(r[j] - l);
    d[t[m]] -= scale;
  }
}

// Mean softmax cross-entropy over a vocabulary, CE = mean_m (lse_m - x_{m, t_m}), with its
// gradient (softmax - onehot) / M formed in one pass. libtorch 1.13 runs log_softmax, a zeroed
// [M, V] NLL gradient, the NLL scatter and log_softmax's backward: four passes over [M, V]
// (~2 M floats per tiny step, 6-9 ms of it).
struct SoftmaxCrossEntropyFn : public torch::autograd::Function<SoftmaxCrossEntropyFn> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& in,
                               const torch::Tensor& targets) {
    const torch::Tensor x = in.contiguous();
    const int64_t M = x.size(0), V = x.size(1);
    torch::Tensor lse = torch::empty({M}, x.options());
    const float* xp = x.data_ptr<float>();
    float* lp = lse.data_ptr<float>();
    at::parallel_for(0, M, 1, [&](int64_t b, int64_t e) { row_logsumexp(xp, V, b, e, lp); });
    const torch::Tensor picked = x.gather(1, targets.unsqueeze(1)).squeeze(1);
    ctx->save_for_backward({x, lse, targets});
    return (lse - picked).mean();
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &lse = saved[1], &targets = saved[2];
    const int64_t M = x.size(0), V = x.size(1);
    const float scale = grads[0].item<float>() / static_cast<float>(M);
    torch::Tensor dx = torch::empty_like(x);
    const float *xp = x.data_ptr<float>(), *lp = lse.data_ptr<float>();
    const int64_t* tp = targets.data_ptr<int64_t>();
    float* dp = dx.data_ptr<float>();
    at::parallel_for(0, M, 1, [&](int64_t b, int64_t e) {
      row_softmax_minus_onehot(xp, lp, tp, scale, V, b, e, dp);
    });
    return {dx, torch::Tensor()};
  }
};

// Rows [begin, end) of z [rows, V] in place: z_m + b -> softmax(z_m + b) - onehot(t_m), with
// loss[m] = lse(z_m + b) - (z_m + b)_{t_m}. A row of BERT's vocabulary (122 KB) stays in the
// core's L2 cache across the three passes. A row whose target is negative (a padding row,
// pad_positions' -100) gets no loss and no gradient.
FNVLP_SIMD_CLONES void rows_softmax_minus_onehot_inplace(float* z, const float* b, const int64_t* t,
                                                         int64_t v, int64_t begin, int64_t end,
                                                         float* loss) {
  for (int64_t m = begin; m < end; ++m) {
    float* r = z + m * v;
    if (t[m] < 0) {
      std::fill(r, r + v, 0.0f);
      loss[m] = 0.0f;
      continue;
    }
    float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
    for (int64_t j = 0; j < v; ++j) {
      const float x = r[j] + b[j];
      r[j] = x;
      mx = x > mx ? x : mx;
    }
    const float picked = r[t[m]];
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < v; ++j) {
      const float e = simd::exp_nonpositive(r[j] - mx);
      r[j] = e;
      sum += e;
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int64_t j = 0; j < v; ++j) r[j] *= inv;
    r[t[m]] -= 1.0f;
    loss[m] = mx + std::log(sum) - picked;
  }
}

int blas_int(int64_t v) { return fnvlp::blas_int(v, "linear_cross_entropy"); }

// The decoder's logits z = h W^T + b feed nothing but the cross-entropy, so one node does both
// (the fused linear cross-entropy of Liger-Kernel; no chunking: M is ~70 rows here):
//   CE = mean_m (lse(z_m) - z_{m, t_m}),  G = softmax(z) - onehot(t) formed in the forward in
//   z's own buffer, so the backward is GEMMs and a column sum, with s = dCE / M:
//   dh = s G W,  dW = s G^T h (added into W's bound .grad(), kernels/grad_accumulation.hpp),
//   db = s sum_m G_m.
// Against a Linear (addmm copying b into every row first) and SoftmaxCrossEntropyFn: no bias
// broadcast, one exp per logit instead of two, no [M, V] gradient allocated in the backward.
// Columns of G per backward block: 4096 x M floats (1.1 MB at M = 70) stay in L2 across the
// block's three products.
constexpr int64_t kVocabBlock = 4096;

// `counted` > 0: the mean over that many rows, the others padding (targets -100); 0: over all.
struct LinearCrossEntropyFn : public torch::autograd::Function<LinearCrossEntropyFn> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& h,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               const torch::Tensor& targets, int64_t counted) {
    const int64_t M = h.size(0), K = h.size(1), V = weight.size(0);
    torch::Tensor g = torch::empty({M, V}, h.options());
    gemm_nt_few_rows(M, V, K, h.data_ptr<float>(), K, weight.data_ptr<float>(), K,
                     g.data_ptr<float>(), V);
    torch::Tensor loss = torch::empty({M}, h.options());
    float* gp = g.data_ptr<float>();
    float* lp = loss.data_ptr<float>();
    const float* bp = bias.data_ptr<float>();
    const int64_t* tp = targets.data_ptr<int64_t>();
    at::parallel_for(0, M, 1, [&](int64_t b, int64_t e) {
      rows_softmax_minus_onehot_inplace(gp, bp, tp, V, b, e, lp);
    });
    ctx->save_for_backward({h, weight, g});
    ctx->saved_data["counted"] = counted;
    // The mean over all rows as libtorch computes it (the eager step's loss, bit for bit).
    return counted > 0 ? loss.sum() / static_cast<float>(counted) : loss.mean();
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &h = saved[0], &weight = saved[1], &g = saved[2];
    const int64_t M = g.size(0), V = g.size(1), K = h.size(1);
    const int64_t counted = ctx->saved_data["counted"].toInt();
    const float s = grads[0].item<float>() / static_cast<float>(counted > 0 ? counted : M);
    const float* gp = g.data_ptr<float>();
    torch::Tensor dh, dw, db;
    if (ctx->needs_input_grad(0)) dh = torch::empty({M, K}, h.options());
    float* acc_w = nullptr;
    float beta_w = 0.0f;
    if (ctx->needs_input_grad(1)) {
      torch::Tensor leaf = weight;
      torch::Tensor* acc = bound_grad(leaf, g);
      if (!acc) dw = torch::empty({V, K}, g.options());
      acc_w = acc ? acc->data_ptr<float>() : dw.data_ptr<float>();
      beta_w = acc ? 1.0f : 0.0f;
    }
    if (ctx->needs_input_grad(2)) db = torch::zeros({V}, g.options());
    // All three in vocabulary blocks: a block of G (and of W) comes from memory once for dh, dW
    // and db together, where whole-matrix calls would stream the 8.5 MB G three times and W
    // twice (tiny preset, M = 70): 1.1 ms less per step measured (13.2 against 14.3 ms, cold
    // caches, one thread). dh's sum over the blocks runs in OpenBLAS's own K-block order.
    const float* wp = weight.data_ptr<float>();
    for (int64_t v0 = 0; v0 < V; v0 += kVocabBlock) {
      const int64_t n = std::min(kVocabBlock, V - v0);
      if (dh.defined())
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blas_int(M), blas_int(K),
                    blas_int(n), s, gp + v0, blas_int(V), wp + v0 * K, blas_int(K),
                    v0 == 0 ? 0.0f : 1.0f, dh.data_ptr<float>(), blas_int(K));
      if (acc_w)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, blas_int(n), blas_int(K), blas_int(M),
                    s, gp + v0, blas_int(V), h.data_ptr<float>(), blas_int(K), beta_w,
                    acc_w + v0 * K, blas_int(K));
      if (db.defined()) add_column_sums(gp + v0, M, n, V, db.data_ptr<float>() + v0);
    }
    if (db.defined()) db.mul_(s);
    return {dh, dw, db, torch::Tensor(), torch::Tensor()};
  }
};

void check_targets(const torch::Tensor& t, int64_t vocab) {
  if (t.numel() == 0) return;
  const int64_t lo = t.min().item<int64_t>(), hi = t.max().item<int64_t>();
  FNVLP_CHECK(lo >= 0 && hi < vocab, "mlm_loss: target ids [" << lo << ", " << hi
                                                              << "] outside the vocabulary of "
                                                              << vocab);
}

}  // namespace

torch::Tensor linear_cross_entropy(const torch::Tensor& h, const torch::Tensor& weight,
                                   const torch::Tensor& bias, const torch::Tensor& targets) {
  FNVLP_CHECK(h.dim() == 2 && weight.dim() == 2 && h.size(1) == weight.size(1) && bias.dim() == 1 &&
                  bias.size(0) == weight.size(0),
              "linear_cross_entropy: h " << h.sizes() << ", weight " << weight.sizes() << ", bias "
                                         << bias.sizes());
  FNVLP_CHECK(
      targets.dim() == 1 && targets.size(0) == h.size(0),
      "linear_cross_entropy: targets must be [" << h.size(0) << "], got " << targets.sizes());
  const torch::Tensor t = targets.to(torch::kLong).contiguous();
  const torch::Tensor x = h.contiguous();
  if (x.size(0) == 0 || !is_dense_cpu_float(x) || !is_dense_cpu_float(weight) ||
      !is_dense_cpu_float(bias) || !t.device().is_cpu())
    return mlm_loss(torch::linear(x, weight, bias), targets);
  check_targets(t, weight.size(0));
  return LinearCrossEntropyFn::apply(x, weight, bias, t, int64_t{0});
}

torch::Tensor padded_linear_cross_entropy(const torch::Tensor& h, const torch::Tensor& weight,
                                          const torch::Tensor& bias, const torch::Tensor& targets) {
  FNVLP_CHECK(h.dim() == 2 && targets.dim() == 1 && targets.size(0) == h.size(0),
              "padded_linear_cross_entropy: h " << h.sizes() << ", targets " << targets.sizes());
  namespace F = torch::nn::functional;
  const torch::Tensor t = targets.to(torch::kLong);
  // On the CPU (no graph to capture: the count may be read) the fused node of
  // linear_cross_entropy, its padding rows skipped.
  if (h.size(0) > 0 && is_dense_cpu_float(h) && is_dense_cpu_float(weight) &&
      is_dense_cpu_float(bias) && t.device().is_cpu()) {
    const torch::Tensor counted = t.ne(-100);
    check_targets(t.masked_select(counted), weight.size(0));
    const int64_t n = counted.sum().item<int64_t>();
    if (n == 0) return (h.sum() * 0).to(torch::kFloat);  // 0 that still belongs to the graph
    return LinearCrossEntropyFn::apply(h.contiguous(), weight, bias, t.contiguous(), n);
  }
  // Per row (an ignored target, -100, gives 0), then the mean over the rows that count: 0, not
  // cross_entropy's NaN, when none does (no token selected).
  const torch::Tensor ce = F::cross_entropy(torch::linear(h, weight, bias), t,
                                            F::CrossEntropyFuncOptions().reduction(torch::kNone));
  return ce.sum() / t.ne(-100).sum().clamp_min(1).to(ce.scalar_type());
}

torch::Tensor mlm_loss(const torch::Tensor& logits_at_positions, const torch::Tensor& targets) {
  check_logits(logits_at_positions, targets);
  // No selected token (short captions at small p): 0 that still belongs to the graph.
  if (logits_at_positions.size(0) == 0) return logits_at_positions.sum() * 0;
  const torch::Tensor t = targets.to(torch::kLong).contiguous();
  const torch::Tensor& x = logits_at_positions;
  if (!(x.device().is_cpu() && x.scalar_type() == torch::kFloat && x.layout() == torch::kStrided &&
        t.device().is_cpu()))
    return torch::nn::functional::cross_entropy(x, t);
  check_targets(t, x.size(1));
  return SoftmaxCrossEntropyFn::apply(x, t);
}

torch::Tensor mlm_loss(const torch::Tensor& logits_at_positions, const torch::Tensor& targets,
                       const torch::Tensor& soft_targets, double alpha) {
  check_logits(logits_at_positions, targets);
  FNVLP_CHECK(soft_targets.sizes() == logits_at_positions.sizes(),
              "mlm_loss: soft targets " << soft_targets.sizes() << " vs logits "
                                        << logits_at_positions.sizes());
  FNVLP_CHECK(alpha >= 0 && alpha <= 1, "mlm_loss: alpha must be in [0, 1], got " << alpha);
  if (logits_at_positions.size(0) == 0) return logits_at_positions.sum() * 0;
  const torch::Tensor hard = mlm_loss(logits_at_positions, targets);
  const torch::Tensor distill =
      -(soft_targets.detach() * torch::log_softmax(logits_at_positions, 1)).sum(1).mean();
  return (1.0 - alpha) * hard + alpha * distill;
}

torch::Tensor padded_mlm_loss(const torch::Tensor& logits_at_positions,
                              const torch::Tensor& targets) {
  namespace F = torch::nn::functional;
  const torch::Tensor t = targets.to(torch::kLong);
  const torch::Tensor ce = F::cross_entropy(logits_at_positions, t,
                                            F::CrossEntropyFuncOptions().reduction(torch::kNone));
  return ce.sum() / t.ne(-100).sum().clamp_min(1).to(ce.scalar_type());
}

torch::Tensor padded_mlm_loss(const torch::Tensor& logits_at_positions,
                              const torch::Tensor& targets, const torch::Tensor& soft_targets,
                              const torch::Tensor& alpha) {
  FNVLP_CHECK(soft_targets.sizes() == logits_at_positions.sizes() && targets.dim() == 1 &&
                  targets.size(0) == logits_at_positions.size(0),
              "padded_mlm_loss: logits " << logits_at_positions.sizes() << ", soft targets "
                                         << soft_targets.sizes() << ", targets "
                                         << targets.sizes());
  namespace F = torch::nn::functional;
  const torch::Tensor t = targets.to(torch::kLong);
  const torch::Tensor counted = t.ne(-100);
  const torch::Tensor n = counted.sum().clamp_min(1).to(torch::kFloat);
  const torch::Tensor hard =
      F::cross_entropy(logits_at_positions, t, F::CrossEntropyFuncOptions().reduction(torch::kNone))
          .to(torch::kFloat)
          .sum() /
      n;
  const torch::Tensor distill =
      (-(soft_targets.detach() * torch::log_softmax(logits_at_positions, 1)).sum(1) * counted)
          .to(torch::kFloat)
          .sum() /
      n;
  return (1.0 - alpha) * hard + alpha * distill;
}

}  // namespace fnvlp::loss
