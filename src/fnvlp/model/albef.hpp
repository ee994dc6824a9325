#pragma once
// ALBEF-style vision-language model (Li et al., "Align before Fuse: Vision and Language
// Representation Learning with Momentum Distillation", NeurIPS 2021; code: salesforce/ALBEF):
//
//   image  -> ViT (pre-norm)            -> image tokens [B, 1+P, Dv]  --vision_proj--> ITC
//   embedding text   -> BERT text layers          -> text hidden  [B, L, Dt]    --text_proj---->
//   ITC embedding (text hidden, image tokens) -> BERT fusion layers with cross-attention -> fused
//   [B, L, Dt] fused[:, 0] -> ITM head (2 classes); fused at masked positions -> MLM head tied to
//   embeddings
//
// The losses (loss/) and the momentum model (a second Albef) are built on these entry points; the
// model itself computes no loss. Attention uses one fused QKV projection; on CPU float32 the
// fused kernels of model/attention.hpp, elsewhere batched matmuls over all heads. ITM and MLM read
// the fusion output at a few rows only ([CLS]; masked positions), so fuse_cls / fuse_at run the
// last fusion layer for those rows alone.
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "fnvlp/model/model_config.hpp"

namespace fnvlp::model {

// torch::linear(x, weight, bias) for x [..., in], weight [out, in], bias [out]. On CPU float32 in
// training, one autograd node whose backward adds the weight and bias gradients straight into
// their .grad() buffers where those exist (kernels/grad_accumulation.hpp): no [out, in] gradient is
// allocated and then added there by autograd, and no transposed views or separate bias reduction
// op run per layer (44 Dense calls per tiny-preset step).
torch::Tensor dense(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

// y = x W^T + b, W [out, in]: torch::nn::Linear without its constructor-time initialisation, which
// AlbefImpl::init_weights would overwrite anyway (a second pass over ~200M weights for `base`).
class DenseImpl : public torch::nn::Module {
 public:
  DenseImpl(int64_t in, int64_t out);
  torch::Tensor forward(const torch::Tensor& x) { return dense(x, weight, bias); }
  torch::Tensor weight, bias;
};
TORCH_MODULE(Dense);

// One pre-norm ViT block (ALBEF models/vit.py Block):
//   x = x + Proj(MHA(LN1(x)));  x = x + FC2(GELU(FC1(LN2(x))))
class VitBlockImpl : public torch::nn::Module {
 public:
  VitBlockImpl(int64_t width, int64_t heads, int64_t mlp_ratio);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  int64_t heads_;
  torch::nn::LayerNorm norm1_{nullptr}, norm2_{nullptr};
  Dense qkv_{nullptr}, proj_{nullptr}, fc1_{nullptr}, fc2_{nullptr};
};
TORCH_MODULE(VitBlock);

// conv2d(images, weight, bias, stride = p) for weight [C, 3, p, p], flattened to [B, P, C] with
// the patches row-major: the ViT's patch embedding, computed as the GEMM it is (each patch
// flattened in the kernel's (channel, y, x) order times the kernel as a [C, 3 p^2] matrix).
// libtorch 1.13 sends the convolution to oneDNN, whose forward and backward took 2.8x the time of
// this at the tiny ViT's shape (4.3 against 1.5 ms per batch of 32). H and W multiples of p.
torch::Tensor patch_embedding(const torch::Tensor& images, const torch::Tensor& weight,
                              const torch::Tensor& bias);

// ViT: Conv2d patch embedding (kernel = stride = patch), [CLS] + learned positions, pre-norm
// blocks, final LayerNorm. Output [B, 1 + P, width] with [CLS] first.
class VisionTransformerImpl : public torch::nn::Module {
 public:
  explicit VisionTransformerImpl(const ModelConfig& cfg);
  torch::Tensor forward(const torch::Tensor& images);
  torch::Tensor& cls_token() { return cls_token_; }
  torch::Tensor& pos_embed() { return pos_embed_; }

 private:
  int64_t image_size_;
  torch::nn::Conv2d patch_embed_{nullptr};  // its parameters, applied by patch_embedding()
  torch::Tensor cls_token_, pos_embed_;
  torch::nn::ModuleList blocks_list_;
  std::vector<VitBlock> blocks_;
  torch::nn::LayerNorm norm_{nullptr};
};
TORCH_MODULE(VisionTransformer);

// BERT embeddings: LN(word[id] + position[i] + token_type[0]), then dropout. ALBEF never passes
// token types, so every token uses type 0 (kept for BERT checkpoint compatibility).
class BertEmbeddingsImpl : public torch::nn::Module {
 public:
  explicit BertEmbeddingsImpl(const ModelConfig& cfg);
  torch::Tensor forward(const torch::Tensor& ids);
  const torch::Tensor& word_embeddings() const { return word_; }

 private:
  double dropout_;
  torch::Tensor word_, position_, token_type_;  // [vocab, w], [max_len, w], [2, w]
  torch::nn::LayerNorm norm_{nullptr};
};
TORCH_MODULE(BertEmbeddings);

// Where M selected positions of a [B, L] text sit: `rows` [M] are their flat indices b * L + l
// (the caller's order, which the output keeps), `slots` [M] their places b * per_row + j in a
// [B, per_row] query block padded to the row with the most positions. `dense` when that block has
// no padding and follows the caller's order (slots = 0..M-1), as for one [CLS] per row.
struct QuerySlots {
  torch::Tensor rows, slots;
  int64_t per_row = 0;
  bool dense = false;
  // positions: int64 [M] flat indices into [B, L], each row at most once per position.
  // rows and slots are placed on `device` (positions are read on the host).
  static QuerySlots of(const torch::Tensor& positions, int64_t B, int64_t L,
                       const torch::Device& device);
};

// Text-image pairs for the fusion encoder: pair p fuses text row text_index[p] with image row
// image_index[p] (int64 [P]); an undefined index is the identity (pair p is row p). ITM fuses each
// text with its own image and with a hard negative image, and each image with a negative text:
// passing the distinct texts and images once, with these indices, lets the fusion compute what
// depends on one side alone (a text's self-attention in the first fusion layer, an image's
// cross-attention keys and values in every layer) once per distinct row instead of once per pair.
// Pass only the texts and images in use: those computations cost in proportion to their rows.
struct FusionPairs {
  torch::Tensor text_index, image_index;
};

// One BERT post-norm layer (ALBEF models/xbert.py BertLayer). With cross_width > 0 it is a fusion
// layer and adds cross-attention between self-attention and the FFN:
//   a = LN1(x + Drop(O1 MHA(x, x; text mask)))
//   c = LNc(a + Drop(Oc MHA(a, image)))          fusion layers only; K/V project Dv -> Dt
//   y = LN2(c + Drop(FC2(GELU(FC1(c)))))
class BertLayerImpl : public torch::nn::Module {
 public:
  BertLayerImpl(int64_t width, int64_t heads, int64_t mlp_ratio, double dropout,
                int64_t cross_width);
  // additive_mask: [B,1,1,L] (0 for tokens, large negative for padding) or undefined.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& additive_mask,
                        const torch::Tensor& image_tokens = {});
  // Fusion layers: the cross-attention keys and values of image tokens [B, N, 2 * width], a
  // per-row projection, so that one image's serve every pair it is in.
  torch::Tensor image_keys(const torch::Tensor& image_tokens);
  // forward over pairs: x [Bt, L, width] texts with additive_mask over its rows, image_kv from
  // image_keys, -> [P, L, width]. Without dropout in training the self-attention sublayer runs
  // once per text row and is then gathered for its pairs (it reads no image).
  torch::Tensor forward_pairs(const torch::Tensor& x, const torch::Tensor& additive_mask,
                              const torch::Tensor& image_kv, const FusionPairs& pairs);
  // forward_pairs' output at a subset of the pairs' positions only, [M, width] (QuerySlots over
  // [P, L]): keys and values still come from every position of x, but the query projection, the
  // attention rows, both output projections, the cross-attention and the FFN run for M rows (and
  // the self-attention sublayer once per distinct text position among them). Fused CPU attention
  // only, no dropout in training (AlbefImpl::fuse_at checks).
  torch::Tensor forward_at(const torch::Tensor& x, const torch::Tensor& additive_mask,
                           const torch::Tensor& image_kv, const FusionPairs& pairs,
                           const QuerySlots& q);
  bool has_cross_attention() const { return !cross_q_.is_empty(); }

 private:
  // LN1(x + O1 MHA(x, x; mask)) at the rows of q only, [M, width].
  torch::Tensor self_block_at(const torch::Tensor& x, const torch::Tensor& additive_mask,
                              const QuerySlots& q);

  int64_t heads_;
  double dropout_;
  Dense qkv_{nullptr}, attn_out_{nullptr};
  torch::nn::LayerNorm attn_norm_{nullptr};
  Dense cross_q_{nullptr}, cross_kv_{nullptr}, cross_out_{nullptr};
  torch::nn::LayerNorm cross_norm_{nullptr};
  Dense fc1_{nullptr}, fc2_{nullptr};
  torch::nn::LayerNorm out_norm_{nullptr};
};
TORCH_MODULE(BertLayer);

class AlbefImpl : public torch::nn::Module {
 public:
  // Weights are initialised from `seed` alone (own generator, global RNG state irrelevant):
  // Linear/Embedding/[CLS]/positions ~ N(0, 0.02^2) truncated at ±2σ, biases 0, LayerNorm (1, 0),
  // patch Conv2d as PyTorch's default (timm's PatchEmbed), temperature = cfg.temp.
  explicit AlbefImpl(const ModelConfig& cfg, uint64_t seed = 0);

