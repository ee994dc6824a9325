#include "fnvlp/loss/itc.hpp"

#include <limits>
#include <vector>

#include "fnvlp/core/error.hpp"

namespace fnvlp::loss {

SoftTargets parse_soft_targets(const std::string& name) {
  if (name == "none") return SoftTargets::kNone;
  if (name == "pseudo") return SoftTargets::kPseudo;
  if (name == "given" || name == "momentum") return SoftTargets::kGiven;
  FNVLP_FAIL("itc: unknown soft target mode '" << name
                                               << "' (expected none, pseudo, given or momentum)");
}

const char* to_string(SoftTargets mode) {
  switch (mode) {
    case SoftTargets::kNone:
      return "none";
    case SoftTargets::kPseudo:
      return "pseudo";
    case SoftTargets::kGiven:
      return "given";
  }
  return "?";
}

namespace {

// The gathered tensor with rows offset..offset+b replaced by the local ones (which carry the
// graph); the other rows stay as they are (constants, or leaves with cross_rank_grad).
torch::Tensor replace_rows(const torch::Tensor& all, const torch::Tensor& local, int64_t offset) {
  const int64_t n = all.size(0), b = local.size(0);
  std::vector<torch::Tensor> parts;
  if (offset > 0) parts.push_back(all.narrow(0, 0, offset));
  parts.push_back(local);
  if (offset + b < n) parts.push_back(all.narrow(0, offset + b, n - offset - b));
  return parts.size() == 1 ? parts[0] : torch::cat(parts, 0);
}

void check_mask(const torch::Tensor& t, int64_t b, int64_t n, const char* name) {
  if (!t.defined()) return;
  FNVLP_CHECK(t.dim() == 2 && t.size(0) == b && t.size(1) == n,
              "itc: " << name << " must be [" << b << ", " << n << "], got " << t.sizes());
}

struct Direction {
  torch::Tensor loss;        // scalar, mean over anchors
  torch::Tensor excluded;    // int64 scalar
  torch::Tensor acc;         // float scalar
  torch::Tensor weights_ok;  // bool 0-dim (check_on_device with weights)
};

// One direction (i2t or t2i) of the loss for anchors i and columns j of the global batch:
//
//   z_ij = s_ij / temp + log w_ij      (w_ij = 1 on positives; SRCL weights on negatives)
//   z_ij = -inf where excluded          (GloFND / FNC; never on positives)
//   l_i  = - sum_j y_ij log( exp(z_ij) / sum_k exp(z_ik) )
//        = - sum_j y_ij log( w_ij e^{s_ij/t} / sum_k m_ik w_ik e^{s_ik/t} ),  m = 1 - excluded
//   y_ij = (1 - a) * hard_ij + a * soft_ij,   hard_ij = 1[id_i = id_j] / #{k : id_k = id_i}
//
// hard is ALBEF's retrieval sim_targets built from image ids (ALBEF model_retrieval.py); soft is
// renormalised over the columns left in the denominator, so no target mass sits on a removed
// column (that would be 0 * log 0).
Direction one_direction(const torch::Tensor& logits, const torch::Tensor& positive,
                        const torch::Tensor& hard, const torch::Tensor& exclude,
                        const torch::Tensor& weight, SoftTargets mode,
                        const torch::Tensor& soft_given, const torch::Tensor& pseudo_source,
                        double alpha, const torch::Tensor& alpha_t, bool check_on_device) {
  torch::Tensor z = logits;
  torch::Tensor allowed = torch::ones_like(positive);
  torch::Tensor weights_ok;
  if (weight.defined()) {
    torch::Tensor w = weight.detach().to(logits.dtype());
    weights_ok = (w.isfinite() & (w >= 0)).all();
    FNVLP_CHECK(check_on_device || weights_ok.item<bool>(),  // one read of the device
                "itc: negative weights must be finite and >= 0");
    w = torch::where(positive, torch::ones_like(w), w);
    allowed = allowed & (w > 0);
    z = z + torch::log(w);  // -inf where w = 0, masked below
  }
  if (exclude.defined()) allowed = allowed & ~(exclude.to(torch::kBool) & ~positive);
  z = z.masked_fill(~allowed, -std::numeric_limits<double>::infinity());

  // Removed columns get log-probability 0 instead of -inf: their target is 0 and 0 * -inf would
  // be NaN. The gradient there is 0 either way.
  torch::Tensor logp = torch::log_softmax(z, 1).masked_fill(~allowed, 0.0);

  torch::Tensor target = hard;
  if (mode != SoftTargets::kNone && (alpha_t.defined() || alpha > 0)) {
    torch::Tensor soft;
    if (mode == SoftTargets::kGiven) {
      soft = soft_given.detach().to(logits.dtype()) * allowed;
      torch::Tensor mass = soft.sum(1, true);
      // A row whose soft mass lies only on removed columns falls back to the hard target.
      soft = torch::where(mass > 0, soft / mass.clamp_min(1e-30), hard);
    } else {
      soft = soft_targets_from_sim(pseudo_source, allowed);
    }
    target = alpha_t.defined() ? (1.0 - alpha_t) * hard + alpha_t * soft
                               : (1.0 - alpha) * hard + alpha * soft;
  }

  Direction d;
  d.weights_ok = weights_ok;
  d.loss = -(target * logp).sum(1).mean();
  d.excluded = (~allowed).sum();
  torch::NoGradGuard no_grad;
  d.acc = positive.gather(1, z.detach().argmax(1, true)).to(torch::kFloat).mean();
  return d;
}

}  // namespace

torch::Tensor soft_targets_from_sim(const torch::Tensor& logits, const torch::Tensor& allowed) {
  torch::NoGradGuard no_grad;
  torch::Tensor z = logits.detach();
  if (!allowed.defined()) return torch::softmax(z, 1);
  FNVLP_CHECK(allowed.sizes() == logits.sizes(),
              "soft_targets_from_sim: mask " << allowed.sizes() << " vs logits " << logits.sizes());
  torch::Tensor ok = allowed.to(torch::kBool);
  z = z.masked_fill(~ok, -std::numeric_limits<double>::infinity());
  torch::Tensor p = torch::softmax(z, 1);
  // A row with nothing allowed would be NaN: give it no mass at all.
  return torch::where(ok.any(1, true), p, torch::zeros_like(p));
}

ItcResult itc_loss(const ItcInputs& in) {
  FNVLP_CHECK(in.img.defined() && in.txt.defined() && in.img_all.defined() &&
                  in.txt_all.defined() && in.temp.defined() && in.image_id.defined() &&
                  in.image_id_all.defined(),
              "itc: img, txt, img_all, txt_all, temp, image_id and image_id_all are required");
  FNVLP_CHECK(in.img.dim() == 2 && in.img.sizes() == in.txt.sizes(),
              "itc: local embeddings must be [b, E] each, got " << in.img.sizes() << " and "
                                                                << in.txt.sizes());
  const int64_t b = in.img.size(0), e = in.img.size(1), n = in.img_all.size(0);
  FNVLP_CHECK(b > 0, "itc: empty local batch");
  FNVLP_CHECK(
      in.img_all.dim() == 2 && in.img_all.size(1) == e && in.txt_all.sizes() == in.img_all.sizes(),
      "itc: gathered embeddings must be [N, " << e << "] each, got " << in.img_all.sizes()
                                              << " and " << in.txt_all.sizes());
  FNVLP_CHECK(in.offset >= 0 && in.offset + b <= n,
              "itc: local rows " << in.offset << ".." << in.offset + b << " outside the " << n
                                 << " gathered rows");
  FNVLP_CHECK(in.temp.numel() == 1, "itc: temp must be a scalar");
  FNVLP_CHECK(in.image_id.dim() == 1 && in.image_id.size(0) == b && in.image_id_all.dim() == 1 &&
                  in.image_id_all.size(0) == n,
              "itc: image_id must be [" << b << "] and image_id_all [" << n << "]");
  // Read on the host only: on a GPU it would wait for the step's queued work (the trainer gathers
  // image_id_all from the host batch, checked here by every CPU run).
  FNVLP_CHECK(!in.image_id.device().is_cpu() ||
                  in.image_id_all.narrow(0, in.offset, b).eq(in.image_id).all().item<bool>(),
              "itc: image_id_all[offset .. offset+b) differs from image_id (wrong offset?)");
  FNVLP_CHECK(in.soft_weight >= 0 && in.soft_weight <= 1,
              "itc: soft_weight must be in [0, 1], got " << in.soft_weight);
  check_mask(in.exclude_i2t, b, n, "exclude_i2t");
  check_mask(in.exclude_t2i, b, n, "exclude_t2i");
  check_mask(in.weight_i2t, b, n, "weight_i2t");
  check_mask(in.weight_t2i, b, n, "weight_t2i");
  FNVLP_CHECK(!(in.momentum_keys && in.cross_rank_grad),
              "itc: momentum_keys excludes cross_rank_grad (no gradient flows to constant keys)");
  if (in.soft == SoftTargets::kGiven) {
    FNVLP_CHECK(in.soft_i2t.defined() && in.soft_t2i.defined(),
                "itc: soft mode 'given' needs soft_i2t and soft_t2i");
    check_mask(in.soft_i2t, b, n, "soft_i2t");
    check_mask(in.soft_t2i, b, n, "soft_t2i");
  }

  ItcResult r;
  torch::Tensor img_all = in.img_all.detach().to(in.img.dtype());
  torch::Tensor txt_all = in.txt_all.detach().to(in.txt.dtype());
  if (in.cross_rank_grad) {
    img_all = img_all.clone().requires_grad_(true);
    txt_all = txt_all.clone().requires_grad_(true);
    r.img_all_leaf = img_all;
    r.txt_all_leaf = txt_all;
  }
  const torch::Tensor img_cols =
      in.momentum_keys ? img_all : replace_rows(img_all, in.img, in.offset);
  const torch::Tensor txt_cols =
      in.momentum_keys ? txt_all : replace_rows(txt_all, in.txt, in.offset);

  // s_ij / temp, the ALBEF logits: sim_i2t = image_feat @ text_feat_all / temp.
  const torch::Tensor logits_i2t = torch::matmul(in.img, txt_cols.t()) / in.temp;
  const torch::Tensor logits_t2i = torch::matmul(in.txt, img_cols.t()) / in.temp;
  r.sim_i2t = logits_i2t.detach();
  r.sim_t2i = logits_t2i.detach();

  const torch::Tensor ids = in.image_id.to(in.image_id_all.device());
  r.positive = ids.unsqueeze(1).eq(in.image_id_all.unsqueeze(0));
  const torch::Tensor hard =
      r.positive.to(logits_i2t.dtype()) / r.positive.sum(1, true).to(logits_i2t.dtype());

  // GRIT-VLP pseudo-targets: the i2t target of anchor i is the softmax of the partner text's
  // t2i row (t_i against every image j), and vice versa. Using the same direction's own detached
  // logits would give a zero gradient: d/dz of -sum_j sg(p_j) log p_j is p - sg(p) = 0.
  Direction i2t =
      one_direction(logits_i2t, r.positive, hard, in.exclude_i2t, in.weight_i2t, in.soft,
                    in.soft_i2t, r.sim_t2i, in.soft_weight, in.soft_weight_t, in.check_on_device);
  Direction t2i =
      one_direction(logits_t2i, r.positive, hard, in.exclude_t2i, in.weight_t2i, in.soft,
                    in.soft_t2i, r.sim_i2t, in.soft_weight, in.soft_weight_t, in.check_on_device);
  if (i2t.weights_ok.defined() && t2i.weights_ok.defined())
    r.inputs_ok = i2t.weights_ok & t2i.weights_ok;
  else
    r.inputs_ok = i2t.weights_ok.defined() ? i2t.weights_ok : t2i.weights_ok;
  r.loss_i2t = i2t.loss;
  r.loss_t2i = t2i.loss;
  r.loss = (i2t.loss + t2i.loss) / 2;
  r.excluded_i2t = i2t.excluded;
  r.excluded_t2i = t2i.excluded;
  r.acc_i2t = i2t.acc;
  r.acc_t2i = t2i.acc;
  r.extra_positives = r.positive.sum() - b;
  return r;
}

ItcInputs momentum_itc_inputs(const MomentumItc& m) {
  FNVLP_CHECK(m.img_m.defined() && m.txt_m.defined() && m.img_m_all.defined() &&
                  m.txt_m_all.defined() && m.image_id_all.defined(),
              "momentum_itc_inputs: momentum embeddings and gathered image ids are required");
  FNVLP_CHECK(m.img_m.sizes() == m.img.sizes() && m.txt_m.sizes() == m.txt.sizes(),
              "momentum_itc_inputs: momentum embeddings "
                  << m.img_m.sizes() << " differ in shape from the online " << m.img.sizes());
  torch::NoGradGuard no_grad;
  ItcInputs in;
  in.img = m.img;
  in.txt = m.txt;
  in.offset = m.offset;
  in.temp = m.temp;
  in.image_id = m.image_id;
  const bool queued = m.queue_img.defined() && m.queue_img.size(0) > 0;
  if (queued) {
    FNVLP_CHECK(m.queue_txt.defined() && m.queue_image_id.defined() &&
                    m.queue_txt.sizes() == m.queue_img.sizes() &&
                    m.queue_image_id.size(0) == m.queue_img.size(0),
                "momentum_itc_inputs: queue tensors disagree: " << m.queue_img.sizes() << ", "
                                                                << m.queue_txt.sizes());
    in.img_all = torch::cat({m.img_m_all.detach(), m.queue_img.to(m.img_m_all.dtype())});
    in.txt_all = torch::cat({m.txt_m_all.detach(), m.queue_txt.to(m.txt_m_all.dtype())});
    in.image_id_all = torch::cat({m.image_id_all, m.queue_image_id.to(torch::kLong)});
  } else {
    in.img_all = m.img_m_all.detach();
    in.txt_all = m.txt_m_all.detach();
    in.image_id_all = m.image_id_all;
  }
  in.momentum_keys = true;
  in.cross_rank_grad = false;
  in.soft = SoftTargets::kGiven;
  in.soft_weight = m.alpha;
  torch::Tensor allowed;
  if (queued && m.queue_valid.defined()) {
    const int64_t b = m.img.size(0), B = m.img_m_all.size(0);
    FNVLP_CHECK(m.queue_valid.dim() == 1 && m.queue_valid.size(0) == m.queue_img.size(0),
                "momentum_itc_inputs: queue_valid " << m.queue_valid.sizes() << " for a queue of "
                                                    << m.queue_img.size(0));
    allowed = torch::cat({torch::ones({B}, m.queue_valid.options().dtype(torch::kBool)),
                          m.queue_valid.to(torch::kBool)})
                  .unsqueeze(0)
                  .expand({b, B + m.queue_valid.size(0)});
    in.exclude_i2t = ~allowed;
    in.exclude_t2i = in.exclude_i2t;
  }
  // ALBEF computes the momentum logits in no_grad with the online temperature.
  const torch::Tensor t = m.temp.detach();
  in.soft_i2t = soft_targets_from_sim(torch::matmul(m.img_m.detach(), in.txt_all.t()) / t, allowed);
  in.soft_t2i = soft_targets_from_sim(torch::matmul(m.txt_m.detach(), in.img_all.t()) / t, allowed);
  return in;
}

ItcCosine itc_cosine(const ItcInputs& in) {
  torch::NoGradGuard no_grad;
  ItcCosine c;
  c.i2t = torch::matmul(in.img.detach(), in.txt_all.detach().to(in.img.dtype()).t());
  c.t2i = torch::matmul(in.txt.detach(), in.img_all.detach().to(in.txt.dtype()).t());
  return c;
}

ItcGatheredGrads itc_gathered_grads(const ItcResult& result) {
  FNVLP_CHECK(result.img_all_leaf.defined() && result.txt_all_leaf.defined(),
              "itc_gathered_grads: run itc_loss with cross_rank_grad = true");
  // retain_graph: the caller still backpropagates the loss through the encoders afterwards.
  auto g = torch::autograd::grad({result.loss}, {result.img_all_leaf, result.txt_all_leaf}, {},
                                 /*retain_graph=*/true, /*create_graph=*/false,
                                 /*allow_unused=*/true);
  ItcGatheredGrads out;
  // Unused when this rank's rows are all the columns (one rank, no queue).
  out.img_all = g[0].defined() ? g[0] : torch::zeros_like(result.img_all_leaf);
  out.txt_all = g[1].defined() ? g[1] : torch::zeros_like(result.txt_all_leaf);
  return out;
}

torch::Tensor itc_cross_rank_term(const ItcInputs& in, const ItcGatheredGrads& summed) {
  const int64_t b = in.img.size(0);
  FNVLP_CHECK(
      summed.img_all.defined() && summed.txt_all.defined() &&
          summed.img_all.sizes() == in.img_all.sizes() &&
          summed.txt_all.sizes() == in.txt_all.sizes(),
      "itc_cross_rank_term: summed gradients must have the gathered shape " << in.img_all.sizes());
  const torch::Tensor g_img = summed.img_all.detach().narrow(0, in.offset, b).to(in.img.dtype());
  const torch::Tensor g_txt = summed.txt_all.detach().narrow(0, in.offset, b).to(in.txt.dtype());
  return (in.img * g_img).sum() + (in.txt * g_txt).sum();
}

}  // namespace fnvlp::loss
