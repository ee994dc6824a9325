#pragma once
// Masked language modelling (MLM) with BERT's masking scheme (Devlin et al. 2019, §3.1; ALBEF
// model_pretrain.py `mask`): every maskable token is selected with probability p (config
// mlm_probability: ALBEF 0.15, FALCON 0.5); of the selected, 80% become [MASK], 10% a random
// vocabulary token and 10% stay unchanged. [PAD]/[CLS]/[SEP] (never_mask) and positions outside
// the attention mask are never selected. Vocabulary logits are computed only at the selected
// positions (ARCHITECTURE.md §5), so the masking returns their flat indices.
#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace fnvlp::loss {

struct MlmMasking {
  torch::Tensor input_ids;  // int64 [b, L]: masked copy of the ids
  torch::Tensor labels;     // int64 [b, L]: original id where selected, -100 elsewhere
  torch::Tensor positions;  // int64 [M]: flat indices (row * L + col) of the selected tokens,
                            // ascending; on the host, where fuse_at plans its query rows
  torch::Tensor targets;    // int64 [M]: original ids at `positions`
};

// Draws, in this fixed order, uniform [b, L] (selection), uniform [b, L] (80/10/10 split) and
// randint [b, L] (random tokens) from `gen` (a CPU generator; draws happen on the CPU and the
// results other than positions move to `device`, by default ids' device), so the same generator
// state gives the same masks on any device: FALCON's reward compares the MLM loss before and after
// an update on the same masks. Given host ids and attn (the trainer's host batch), masking a batch
// bound for a GPU reads nothing back from it. attn (optional, [b, L], nonzero = real token). M may
// be 0 (mlm_loss then returns 0).
MlmMasking mask_tokens(const torch::Tensor& ids, const torch::Tensor& attn, double probability,
                       int64_t vocab_size, int64_t mask_id, const std::vector<int64_t>& never_mask,
                       torch::Generator gen, std::optional<torch::Device> device = std::nullopt);

// `m` (on the host, as mask_tokens(..., torch::kCPU) gives it) with positions and targets padded to
// `rows` >= M: the extra positions are distinct flat positions that were not selected (the first
// ones in order), their targets -100, which cross_entropy ignores. A step of fixed shapes (one
// captured in a CUDA graph) computes the same loss over them (padded_linear_cross_entropy).
MlmMasking pad_positions(const MlmMasking& m, int64_t rows);
// The padded row count for M selected tokens: M rounded up to a multiple of `multiple`, at most
// max_rows (b * L), so that a run sees a handful of shapes.
int64_t padded_rows(int64_t selected, int64_t multiple, int64_t max_rows);

// Rows of `hidden` [b, L, D] at the flat positions [M] (on the host, as mask_tokens gives them,
// or on hidden's device) -> [M, D] (input of the MLM head).
torch::Tensor gather_positions(const torch::Tensor& hidden, const torch::Tensor& positions);

// Mean cross-entropy of logits [M, V] against targets [M]. M = 0 gives 0 with a valid graph.
torch::Tensor mlm_loss(const torch::Tensor& logits_at_positions, const torch::Tensor& targets);

// mlm_loss(h W^T + bias, targets) for a linear decoder [V, D] over the hidden states h [M, D]
// (the tied MLM decoder, model::AlbefImpl::mlm_hidden and mlm_decoder_weight): on CPU float one
// autograd node that keeps softmax - onehot in the logits' buffer instead of the logits, and adds
// W's gradient into W's .grad() in place where that buffer exists (kernels/grad_accumulation.hpp).
torch::Tensor linear_cross_entropy(const torch::Tensor& h, const torch::Tensor& weight,
                                   const torch::Tensor& bias, const torch::Tensor& targets);

// mlm_loss(h W^T + bias, targets) over targets padded with -100 (pad_positions): the mean over the
// others (0 when none counts), on any device (libtorch's linear and cross-entropy; under autocast
// the logits in bf16, the loss in fp32).
torch::Tensor padded_linear_cross_entropy(const torch::Tensor& h, const torch::Tensor& weight,
                                          const torch::Tensor& bias, const torch::Tensor& targets);

// ALBEF's distilled MLM (xbert.py BertForMaskedLM with soft_labels):
//   L = (1 - a) * CE(logits, targets) + a * mean_m( - sum_v soft_mv log softmax(logits_m)_v )
// with soft = softmax of the momentum model's logits [M, V] (detached here).
torch::Tensor mlm_loss(const torch::Tensor& logits_at_positions, const torch::Tensor& targets,
                       const torch::Tensor& soft_targets, double alpha);
// The same over targets padded with -100 (pad_positions: the padded rows count in neither term)
// with alpha a 0-dim float tensor on the logits' device (the static step).
torch::Tensor padded_mlm_loss(const torch::Tensor& logits_at_positions,
                              const torch::Tensor& targets, const torch::Tensor& soft_targets,
                              const torch::Tensor& alpha);
// mlm_loss(logits, targets) over targets padded with -100: the mean over the others.
torch::Tensor padded_mlm_loss(const torch::Tensor& logits_at_positions,
                              const torch::Tensor& targets);

}  // namespace fnvlp::loss
