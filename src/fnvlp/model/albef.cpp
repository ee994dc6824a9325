#include "fnvlp/model/albef.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "fnvlp/core/blas.hpp"
#include "fnvlp/core/device_copy.hpp"
#include "fnvlp/kernels/cpu_float.hpp"
#include "fnvlp/kernels/grad_accumulation.hpp"
#include "fnvlp/model/attention.hpp"
#include "fnvlp/model/gelu.hpp"
#include "fnvlp/model/layer_norm.hpp"

namespace fnvlp::model {

namespace {

// LayerNorm epsilons of the reference implementations: timm ViT (ALBEF passes eps=1e-6) and BERT.
constexpr double kVitLnEps = 1e-6;
constexpr double kBertLnEps = 1e-12;
// BERT's extended attention mask value: exp(-1e4 + s) underflows to exactly 0 in float32 for any
// realistic score s, so padded keys get zero weight, and -1e4 is still finite in fp16/bf16.
constexpr double kMaskedScore = -1e4;

torch::nn::LayerNorm layer_norm(int64_t width, double eps) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({width}).eps(eps));
}

torch::Tensor maybe_dropout(const torch::Tensor& x, double p, bool training) {
  return (p > 0.0 && training) ? torch::dropout(x, p, /*train=*/true) : x;
}

// [B, h, L, d] -> [B, L, h*d]
torch::Tensor merge_heads(const torch::Tensor& ctx) {
  return ctx.transpose(1, 2).reshape({ctx.size(0), ctx.size(2), ctx.size(1) * ctx.size(3)});
}

// The fused CPU kernels (model/attention.hpp) where they apply; heads_attention (SDPA or the
// materialised scores) for other devices and types, and for attention dropout in training.
torch::Tensor self_attention(const torch::Tensor& qkv, const torch::Tensor& additive_mask,
                             int64_t heads, double p, bool training) {
  if (fused_attention_applies(qkv) && !(p > 0.0 && training))
    return fused_self_attention(qkv, additive_mask, heads);
  const auto t = split_heads(qkv, 3, heads);
  return merge_heads(heads_attention(t[0], t[1], t[2], additive_mask, p, training));
}

// Query row b reads kv row kv_index[b] (or b where kv_index is undefined).
torch::Tensor cross_attention(const torch::Tensor& q, const torch::Tensor& kv,
                              const torch::Tensor& kv_index, int64_t heads, double p,
                              bool training) {
  if (fused_attention_applies(q) && fused_attention_applies(kv) && !(p > 0.0 && training))
    return fused_cross_attention(q, kv, heads, {}, kv_index);
  const auto qh = split_heads(q, 1, heads)[0];
  const auto t = split_heads(kv_index.defined() ? kv.index_select(0, kv_index) : kv, 2, heads);
  return merge_heads(heads_attention(qh, t[0], t[1], {}, p, training));
}

torch::Tensor additive_key_mask(const torch::Tensor& mask, torch::ScalarType dtype) {
  return mask.eq(0).to(dtype).mul_(kMaskedScore).view({mask.size(0), 1, 1, mask.size(1)});
}

// N(0, std^2) truncated to [-2 std, 2 std] (BERT/ViT's trunc_normal_(std=.02)) by rejection:
// redraw the ~4.6% of draws outside the interval until none is left. Rejection rather than timm's
// inverse CDF because erfinv is scalar code in libtorch, ~5x slower than normal_ on 200M weights.
void trunc_normal_(torch::Tensor t, double std, at::Generator& gen) {
  auto flat = t.view(-1);
  flat.normal_(0.0, std, gen);
  for (;;) {
    const auto out = flat.abs().gt(2.0 * std).nonzero().squeeze(1);
    if (out.numel() == 0) break;
    flat.index_put_({out}, torch::empty({out.numel()}, t.options()).normal_(0.0, std, gen));
  }
}

int blas_int(int64_t v) { return fnvlp::blas_int(v, "dense"); }

