#pragma once
// Image-text matching (ITM) with in-batch hard negatives (ALBEF §3.2): for every text a negative
// image and for every image a negative text are drawn from the local batch, with probability
// softmax(ITC logits) (ALBEF, torch.multinomial) or as the hardest one (argmax, GRIT-VLP). A pair
// sharing an image_id is never a negative, nor is a pair a method excluded (GloFND, FNC). Rows
// with no valid candidate get -1 (the trainer drops them) instead of ALBEF's "invalid
// multinomial distribution" crash.
#include <torch/torch.h>

#include <string>

namespace fnvlp::loss {

enum class ItmNegativeMode { kMultinomial, kArgmax };
// "multinomial" (ALBEF) | "argmax" (GRIT); throws fnvlp::Error otherwise.
ItmNegativeMode parse_itm_negative_mode(const std::string& name);

struct ItmNegatives {
  // int64 [b] on the host, indices into the LOCAL batch; -1 when the row has no valid negative.
  // The pairs built from them stay there too: fuse_at and itm_loss copy what they gather with.
  torch::Tensor neg_image_for_text;  // text i is paired with image neg_image_for_text[i]
  torch::Tensor neg_text_for_image;  // image i is paired with text neg_text_for_image[i]
};

// sim_i2t_local[i, j]: image i vs text j, sim_t2i_local[i, j]: text i vs image j, both [b, b]
// logits of the local batch (ItcResult::sim_i2t.narrow(1, offset, b)). exclude_i2t / exclude_t2i
// (optional bool [b, b], same orientation) remove candidates. Non-finite similarities are never
// drawn. All draws come from `gen` (a CPU generator: sampling runs on the CPU, so the same seed
// gives the same negatives on any device). image_id may be on the host; the similarities of a
// GPU step come back in one copy (and the exclusions in one more).
ItmNegatives sample_itm_negatives(const torch::Tensor& sim_i2t_local,
                                  const torch::Tensor& sim_t2i_local, const torch::Tensor& image_id,
                                  const torch::Tensor& exclude_i2t,
                                  const torch::Tensor& exclude_t2i, ItmNegativeMode mode,
                                  torch::Generator gen);

// The pairs to run through the fusion encoder, in ALBEF's order: the b positives (i, i), then
// (image neg_image_for_text[i], text i) for the texts that have a negative, then
// (image i, text neg_text_for_image[i]) for the images that have one. int64 [n] each; labels are
// 1 for a match, 0 otherwise.
struct ItmPairs {
  torch::Tensor image_index, text_index, labels;
  // draw_itm_pairs only: float [3b], 1 for a pair in the loss, 0 for a placeholder negative of a
  // row that has no valid candidate (undefined: every pair counts).
  torch::Tensor weight;
};
ItmPairs itm_pairs(const ItmNegatives& negatives);

// The same pairs drawn where the similarities are, with static shapes and no read back to the
// host: what a step captured in a CUDA graph can replay. Always 3b pairs in itm_pairs' order; a row
// without a valid candidate gets a placeholder negative (itself) of weight 0. The draw is ALBEF's
// distribution (multinomial over softmax + 1e-5 on the valid candidates, as sample_itm_negatives)
// by the exponential race: j = argmax_j p_j / E_j with E_j ~ Exp(1) i.i.d., P(j) = p_j / sum p
// (the Gumbel-max trick in another form), from the default generator of the similarities' device
// (seeded per step by seed_dropout); argmax mode draws nothing. image_id on the similarities'
// device; exclusions optional.
ItmPairs draw_itm_pairs(const torch::Tensor& sim_i2t_local, const torch::Tensor& sim_t2i_local,
                        const torch::Tensor& image_id, const torch::Tensor& exclude_i2t,
                        const torch::Tensor& exclude_t2i, ItmNegativeMode mode);

// Cross-entropy of the ITM head's logits [n, 2] against labels [n] (1 = match), mean over the
// pairs. n = 0 gives 0 with a valid graph. labels may be on the host.
torch::Tensor itm_loss(const torch::Tensor& logits, const torch::Tensor& labels);
// With per-pair weights (draw_itm_pairs): sum_p w_p CE_p / sum_p w_p, all on the device.
torch::Tensor itm_loss(const torch::Tensor& logits, const torch::Tensor& labels,
                       const torch::Tensor& weight);

}  // namespace fnvlp::loss
