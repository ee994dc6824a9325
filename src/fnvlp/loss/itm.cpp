#include "fnvlp/loss/itm.hpp"

#include <limits>
#include <utility>

#include "fnvlp/core/device_copy.hpp"
#include "fnvlp/core/error.hpp"

namespace fnvlp::loss {

ItmNegativeMode parse_itm_negative_mode(const std::string& name) {
  if (name == "multinomial") return ItmNegativeMode::kMultinomial;
  if (name == "argmax") return ItmNegativeMode::kArgmax;
  FNVLP_FAIL("itm: unknown negative mode '" << name << "' (expected multinomial or argmax)");
}

namespace {

// One negative per row of `s` [b, b] (anchor i against candidates j), all on the CPU.
//   valid_ij = id_i != id_j  and  not excluded_ij  and  isfinite(sim_ij)
//   multinomial: P(j | i) = (softmax_j(sim_i.)|valid + 1e-5) / Z  over valid j   (ALBEF's
//                softmax weights; the 1e-5, like BLIP's 1e-4, keeps a row drawable when its
//                softmax underflows to 0)
//   argmax:      j = argmax_{valid j} sim_ij                                     (GRIT-VLP)
//   no valid j:  -1
torch::Tensor sample_rows(const torch::Tensor& s, const torch::Tensor& same_image,
                          const torch::Tensor& exclude, ItmNegativeMode mode,
                          torch::Generator& gen) {
  torch::Tensor valid = ~same_image & s.isfinite();
  if (exclude.defined()) valid = valid & ~exclude;
  const torch::Tensor has = valid.any(1);

  // Rows without a candidate get a harmless all-zero row here and -1 below.
  torch::Tensor z = s.masked_fill(~valid, -std::numeric_limits<double>::infinity());
  z = torch::where(has.unsqueeze(1), z, torch::zeros_like(z));

  torch::Tensor idx;
  if (mode == ItmNegativeMode::kArgmax) {
    idx = z.argmax(1);
  } else {
    torch::Tensor p = torch::softmax(z, 1) + 1e-5;
    p = torch::where(has.unsqueeze(1), p * valid, torch::ones_like(p));
    idx = torch::multinomial(p, 1, /*replacement=*/false, gen).squeeze(1);
  }
  return torch::where(has, idx, torch::full_like(idx, -1));
}

// draw_itm_pairs' rows: one candidate per row of s [b, b] on s's device, and whether it is valid.
std::pair<torch::Tensor, torch::Tensor> draw_rows(const torch::Tensor& s,
                                                  const torch::Tensor& same_image,
                                                  const torch::Tensor& exclude,
                                                  ItmNegativeMode mode) {
  torch::Tensor valid = ~same_image & s.isfinite();
  if (exclude.defined()) valid = valid & ~exclude;
  const torch::Tensor has = valid.any(1);
  torch::Tensor z = s.masked_fill(~valid, -std::numeric_limits<double>::infinity());
  z = torch::where(has.unsqueeze(1), z, torch::zeros_like(z));
  torch::Tensor idx;
  if (mode == ItmNegativeMode::kArgmax) {
    idx = z.argmax(1);
  } else {
    // p_j / E_j with p_j = 0 off the valid set: an invalid j never wins while a valid one exists.
    const torch::Tensor p = (torch::softmax(z, 1) + 1e-5) * valid;
    // E clamped away from 0: p / 0 would be inf for a valid and NaN (argmax's pick) for an
    // invalid candidate; the clamp changes the distribution only below 1e-38.
    const torch::Tensor e =
        torch::empty_like(p).exponential_().clamp_min_(std::numeric_limits<float>::min());
    idx = (p / e).argmax(1);
  }
  const torch::Tensor self = torch::arange(s.size(0), idx.options());
  return {torch::where(has, idx, self), has};
}

void check_square(const torch::Tensor& t, int64_t b, const char* name) {
  if (!t.defined()) return;
  FNVLP_CHECK(t.dim() == 2 && t.size(0) == b && t.size(1) == b,
              "itm: " << name << " must be [" << b << ", " << b << "], got " << t.sizes());
}

}  // namespace

ItmNegatives sample_itm_negatives(const torch::Tensor& sim_i2t_local,
                                  const torch::Tensor& sim_t2i_local, const torch::Tensor& image_id,
                                  const torch::Tensor& exclude_i2t,
                                  const torch::Tensor& exclude_t2i, ItmNegativeMode mode,
                                  torch::Generator gen) {
  FNVLP_CHECK(image_id.defined() && image_id.dim() == 1, "itm: image_id must be [b]");
  const int64_t b = image_id.size(0);
  FNVLP_CHECK(sim_i2t_local.defined() && sim_t2i_local.defined(),
              "itm: both similarity matrices are required");
  check_square(sim_i2t_local, b, "sim_i2t_local");
  check_square(sim_t2i_local, b, "sim_t2i_local");
  check_square(exclude_i2t, b, "exclude_i2t");
  check_square(exclude_t2i, b, "exclude_t2i");

  const torch::Tensor ids = image_id.to(torch::kCPU);
  // Same image_id = a known positive, never a negative (this also removes the diagonal).
  const torch::Tensor same = ids.unsqueeze(1).eq(ids.unsqueeze(0));
  // Both directions in one copy each: every copy from a GPU waits for its queued work.
  const torch::Tensor sims =
      torch::stack({sim_t2i_local.detach(), sim_i2t_local.detach()}).to(torch::kCPU, torch::kFloat);
  torch::Tensor excl[2] = {exclude_t2i, exclude_i2t};
  if (excl[0].defined() && excl[1].defined()) {
    const torch::Tensor both = torch::stack({excl[0], excl[1]}).to(torch::kCPU, torch::kBool);
    excl[0] = both[0];
    excl[1] = both[1];
  } else {
    for (torch::Tensor& e : excl)
      if (e.defined()) e = e.to(torch::kCPU, torch::kBool);
  }
  ItmNegatives out;
  // Fixed order of draws (texts first, as ALBEF), so a seed fixes both.
  out.neg_image_for_text = sample_rows(sims[0], same, excl[0], mode, gen);
  out.neg_text_for_image = sample_rows(sims[1], same, excl[1], mode, gen);
  return out;
}

ItmPairs draw_itm_pairs(const torch::Tensor& sim_i2t_local, const torch::Tensor& sim_t2i_local,
                        const torch::Tensor& image_id, const torch::Tensor& exclude_i2t,
                        const torch::Tensor& exclude_t2i, ItmNegativeMode mode) {
  FNVLP_CHECK(image_id.defined() && image_id.dim() == 1, "itm: image_id must be [b]");
  const int64_t b = image_id.size(0);
  check_square(sim_i2t_local, b, "sim_i2t_local");
  check_square(sim_t2i_local, b, "sim_t2i_local");
  check_square(exclude_i2t, b, "exclude_i2t");
  check_square(exclude_t2i, b, "exclude_t2i");
  torch::NoGradGuard no_grad;
  const torch::Tensor same = image_id.unsqueeze(1).eq(image_id.unsqueeze(0));
  // Texts first, as sample_itm_negatives.
  const auto [neg_image, has_image] =
      draw_rows(sim_t2i_local.detach().to(torch::kFloat), same, exclude_t2i, mode);
  const auto [neg_text, has_text] =
      draw_rows(sim_i2t_local.detach().to(torch::kFloat), same, exclude_i2t, mode);
  const auto opts = image_id.options().dtype(torch::kLong);
  const torch::Tensor all = torch::arange(b, opts);
  ItmPairs p;
  p.image_index = torch::cat({all, neg_image, all});
  p.text_index = torch::cat({all, all, neg_text});
  p.labels = torch::cat({torch::ones({b}, opts), torch::zeros({2 * b}, opts)});
  p.weight = torch::cat({torch::ones({b}, opts.dtype(torch::kFloat)), has_image.to(torch::kFloat),
                         has_text.to(torch::kFloat)});
  return p;
}

ItmPairs itm_pairs(const ItmNegatives& negatives) {
  const torch::Tensor& ni = negatives.neg_image_for_text;
  const torch::Tensor& nt = negatives.neg_text_for_image;
  FNVLP_CHECK(ni.defined() && nt.defined() && ni.dim() == 1 && ni.sizes() == nt.sizes(),
              "itm_pairs: negatives must be two [b] tensors");
  const int64_t b = ni.size(0);
  const auto opts = ni.options().dtype(torch::kLong);
  const torch::Tensor all = torch::arange(b, opts);
  const torch::Tensor texts_with_neg = all.masked_select(ni >= 0);
  const torch::Tensor images_with_neg = all.masked_select(nt >= 0);
  ItmPairs p;
  p.image_index = torch::cat({all, ni.masked_select(ni >= 0), images_with_neg});
  p.text_index = torch::cat({all, texts_with_neg, nt.masked_select(nt >= 0)});
  p.labels = torch::cat({torch::ones({b}, opts),
                         torch::zeros({texts_with_neg.size(0) + images_with_neg.size(0)}, opts)});
  return p;
}

torch::Tensor itm_loss(const torch::Tensor& logits, const torch::Tensor& labels) {
  FNVLP_CHECK(logits.dim() == 2 && logits.size(1) == 2,
              "itm_loss: logits must be [n, 2], got " << logits.sizes());
  FNVLP_CHECK(labels.dim() == 1 && labels.size(0) == logits.size(0),
              "itm_loss: labels must be [" << logits.size(0) << "], got " << labels.sizes());
  if (logits.size(0) == 0) return logits.sum() * 0;  // no pairs: 0, still part of the graph
  return torch::nn::functional::cross_entropy(
      logits, to_device_async(labels.to(torch::kLong), logits.device()));
}

torch::Tensor itm_loss(const torch::Tensor& logits, const torch::Tensor& labels,
                       const torch::Tensor& weight) {
  FNVLP_CHECK(logits.dim() == 2 && logits.size(1) == 2 && labels.dim() == 1 &&
                  labels.size(0) == logits.size(0) && weight.sizes() == labels.sizes(),
              "itm_loss: logits [n, 2], labels and weight [n] expected, got "
                  << logits.sizes() << ", " << labels.sizes() << ", " << weight.sizes());
  namespace F = torch::nn::functional;
  const torch::Tensor ce = F::cross_entropy(logits, labels.to(torch::kLong),
                                            F::CrossEntropyFuncOptions().reduction(torch::kNone));
  return (ce * weight).sum() / weight.sum();
}

}  // namespace fnvlp::loss