// y = x W^T + b over rows x [N, in] (contiguous). Forward as libtorch's addmm (b copied into every
// output row, then the GEMM with beta = 1: the same floats). Backward with g = dL/dy:
//   dx = g W,  dW = g^T x,  db = sum_rows g,
// dW and db added into bound .grad() buffers in place (beta = 1) where they exist.
struct DenseFn : public torch::autograd::Function<DenseFn> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& bias) {
    const int64_t N = x.size(0), in = x.size(1), out = weight.size(0);
    torch::Tensor y = torch::empty({N, out}, x.options());
    float* yp = y.data_ptr<float>();
    const float* bp = bias.data_ptr<float>();
    for (int64_t r = 0; r < N; ++r) std::copy(bp, bp + out, yp + r * out);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blas_int(N), blas_int(out), blas_int(in),
                1.0f, x.data_ptr<float>(), blas_int(in), weight.data_ptr<float>(), blas_int(in),
                1.0f, yp, blas_int(out));
    ctx->save_for_backward({x, weight, bias});
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &weight = saved[1];
    const torch::Tensor g = grads[0].contiguous();
    const int64_t N = x.size(0), in = x.size(1), out = weight.size(0);
    const float* gp = g.data_ptr<float>();
    torch::Tensor dx, dw, db;
    if (ctx->needs_input_grad(0)) {
      dx = torch::empty({N, in}, x.options());
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blas_int(N), blas_int(in),
                  blas_int(out), 1.0f, gp, blas_int(out), weight.data_ptr<float>(), blas_int(in),
                  0.0f, dx.data_ptr<float>(), blas_int(in));
    }
    if (ctx->needs_input_grad(1)) {
      torch::Tensor leaf = weight;
      torch::Tensor* acc = bound_grad(leaf, g);
      if (!acc) dw = torch::empty({out, in}, g.options());
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, blas_int(out), blas_int(in), blas_int(N),
                  1.0f, gp, blas_int(out), x.data_ptr<float>(), blas_int(in), acc ? 1.0f : 0.0f,
                  acc ? acc->data_ptr<float>() : dw.data_ptr<float>(), blas_int(in));
    }
    if (ctx->needs_input_grad(2)) {
      torch::Tensor leaf = saved[2];
      torch::Tensor* acc = bound_grad(leaf, g);
      if (!acc) db = torch::zeros({out}, g.options());
      add_column_sums(gp, N, out, acc ? acc->data_ptr<float>() : db.data_ptr<float>());
    }
    return {dx, dw, db};
  }
};

void check_tokens(const torch::Tensor& t, const char* what) {
  FNVLP_CHECK(t.defined() && t.dim() == 3, what << ": expected [B, N, width], got "
                                                << (t.defined() ? t.sizes() : at::IntArrayRef{}));
}

// fuse / fuse_at: text and image token batches of one batch size, a [B, L] mask for the text.
void check_fuse_inputs(const torch::Tensor& text_hidden, const torch::Tensor& mask,
                       const torch::Tensor& image_tokens) {
  check_tokens(text_hidden, "fuse: text_hidden");
  check_tokens(image_tokens, "fuse: image_tokens");
  FNVLP_CHECK(
      mask.dim() == 2 && mask.size(0) == text_hidden.size(0) &&
          mask.size(1) == text_hidden.size(1) && image_tokens.size(0) == text_hidden.size(0),
      "fuse: batch/length mismatch: text " << text_hidden.sizes() << ", mask " << mask.sizes()
                                           << ", image " << image_tokens.sizes());
}

}  // namespace

// ---------------------------------------------------------------------------------------------
torch::Tensor dense(const torch::Tensor& x, const torch::Tensor& weight,
                    const torch::Tensor& bias) {
  if (!torch::GradMode::is_enabled() || x.dim() < 1 || x.size(-1) != weight.size(1) ||
      !is_dense_cpu_float(x) || !is_dense_cpu_float(weight) || !is_dense_cpu_float(bias) ||
      !(weight.requires_grad() || bias.requires_grad()))
    return torch::linear(x, weight, bias);
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = weight.size(0);
  return DenseFn::apply(x.reshape({-1, x.size(-1)}), weight, bias).view(shape);
}

DenseImpl::DenseImpl(int64_t in, int64_t out) {
  weight = register_parameter("weight", torch::empty({out, in}));
  bias = register_parameter("bias", torch::empty({out}));
}

VitBlockImpl::VitBlockImpl(int64_t width, int64_t heads, int64_t mlp_ratio) : heads_(heads) {
  norm1_ = register_module("norm1", layer_norm(width, kVitLnEps));
  qkv_ = register_module("qkv", Dense(width, 3 * width));  // timm: qkv_bias=True in ALBEF
  proj_ = register_module("proj", Dense(width, width));
  norm2_ = register_module("norm2", layer_norm(width, kVitLnEps));
  fc1_ = register_module("fc1", Dense(width, mlp_ratio * width));
  fc2_ = register_module("fc2", Dense(mlp_ratio * width, width));
}

torch::Tensor VitBlockImpl::forward(const torch::Tensor& x) {
  const auto [h, y] = model::add_and_layer_norm(
      x, proj_(self_attention(qkv_(model::layer_norm(x, norm1_)), {}, heads_, 0.0, false)), norm2_);
  return h + fc2_(model::gelu(fc1_(y)));
}