  // images: float [B,3,H,W], already normalised -> image tokens [B, 1+P, vision_width].
  torch::Tensor encode_image(const torch::Tensor& images);
  // ids int64 (int32 accepted) [B,L], mask [B,L] (non-zero = token, any dtype) -> [B,L,text_width].
  torch::Tensor encode_text(const torch::Tensor& ids, const torch::Tensor& mask);
  // Fusion layers over text_hidden with cross-attention to image_tokens -> [B,L,text_width].
  torch::Tensor fuse(const torch::Tensor& text_hidden, const torch::Tensor& mask,
                     const torch::Tensor& image_tokens);
  // fuse(...) read at flat positions b * L + l only -> [M, text_width], as
  // fuse(...).reshape({-1, width}).index_select(0, positions) but the last fusion layer runs for
  // those M rows alone: nothing downstream reads its other rows (MLM reads the masked positions,
  // ITM the [CLS]). Exact up to float rounding; with dropout in training or off the fused CPU
  // kernels it is that gather of the full pass.
  torch::Tensor fuse_at(const torch::Tensor& text_hidden, const torch::Tensor& mask,
                        const torch::Tensor& image_tokens, const torch::Tensor& positions);
  // fuse(...)[:, 0] -> [B, text_width], computed as fuse_at at the [CLS] of every row.
  torch::Tensor fuse_cls(const torch::Tensor& text_hidden, const torch::Tensor& mask,
                         const torch::Tensor& image_tokens);
  // Per fusion layer, the cross-attention keys and values of image_tokens [B, N, vision_width]
  // (BertLayerImpl::image_keys): what every fusion with these images reads, computed once.
  std::vector<torch::Tensor> image_keys(const torch::Tensor& image_tokens);
  // The same over pairs: text_hidden [Bt, L, w] and mask [Bt, L] hold the distinct texts, keys
  // (image_keys) the distinct images, `pairs` which text meets which image. Equal up to float
  // rounding to fuse_at(text_hidden[text_index], mask[text_index], image_tokens[image_index],
  // positions) with positions flat into [P, L], without computing per pair what depends on one
  // side alone. ITM's positive and negative pairs and MLM share one image_keys. positions and
  // the pair indices may be on the host or on the model's device: given on the host (as the
  // trainer does), a step on a GPU reads none of them back.
  torch::Tensor fuse_at(const torch::Tensor& text_hidden, const torch::Tensor& mask,
                        const std::vector<torch::Tensor>& keys, const FusionPairs& pairs,
                        const torch::Tensor& positions);
  // fuse_at over pairs at the [CLS] of every pair -> [P, text_width].
  torch::Tensor fuse_cls(const torch::Tensor& text_hidden, const torch::Tensor& mask,
                         const std::vector<torch::Tensor>& keys, const FusionPairs& pairs);
  // L2-normalised projections of [CLS] (token 0) -> [B, embed_dim].
  torch::Tensor image_embed(const torch::Tensor& image_tokens);
  torch::Tensor text_embed(const torch::Tensor& text_hidden);
  // The same projections applied to every token [..., width] -> [..., embed_dim], L2-normalised
  // (TCL's local embeddings of patches and words, loss/tcl.hpp).
  torch::Tensor project_image_tokens(const torch::Tensor& tokens);
  torch::Tensor project_text_tokens(const torch::Tensor& tokens);
  // ITM head on fused[:,0] ([B, L, width], or the [CLS] states [B, width] of fuse_cls) -> [B,2]
  // (class 1 = matched, as ALBEF's itm_labels).
  torch::Tensor itm_logits(const torch::Tensor& fused);
  // BERT MLM head: LN(GELU(W h + b)) E^T + bias with E the word embeddings (tied decoder). Apply it
  // to the hidden states of masked positions only: [..., text_width] -> [..., vocab_size].
  torch::Tensor mlm_logits(const torch::Tensor& masked_hidden);
  // Its transform alone, LN(GELU(W h + b)): mlm_logits(x) = mlm_hidden(x) E^T + mlm_bias(), the
  // input of loss::linear_cross_entropy.
  torch::Tensor mlm_hidden(const torch::Tensor& masked_hidden);
  const torch::Tensor& mlm_bias() const { return mlm_bias_; }
  // Learnable temperature, clamped in place to [temp_min, temp_max] as ALBEF does before each use.
  // Returns the parameter itself (0-dim), so the ITC loss's gradient reaches it.
  torch::Tensor temp();

  const ModelConfig& config() const { return cfg_; }
  int64_t num_parameters() const;
  // The decoder weight of the MLM head: the very tensor of the word embeddings (tied).
  const torch::Tensor& mlm_decoder_weight() const;

 private:
  void init_weights(uint64_t seed);

  ModelConfig cfg_;
  VisionTransformer visual_{nullptr};
  BertEmbeddings embeddings_{nullptr};
  torch::nn::ModuleList text_list_, fusion_list_;
  std::vector<BertLayer> text_layers_, fusion_layers_;
  Dense vision_proj_{nullptr}, text_proj_{nullptr}, itm_head_{nullptr};
  Dense mlm_dense_{nullptr};
  torch::nn::LayerNorm mlm_norm_{nullptr};
  torch::Tensor mlm_bias_, temp_;
};
TORCH_MODULE(Albef);

// uint8 [B,H,W,3] (as stored in shards) -> float [B,3,H,W], x = (p/255 - mean_c) / std_c with
// ALBEF's (CLIP's) mean (0.48145466, 0.4578275, 0.40821073), std (0.26862954, 0.26130258,
// 0.27577711).
torch::Tensor normalize_images(const torch::Tensor& uint8_bhwc);

}  // namespace fnvlp::model