torch::Tensor patch_embedding(const torch::Tensor& images, const torch::Tensor& weight,
                              const torch::Tensor& bias) {
  const int64_t B = images.size(0), C = weight.size(0), p = weight.size(2);
  FNVLP_CHECK(images.dim() == 4 && weight.dim() == 4 && weight.size(1) == images.size(1) &&
                  weight.size(3) == p && images.size(2) % p == 0 && images.size(3) % p == 0,
              "patch_embedding: images " << images.sizes() << ", kernel " << weight.sizes());
  const int64_t c = images.size(1), gy = images.size(2) / p, gx = images.size(3) / p;
  const auto patches = images.reshape({B, c, gy, p, gx, p})
                           .permute({0, 2, 4, 1, 3, 5})
                           .reshape({B, gy * gx, c * p * p});
  return torch::linear(patches, weight.reshape({C, c * p * p}), bias);
}

VisionTransformerImpl::VisionTransformerImpl(const ModelConfig& cfg) : image_size_(cfg.image_size) {
  const int64_t w = cfg.vision_width;
  patch_embed_ = register_module(
      "patch_embed",
      torch::nn::Conv2d(torch::nn::Conv2dOptions(3, w, cfg.patch_size).stride(cfg.patch_size)));
  cls_token_ = register_parameter("cls_token", torch::zeros({1, 1, w}));
  pos_embed_ = register_parameter("pos_embed", torch::zeros({1, 1 + cfg.num_patches(), w}));
  blocks_list_ = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg.vision_layers; ++i) {
    blocks_.emplace_back(w, cfg.vision_heads, cfg.mlp_ratio);
    blocks_list_->push_back(blocks_.back());
  }
  norm_ = register_module("norm", layer_norm(w, kVitLnEps));
}

torch::Tensor VisionTransformerImpl::forward(const torch::Tensor& images) {
  FNVLP_CHECK(images.dim() == 4 && images.size(1) == 3 && images.size(2) == image_size_ &&
                  images.size(3) == image_size_,
              "encode_image: expected float [B, 3, " << image_size_ << ", " << image_size_
                                                     << "], got " << images.sizes());
  FNVLP_CHECK(
      images.is_floating_point(),
      "encode_image: images must be float (see normalize_images), got " << images.scalar_type());
  const int64_t B = images.size(0);
  auto x = patch_embedding(images, patch_embed_->weight, patch_embed_->bias);  // [B, P, w]
  x = torch::cat({cls_token_.expand({B, -1, -1}), x}, 1) + pos_embed_;
  for (auto& block : blocks_) x = block(x);
  return model::layer_norm(x, norm_);
}

// ---------------------------------------------------------------------------------------------
BertEmbeddingsImpl::BertEmbeddingsImpl(const ModelConfig& cfg) : dropout_(cfg.dropout) {
  word_ = register_parameter("word_embeddings", torch::empty({cfg.vocab_size, cfg.text_width}));
  position_ =
      register_parameter("position_embeddings", torch::empty({cfg.max_len, cfg.text_width}));
  token_type_ = register_parameter("token_type_embeddings", torch::empty({2, cfg.text_width}));
  norm_ = register_module("LayerNorm", layer_norm(cfg.text_width, kBertLnEps));
}

torch::Tensor BertEmbeddingsImpl::forward(const torch::Tensor& ids) {
  const int64_t L = ids.size(1);
  // Position and type rows broadcast over the batch: [L, w] + [w].
  // A batch touches a few hundred of the vocabulary's rows, yet the dense backward of an embedding
  // zero-fills a whole [vocab, w] gradient and adds it to the weight's (15.6 MB per text pass at
  // 30522 x 128, twice per step for ALBEF's two text passes). Once the weight has a dense gradient
  // to add into (the trainer's flat buffer), a sparse one is added row by row instead; the sum is
  // the same up to float rounding. Without one, the dense backward keeps optimizers that refuse
  // sparse gradients working. CPU only: on a GPU adding a sparse gradient may coalesce it, whose
  // size the host reads back (a wait per step, and what a CUDA graph cannot capture).
  const bool sparse =
      word_.is_cpu() && word_.grad().defined() && word_.grad().layout() == torch::kStrided;
  auto x = torch::embedding(word_, ids, /*padding_idx=*/-1, /*scale_grad_by_freq=*/false, sparse) +
           (position_.narrow(0, 0, L) + token_type_[0]);
  return maybe_dropout(model::layer_norm(x, norm_), dropout_, is_training());
}

// ---------------------------------------------------------------------------------------------
BertLayerImpl::BertLayerImpl(int64_t width, int64_t heads, int64_t mlp_ratio, double dropout,
                             int64_t cross_width)
    : heads_(heads), dropout_(dropout) {
  // BERT's separate query/key/value Linears fused into one [3w, w] projection: one GEMM.
  qkv_ = register_module("self_qkv", Dense(width, 3 * width));
  attn_out_ = register_module("self_output", Dense(width, width));
  attn_norm_ = register_module("self_norm", layer_norm(width, kBertLnEps));
  if (cross_width > 0) {
    // xbert's crossattention: key/value Linear(encoder_width, width) map image tokens to text
    // width.
    cross_q_ = register_module("cross_q", Dense(width, width));
    cross_kv_ = register_module("cross_kv", Dense(cross_width, 2 * width));
    cross_out_ = register_module("cross_output", Dense(width, width));
    cross_norm_ = register_module("cross_norm", layer_norm(width, kBertLnEps));
  }
  fc1_ = register_module("intermediate", Dense(width, mlp_ratio * width));
  fc2_ = register_module("output", Dense(mlp_ratio * width, width));
  out_norm_ = register_module("output_norm", layer_norm(width, kBertLnEps));
}

torch::Tensor BertLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& additive_mask,
                                     const torch::Tensor& image_tokens) {
  FNVLP_CHECK(!has_cross_attention() || image_tokens.defined(),
              "fusion layer called without image tokens");
  return forward_pairs(x, additive_mask,
                       has_cross_attention() ? image_keys(image_tokens) : torch::Tensor(), {});
}

torch::Tensor BertLayerImpl::image_keys(const torch::Tensor& image_tokens) {
  FNVLP_CHECK(has_cross_attention(), "image_keys: not a fusion layer");
  return cross_kv_(image_tokens);
}

torch::Tensor BertLayerImpl::forward_pairs(const torch::Tensor& x,
                                           const torch::Tensor& additive_mask,
                                           const torch::Tensor& image_kv,
                                           const FusionPairs& pairs) {
  const bool train = is_training();
  torch::Tensor xs = x, m = additive_mask;
  FusionPairs p = pairs;
  if (p.text_index.defined() && dropout_ > 0.0 && train) {
    // Each pair draws its own dropout masks, as when the texts were gathered before the layer.
    xs = x.index_select(0, p.text_index);
    if (m.defined()) m = m.index_select(0, p.text_index);
    p.text_index = torch::Tensor();
  }
  auto ctx = self_attention(qkv_(xs), m, heads_, dropout_, train);
  auto h = model::add_layer_norm(xs, maybe_dropout(attn_out_(ctx), dropout_, train), attn_norm_);
  if (p.text_index.defined()) h = h.index_select(0, p.text_index);
  if (has_cross_attention()) {
    FNVLP_CHECK(image_kv.defined(), "fusion layer called without image tokens");
    // Image tokens have no padding: no key mask.
    ctx = cross_attention(cross_q_(h), image_kv, p.image_index, heads_, dropout_, train);
    h = model::add_layer_norm(h, maybe_dropout(cross_out_(ctx), dropout_, train), cross_norm_);
  }
  return model::add_layer_norm(h, maybe_dropout(fc2_(model::gelu(fc1_(h))), dropout_, train),
                               out_norm_);
}

QuerySlots QuerySlots::of(const torch::Tensor& positions, int64_t B, int64_t L,
                          const torch::Device& device) {
  FNVLP_CHECK(positions.dim() == 1, "fuse_at: positions must be [M], got " << positions.sizes());
  const torch::Tensor pos = positions.to(torch::kCPU, torch::kLong).contiguous();
  const int64_t M = pos.size(0);
  const int64_t* p = pos.data_ptr<int64_t>();
  std::vector<int64_t> count(static_cast<size_t>(B), 0), j(static_cast<size_t>(M));
  for (int64_t i = 0; i < M; ++i) {
    FNVLP_CHECK(p[i] >= 0 && p[i] < B * L,
                "fuse_at: position " << p[i] << " outside [0, " << B * L << ")");
    j[static_cast<size_t>(i)] = count[static_cast<size_t>(p[i] / L)]++;
  }
  QuerySlots q;
  q.per_row = M == 0 ? 0 : *std::max_element(count.begin(), count.end());
  torch::Tensor slots = torch::empty({M}, torch::kLong);
  int64_t* sl = slots.data_ptr<int64_t>();
  q.dense = M == B * q.per_row;
  for (int64_t i = 0; i < M; ++i) {
    sl[i] = (p[i] / L) * q.per_row + j[static_cast<size_t>(i)];
    q.dense = q.dense && sl[i] == i;
  }
  q.rows = to_device_async(pos, device);
  q.slots = to_device_async(slots, device);
  return q;
}

namespace {

// The M query rows [M, W] of `qs` as a [B, per_row, W] block for the attention kernels, and back.
torch::Tensor to_block(const QuerySlots& qs, int64_t B, const torch::Tensor& t) {
  const int64_t W = t.size(1);
  if (qs.dense) return t.view({B, qs.per_row, W});
  return torch::zeros({B * qs.per_row, W}, t.options())
      .index_copy(0, qs.slots, t)
      .view({B, qs.per_row, W});
}

torch::Tensor from_block(const QuerySlots& qs, const torch::Tensor& t) {
  const auto flat = t.reshape({-1, t.size(2)});
  return qs.dense ? flat : flat.index_select(0, qs.slots);
}

}  // namespace

torch::Tensor BertLayerImpl::self_block_at(const torch::Tensor& x,
                                           const torch::Tensor& additive_mask,
                                           const QuerySlots& qs) {
  const int64_t B = x.size(0), W = x.size(2);
  const auto xq = x.reshape({-1, W}).index_select(0, qs.rows);  // [M, W]
  // Queries of the M rows, keys and values of all L (the fused projection's q | k | v blocks, so
  // the weights are the ones forward() uses).
  const auto q = torch::linear(xq, qkv_->weight.narrow(0, 0, W), qkv_->bias.narrow(0, 0, W));
  const auto kv =
      torch::linear(x, qkv_->weight.narrow(0, W, 2 * W), qkv_->bias.narrow(0, W, 2 * W));
  const auto ctx =
      from_block(qs, fused_cross_attention(to_block(qs, B, q), kv, heads_, additive_mask));
  return model::add_layer_norm(xq, attn_out_(ctx), attn_norm_);
}

torch::Tensor BertLayerImpl::forward_at(const torch::Tensor& x, const torch::Tensor& additive_mask,
                                        const torch::Tensor& image_kv, const FusionPairs& pairs,
                                        const QuerySlots& qs) {
  const int64_t L = x.size(1);
  const int64_t P = pairs.text_index.defined() ? pairs.text_index.size(0) : x.size(0);
  torch::Tensor h;  // the self-attention sublayer at the M query rows, [M, W]
  if (!pairs.text_index.defined()) {
    h = self_block_at(x, additive_mask, qs);
  } else {
    // Pair position p * L + l reads text position text_index[p] * L + l: run the sublayer once
    // per distinct one (ITM's positive and negative-image pairs share their text's [CLS]).
    const auto rows = qs.rows.to(torch::kCPU);
    const auto text_pos =
        pairs.text_index.to(torch::kCPU, torch::kLong).index_select(0, rows.div(L, "floor")) * L +
        rows.remainder(L);
    const auto [distinct, inverse] =
        at::_unique(text_pos, /*sorted=*/true, /*return_inverse=*/true);
    h = self_block_at(x, additive_mask, QuerySlots::of(distinct, x.size(0), L, x.device()))
            .index_select(0, to_device_async(inverse, x.device()));
  }
  if (has_cross_attention()) {
    FNVLP_CHECK(image_kv.defined(), "fusion layer called without image tokens");
    const auto ctx = from_block(qs, fused_cross_attention(to_block(qs, P, cross_q_(h)), image_kv,
                                                          heads_, {}, pairs.image_index));
    h = model::add_layer_norm(h, cross_out_(ctx), cross_norm_);
  }
  return model::add_layer_norm(h, fc2_(model::gelu(fc1_(h))), out_norm_);
}

// ---------------------------------------------------------------------------------------------
AlbefImpl::AlbefImpl(const ModelConfig& cfg, uint64_t seed) : cfg_(cfg) {
  cfg_.validate();
  visual_ = register_module("visual_encoder", VisionTransformer(cfg_));
  embeddings_ = register_module("text_embeddings", BertEmbeddings(cfg_));
  text_list_ = register_module("text_layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg_.text_layers; ++i) {
    text_layers_.emplace_back(cfg_.text_width, cfg_.text_heads, cfg_.mlp_ratio, cfg_.dropout, 0);
    text_list_->push_back(text_layers_.back());
  }
  fusion_list_ = register_module("fusion_layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg_.fusion_layers; ++i) {
    fusion_layers_.emplace_back(cfg_.text_width, cfg_.text_heads, cfg_.mlp_ratio, cfg_.dropout,
                                cfg_.vision_width);
    fusion_list_->push_back(fusion_layers_.back());
  }
  vision_proj_ = register_module("vision_proj", Dense(cfg_.vision_width, cfg_.embed_dim));
  text_proj_ = register_module("text_proj", Dense(cfg_.text_width, cfg_.embed_dim));
  itm_head_ = register_module("itm_head", Dense(cfg_.text_width, 2));
  // BertOnlyMLMHead: transform (dense, GELU, LayerNorm), then the decoder, whose weight is the
  // word-embedding matrix (not registered again) and whose bias is its own parameter.
  mlm_dense_ = register_module("mlm_dense", Dense(cfg_.text_width, cfg_.text_width));
  mlm_norm_ = register_module("mlm_norm", layer_norm(cfg_.text_width, kBertLnEps));
  mlm_bias_ = register_parameter("mlm_bias", torch::zeros({cfg_.vocab_size}));
  temp_ = register_parameter("temp", torch::full({}, cfg_.temp));
  init_weights(seed);
}

void AlbefImpl::init_weights(uint64_t seed) {
  torch::NoGradGuard no_grad;
  // Own generator: the weights depend on `seed` only, not on what used the global RNG before.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  constexpr double kStd = 0.02;  // BERT initializer_range; timm's ViT trunc_normal_(std=.02)
  for (const auto& m : modules(/*include_self=*/false)) {
    if (auto* l = m->as<DenseImpl>()) {
      trunc_normal_(l->weight, kStd, gen);
      l->bias.zero_();
    } else if (auto* e = m->as<BertEmbeddingsImpl>()) {
      for (auto& p : e->parameters(/*recurse=*/false)) trunc_normal_(p, kStd, gen);
    } else if (auto* n = m->as<torch::nn::LayerNormImpl>()) {
      n->weight.fill_(1.0);
      n->bias.zero_();
    } else if (auto* c = m->as<torch::nn::Conv2dImpl>()) {
      // PyTorch's Conv2d default (kaiming_uniform_ with a = sqrt(5)): U(±1/sqrt(fan_in)).
      const double bound = 1.0 / std::sqrt(static_cast<double>(c->weight[0].numel()));
      c->weight.uniform_(-bound, bound, gen);
      c->bias.uniform_(-bound, bound, gen);
    }
  }
  trunc_normal_(visual_->cls_token(), kStd, gen);
  trunc_normal_(visual_->pos_embed(), kStd, gen);
  mlm_bias_.zero_();
  temp_.fill_(cfg_.temp);
}

torch::Tensor AlbefImpl::encode_image(const torch::Tensor& images) { return visual_(images); }

torch::Tensor AlbefImpl::encode_text(const torch::Tensor& ids, const torch::Tensor& mask) {
  FNVLP_CHECK(
      ids.dim() == 2 && mask.sizes() == ids.sizes(),
      "encode_text: expected ids and mask [B, L], got " << ids.sizes() << " and " << mask.sizes());
  FNVLP_CHECK(ids.size(1) <= cfg_.max_len,
              "encode_text: length " << ids.size(1) << " exceeds max_len " << cfg_.max_len);
  FNVLP_CHECK(ids.scalar_type() == torch::kLong || ids.scalar_type() == torch::kInt,
              "encode_text: ids must be int64 or int32, got " << ids.scalar_type());
  auto x = embeddings_(ids.to(torch::kLong));
  const auto m = additive_key_mask(mask, x.scalar_type());
  for (auto& layer : text_layers_) x = layer(x, m);
  return x;
}

torch::Tensor AlbefImpl::fuse(const torch::Tensor& text_hidden, const torch::Tensor& mask,
                              const torch::Tensor& image_tokens) {
  check_fuse_inputs(text_hidden, mask, image_tokens);
  auto x = text_hidden;
  const auto m = additive_key_mask(mask, x.scalar_type());
  for (auto& layer : fusion_layers_) x = layer(x, m, image_tokens);
  return x;
}

torch::Tensor AlbefImpl::fuse_at(const torch::Tensor& text_hidden, const torch::Tensor& mask,
                                 const torch::Tensor& image_tokens,
                                 const torch::Tensor& positions) {
  check_fuse_inputs(text_hidden, mask, image_tokens);
  return fuse_at(text_hidden, mask, image_keys(image_tokens), {}, positions);
}

torch::Tensor AlbefImpl::fuse_cls(const torch::Tensor& text_hidden, const torch::Tensor& mask,
                                  const torch::Tensor& image_tokens) {
  check_tokens(text_hidden, "fuse_cls: text_hidden");
  const int64_t B = text_hidden.size(0), L = text_hidden.size(1);
  return fuse_at(
      text_hidden, mask, image_tokens,
      torch::arange(0, B * L, L, torch::dtype(torch::kLong).device(text_hidden.device())));
}

std::vector<torch::Tensor> AlbefImpl::image_keys(const torch::Tensor& image_tokens) {
  check_tokens(image_tokens, "image_keys: image_tokens");
  std::vector<torch::Tensor> keys;
  for (auto& layer : fusion_layers_) keys.push_back(layer->image_keys(image_tokens));
  return keys;
}

torch::Tensor AlbefImpl::fuse_at(const torch::Tensor& text_hidden, const torch::Tensor& mask,
                                 const std::vector<torch::Tensor>& keys, const FusionPairs& pairs,
                                 const torch::Tensor& positions) {
  check_tokens(text_hidden, "fuse_at: text_hidden");
  const int64_t Bt = text_hidden.size(0), L = text_hidden.size(1), W = text_hidden.size(2);
  FNVLP_CHECK(mask.dim() == 2 && mask.size(0) == Bt && mask.size(1) == L,
              "fuse_at: mask " << mask.sizes() << " for text " << text_hidden.sizes());
  FNVLP_CHECK(keys.size() == fusion_layers_.size(), "fuse_at: " << keys.size() << " image keys for "
                                                                << fusion_layers_.size()
                                                                << " fusion layers");
  const int64_t Bi = keys.empty() ? Bt : keys[0].size(0);
  // The indices may come on the host (the eager trainer builds them there: no read back from a
  // GPU) or on the model's device (the static step draws them there, within range by
  // construction): only host indices are checked, a check of device ones would wait for the GPU.
  auto check_index = [](const torch::Tensor& index, int64_t rows, const char* what) {
    if (!index.defined() || !index.device().is_cpu()) return;
    const torch::Tensor& h = index;
    FNVLP_CHECK(h.dim() == 1 && (h.numel() == 0 ||
                                 (h.min().item<int64_t>() >= 0 && h.max().item<int64_t>() < rows)),
                "fuse_at: " << what << " must be [P] in [0, " << rows << ")");
  };
  check_index(pairs.text_index, Bt, "text_index");
  check_index(pairs.image_index, Bi, "image_index");
  const int64_t P = pairs.text_index.defined()    ? pairs.text_index.size(0)
                    : pairs.image_index.defined() ? pairs.image_index.size(0)
                                                  : Bt;
  FNVLP_CHECK((pairs.text_index.defined() || P == Bt) &&
                  (pairs.image_index.defined() ? pairs.image_index.size(0) == P : Bi == P),
              "fuse_at: " << P << " pairs of " << Bt << " texts and " << Bi << " images");
  const bool fused_path = !fusion_layers_.empty() && fused_attention_applies(text_hidden) &&
                          fused_attention_applies(keys[0]) &&
                          !(cfg_.dropout > 0.0 && is_training());
  const auto m = additive_key_mask(mask, text_hidden.scalar_type());
  const torch::Device dev = text_hidden.device();
  const FusionPairs on_dev{to_device_async(pairs.text_index, dev),
                           to_device_async(pairs.image_index, dev)};
  if (!fused_path) {
    // The full pass over the pairs, read at the positions (the gathered keys and values are the
    // projections of the gathered images: still exact).
    auto x = text_hidden;
    FusionPairs p = on_dev;
    auto pm = m;
    for (size_t i = 0; i < fusion_layers_.size(); ++i) {
      x = fusion_layers_[i]->forward_pairs(x, pm, keys[i], p);
      if (p.text_index.defined()) pm = pm.index_select(0, p.text_index);
      p.text_index = torch::Tensor();
    }
    if (p.text_index.defined()) x = x.index_select(0, p.text_index);  // no fusion layer ran
    return x.reshape({-1, W}).index_select(0, to_device_async(positions.to(torch::kLong), dev));
  }
  const QuerySlots qs = QuerySlots::of(positions, P, L, dev);
  if (qs.rows.numel() == 0) return text_hidden.reshape({-1, W}).index_select(0, qs.rows);
  auto x = text_hidden;
  auto pm = m;
  FusionPairs p = on_dev;
  const size_t last = fusion_layers_.size() - 1;
  for (size_t i = 0; i < last; ++i) {
    x = fusion_layers_[i]->forward_pairs(x, pm, keys[i], p);
    if (p.text_index.defined()) pm = pm.index_select(0, p.text_index);
    p.text_index = torch::Tensor();  // from the second layer on, x holds one row per pair
  }
  return fusion_layers_[last]->forward_at(x, pm, keys[last], p, qs);
}

torch::Tensor AlbefImpl::fuse_cls(const torch::Tensor& text_hidden, const torch::Tensor& mask,
                                  const std::vector<torch::Tensor>& keys,
                                  const FusionPairs& pairs) {
  check_tokens(text_hidden, "fuse_cls: text_hidden");
  const int64_t L = text_hidden.size(1);
  const int64_t P = pairs.text_index.defined()    ? pairs.text_index.size(0)
                    : pairs.image_index.defined() ? pairs.image_index.size(0)
                                                  : text_hidden.size(0);
  return fuse_at(
      text_hidden, mask, keys, pairs,
      torch::arange(0, P * L, L, torch::dtype(torch::kLong).device(text_hidden.device())));
}

torch::Tensor AlbefImpl::image_embed(const torch::Tensor& image_tokens) {
  check_tokens(image_tokens, "image_embed");
  // ALBEF: F.normalize(vision_proj(image_embeds[:, 0, :]), dim=-1)
  return torch::nn::functional::normalize(vision_proj_(image_tokens.select(1, 0)),
                                          torch::nn::functional::NormalizeFuncOptions().dim(-1));
}

torch::Tensor AlbefImpl::text_embed(const torch::Tensor& text_hidden) {
  check_tokens(text_hidden, "text_embed");
  return torch::nn::functional::normalize(text_proj_(text_hidden.select(1, 0)),
                                          torch::nn::functional::NormalizeFuncOptions().dim(-1));
}

torch::Tensor AlbefImpl::project_image_tokens(const torch::Tensor& tokens) {
  return torch::nn::functional::normalize(vision_proj_(tokens),
                                          torch::nn::functional::NormalizeFuncOptions().dim(-1));
}

torch::Tensor AlbefImpl::project_text_tokens(const torch::Tensor& tokens) {
  return torch::nn::functional::normalize(text_proj_(tokens),
                                          torch::nn::functional::NormalizeFuncOptions().dim(-1));
}

torch::Tensor AlbefImpl::itm_logits(const torch::Tensor& fused) {
  FNVLP_CHECK(fused.defined() && (fused.dim() == 3 || fused.dim() == 2) &&
                  fused.size(-1) == cfg_.text_width,
              "itm_logits: expected [B, L, "
                  << cfg_.text_width << "] or [B, " << cfg_.text_width << "], got "
                  << (fused.defined() ? fused.sizes() : at::IntArrayRef{}));
  return itm_head_(fused.dim() == 3 ? fused.select(1, 0) : fused);
}

torch::Tensor AlbefImpl::mlm_hidden(const torch::Tensor& masked_hidden) {
  FNVLP_CHECK(masked_hidden.dim() >= 1 && masked_hidden.size(-1) == cfg_.text_width,
              "MLM head: expected [..., " << cfg_.text_width << "], got " << masked_hidden.sizes());
  return model::layer_norm(model::gelu(mlm_dense_(masked_hidden)), mlm_norm_);
}

torch::Tensor AlbefImpl::mlm_logits(const torch::Tensor& masked_hidden) {
  // The tied decoder is a Dense over E: in training its [V, w] weight gradient dE = g^T h (15.6 MB
  // at BERT's vocabulary and w = 128) goes straight into E's bound gradient buffer.
  return dense(mlm_hidden(masked_hidden), mlm_decoder_weight(), mlm_bias_);
}

const torch::Tensor& AlbefImpl::mlm_decoder_weight() const {
  return embeddings_->word_embeddings();
}

torch::Tensor AlbefImpl::temp() {
  // ALBEF: `with torch.no_grad(): self.temp.clamp_(0.001, 0.5)` before each use. Clamping .data()
  // changes no value inside the range and does not bump the autograd version counter, so calling
  // temp() again after a loss already used it does not invalidate that loss's graph.
  temp_.data().clamp_(cfg_.temp_min, cfg_.temp_max);
  return temp_;
}

int64_t AlbefImpl::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

// ---------------------------------------------------------------------------------------------
torch::Tensor normalize_images(const torch::Tensor& uint8_bhwc) {
  FNVLP_CHECK(
      uint8_bhwc.dim() == 4 && uint8_bhwc.size(3) == 3 && uint8_bhwc.scalar_type() == torch::kUInt8,
      "normalize_images: expected uint8 [B, H, W, 3], got " << uint8_bhwc.scalar_type() << " "
                                                            << uint8_bhwc.sizes());
  // (p/255 - mean) / std = p * (1 / (255 std)) - mean / std, per channel (last axis here).
  const double mean[3] = {0.48145466, 0.4578275, 0.40821073};
  const double stdev[3] = {0.26862954, 0.26130258, 0.27577711};
  const auto opts = torch::TensorOptions().dtype(torch::kFloat).device(uint8_bhwc.device());
  std::vector<float> scale(3), shift(3);
  for (int c = 0; c < 3; ++c) {
    scale[c] = static_cast<float>(1.0 / (255.0 * stdev[c]));
    shift[c] = static_cast<float>(-mean[c] / stdev[c]);
  }
  auto x = torch::addcmul(torch::tensor(shift, opts), uint8_bhwc.to(torch::kFloat),
                          torch::tensor(scale, opts));
  return x.permute({0, 3, 1, 2}).contiguous();
}

}  // namespace fnvlp::model
