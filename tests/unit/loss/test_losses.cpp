// Pretraining losses: ITC (targets, masks, weights, soft targets, exact data-parallel gradient),
// ITM hard-negative sampling and MLM masking.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "fnvlp/core/error.hpp"
#include "fnvlp/loss/itc.hpp"
#include "fnvlp/loss/itm.hpp"
#include "fnvlp/loss/mlm.hpp"

namespace {

using namespace fnvlp::loss;
namespace F = torch::nn::functional;

torch::Generator make_gen(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

torch::Tensor normed(torch::Tensor x) { return F::normalize(x, F::NormalizeFuncOptions().dim(1)); }

// A whole batch treated as one rank: offset 0, local = gathered.
ItcInputs single_rank(const torch::Tensor& img, const torch::Tensor& txt, double temp,
                      const torch::Tensor& ids) {
  ItcInputs in;
  in.img = img;
  in.txt = txt;
  in.img_all = img.detach();
  in.txt_all = txt.detach();
  in.temp = torch::tensor(temp);
  in.image_id = ids;
  in.image_id_all = ids;
  in.soft = SoftTargets::kNone;
  return in;
}

double scalar(const torch::Tensor& t) { return t.item<double>(); }

// -sum_j y_j log softmax(z)_j over the columns in `keep`, the reference the loss must match.
double ce_row(const torch::Tensor& z, const torch::Tensor& y) {
  return -scalar((y * torch::log_softmax(z, 0)).sum());
}

TEST(ItcLoss, DistinctImagesEqualsTorchCrossEntropy) {
  torch::manual_seed(1);
  auto img = normed(torch::randn({5, 8}));
  auto txt = normed(torch::randn({5, 8}));
  auto ids = torch::arange(5, torch::kLong);
  auto r = itc_loss(single_rank(img, txt, 0.07, ids));
  auto target = torch::arange(5, torch::kLong);
  double want = 0.5 * (scalar(F::cross_entropy(img.mm(txt.t()) / 0.07, target)) +
                       scalar(F::cross_entropy(txt.mm(img.t()) / 0.07, target)));
  EXPECT_NEAR(scalar(r.loss), want, 1e-5);
  EXPECT_EQ(r.extra_positives.item<int64_t>(), 0);
  EXPECT_EQ(r.excluded_i2t.item<int64_t>(), 0);
  EXPECT_TRUE(torch::allclose(r.sim_i2t, img.mm(txt.t()) / 0.07));
}

TEST(ItcLoss, SameImageColumnsShareTheTarget) {
  torch::manual_seed(2);
  auto img = normed(torch::randn({4, 6}));
  auto txt = normed(torch::randn({4, 6}));
  auto ids = torch::tensor({7, 7, 3, 9}, torch::kLong);
  auto r = itc_loss(single_rank(img, txt, 0.1, ids));
  auto si = img.mm(txt.t()) / 0.1, st = txt.mm(img.t()) / 0.1;
  auto y01 = torch::tensor({0.5, 0.5, 0.0, 0.0}, torch::kFloat);
  double li = 0, lt = 0;
  for (int i = 0; i < 4; ++i) {
    auto y = i < 2 ? y01 : torch::eye(4)[i];
    li += ce_row(si[i], y);
    lt += ce_row(st[i], y);
  }
  EXPECT_NEAR(scalar(r.loss), 0.5 * (li + lt) / 4, 1e-5);
  EXPECT_EQ(r.extra_positives.item<int64_t>(), 2);
  EXPECT_TRUE(r.positive[0][1].item<bool>() && r.positive[1][0].item<bool>());
}

TEST(ItcLoss, ExclusionRemovesNegativesButNeverPositives) {
  torch::manual_seed(3);
  auto img = normed(torch::randn({4, 6}));
  auto txt = normed(torch::randn({4, 6}));
  auto ids = torch::tensor({0, 0, 1, 2}, torch::kLong);
  auto in = single_rank(img, txt, 0.1, ids);
  in.exclude_i2t = torch::zeros({4, 4}, torch::kBool);
  in.exclude_i2t[0][3] = true;  // a negative: removed
  in.exclude_i2t[0][0] = true;  // the own positive: ignored
  in.exclude_i2t[0][1] = true;  // a same-image column: a positive, ignored
  auto r = itc_loss(in);
  EXPECT_EQ(r.excluded_i2t.item<int64_t>(), 1);
  EXPECT_EQ(r.excluded_t2i.item<int64_t>(), 0);

  auto si = img.mm(txt.t()) / 0.1, st = txt.mm(img.t()) / 0.1;
  auto hard = r.positive.to(torch::kFloat) / r.positive.sum(1, true).to(torch::kFloat);
  double li = 0, lt = 0;
  auto keep0 = torch::tensor({0, 1, 2}, torch::kLong);  // row 0 without column 3
  li += ce_row(si[0].index_select(0, keep0), hard[0].index_select(0, keep0));
  for (int i = 1; i < 4; ++i) li += ce_row(si[i], hard[i]);
  for (int i = 0; i < 4; ++i) lt += ce_row(st[i], hard[i]);
  EXPECT_NEAR(scalar(r.loss_i2t), li / 4, 1e-5);
  EXPECT_NEAR(scalar(r.loss_t2i), lt / 4, 1e-5);
}

TEST(ItcLoss, WeightsMultiplyTheNegativesExpTerms) {
  torch::manual_seed(4);
  const int64_t n = 5;
  auto img = normed(torch::randn({n, 6}));
  auto txt = normed(torch::randn({n, 6}));
  auto ids = torch::arange(n, torch::kLong);
  auto w = torch::rand({n, n}) * 1.5 + 0.25;
  auto in = single_rank(img, txt, 0.2, ids);
  in.weight_i2t = w;
  auto r = itc_loss(in);
  // -log( e^{s_ii} / (e^{s_ii} + sum_{j != i} w_ij e^{s_ij}) ); w_ii is ignored.
  auto e = torch::exp(img.mm(txt.t()) / 0.2);
  double li = 0;
  for (int64_t i = 0; i < n; ++i) {
    double den = scalar(e[i][i]);
    for (int64_t j = 0; j < n; ++j)
      if (j != i) den += scalar(w[i][j] * e[i][j]);
    li -= std::log(scalar(e[i][i]) / den);
  }
  EXPECT_NEAR(scalar(r.loss_i2t), li / n, 1e-5);
  // Unit weights change nothing; a zero weight is an exclusion.
  auto base = itc_loss(single_rank(img, txt, 0.2, ids));
  in.weight_i2t = torch::ones({n, n});
  EXPECT_NEAR(scalar(itc_loss(in).loss), scalar(base.loss), 1e-6);
  in.weight_i2t = torch::ones({n, n});
  in.weight_i2t[1][3] = 0;
  auto zero_w = itc_loss(in);
  in.weight_i2t = torch::Tensor();
  in.exclude_i2t = torch::zeros({n, n}, torch::kBool);
  in.exclude_i2t[1][3] = true;
  EXPECT_NEAR(scalar(zero_w.loss), scalar(itc_loss(in).loss), 1e-6);
  EXPECT_EQ(zero_w.excluded_i2t.item<int64_t>(), 1);
  in.exclude_i2t = torch::Tensor();
  in.weight_i2t = -torch::ones({n, n});
  EXPECT_THROW(itc_loss(in), fnvlp::Error);
  // The static step reads nothing back: the check becomes a flag it folds into its finite one.
  in.check_on_device = true;
  EXPECT_FALSE(itc_loss(in).inputs_ok.item<bool>());
  in.weight_i2t = w;
  in.weight_t2i = w.clone();
  in.weight_t2i[2][0] = std::nanf("");
  EXPECT_FALSE(itc_loss(in).inputs_ok.item<bool>());
  in.weight_t2i = w;
  EXPECT_TRUE(itc_loss(in).inputs_ok.item<bool>());
}

TEST(ItcLoss, GivenSoftTargetsMixAndAvoidRemovedColumns) {
  torch::manual_seed(5);
  const int64_t n = 4;
  auto img = normed(torch::randn({n, 6}));
  auto txt = normed(torch::randn({n, 6}));
  auto ids = torch::arange(n, torch::kLong);
  auto soft = torch::softmax(torch::randn({n, n}), 1);
  auto in = single_rank(img, txt, 0.1, ids);
  in.soft = SoftTargets::kGiven;
  in.soft_i2t = soft;
  in.soft_t2i = soft;
  in.soft_weight = 0.4;
  in.exclude_i2t = torch::zeros({n, n}, torch::kBool);
  in.exclude_i2t[2][0] = true;
  auto r = itc_loss(in);
  auto si = img.mm(txt.t()) / 0.1, st = txt.mm(img.t()) / 0.1;
  auto eye = torch::eye(n);
  double li = 0, lt = 0;
  for (int64_t i = 0; i < n; ++i) {
    lt += ce_row(st[i], 0.6 * eye[i] + 0.4 * soft[i]);
    if (i != 2) {
      li += ce_row(si[i], 0.6 * eye[i] + 0.4 * soft[i]);
    } else {  // column 0 removed: soft mass renormalised over columns 1..3
      auto keep = torch::tensor({1, 2, 3}, torch::kLong);
      auto s = soft[i].index_select(0, keep);
      li += ce_row(si[i].index_select(0, keep),
                   0.6 * eye[i].index_select(0, keep) + 0.4 * s / s.sum());
    }
  }
  EXPECT_NEAR(scalar(r.loss_i2t), li / n, 1e-5);
  EXPECT_NEAR(scalar(r.loss_t2i), lt / n, 1e-5);
  EXPECT_TRUE(std::isfinite(scalar(r.loss)));
}

TEST(ItcLoss, PseudoTargetsComeFromTheOtherDirection) {
  torch::manual_seed(6);
  const int64_t n = 6;
  auto img = normed(torch::randn({n, 8})).requires_grad_(true);
  auto txt = normed(torch::randn({n, 8}));
  auto ids = torch::arange(n, torch::kLong);
  auto in = single_rank(img, txt, 0.1, ids);
  in.soft = SoftTargets::kPseudo;
  in.soft_weight = 0.3;
  auto r = itc_loss(in);
  auto si = img.detach().mm(txt.t()) / 0.1, st = txt.mm(img.detach().t()) / 0.1;
  auto pi = torch::softmax(st, 1), pt = torch::softmax(si, 1);  // GRIT: swapped directions
  auto eye = torch::eye(n);
  double li = 0, lt = 0;
  for (int64_t i = 0; i < n; ++i) {
    li += ce_row(si[i], 0.7 * eye[i] + 0.3 * pi[i]);
    lt += ce_row(st[i], 0.7 * eye[i] + 0.3 * pt[i]);
  }
  EXPECT_NEAR(scalar(r.loss_i2t), li / n, 1e-5);
  EXPECT_NEAR(scalar(r.loss_t2i), lt / n, 1e-5);
  // The helper is the softmax of detached logits, restricted to the allowed columns.
  auto allowed = torch::ones({n, n}, torch::kBool);
  allowed[0][5] = false;
  auto p = soft_targets_from_sim(si, allowed);
  EXPECT_EQ(p[0][5].item<float>(), 0.0f);
  EXPECT_TRUE(torch::allclose(p.sum(1), torch::ones({n})));
  EXPECT_FALSE(p.requires_grad());
}

TEST(ItcLoss, QueueColumnsAfterTheGatheredRows) {
  // ALBEF's queue appended after the gathered batch: extra columns, negatives unless they carry
  // an anchor's image_id (then positives, as ALBEF's retrieval idx_queue).
  torch::manual_seed(7);
  auto img = normed(torch::randn({3, 6}));
  auto txt = normed(torch::randn({3, 6}));
  auto q_img = normed(torch::randn({2, 6}));
  auto q_txt = normed(torch::randn({2, 6}));
  auto in = single_rank(img, txt, 0.1, torch::arange(3, torch::kLong));
  in.img_all = torch::cat({img.detach(), q_img});
  in.txt_all = torch::cat({txt.detach(), q_txt});
  in.image_id_all = torch::tensor({0, 1, 2, 50, 2}, torch::kLong);  // queue row 4 shows image 2
  auto r = itc_loss(in);
  EXPECT_EQ(r.extra_positives.item<int64_t>(), 1);
  auto si = img.mm(in.txt_all.t()) / 0.1;
  auto hard = torch::tensor(
      {{1.0, 0.0, 0.0, 0.0, 0.0}, {0.0, 1.0, 0.0, 0.0, 0.0}, {0.0, 0.0, 0.5, 0.0, 0.5}});
  double li = 0;
  for (int i = 0; i < 3; ++i) li += ce_row(si[i], hard[i]);
  EXPECT_NEAR(scalar(r.loss_i2t), li / 3, 1e-5);
}

TEST(ItcLoss, RejectsInconsistentInputs) {
  auto img = normed(torch::randn({3, 4}));
  auto txt = normed(torch::randn({3, 4}));
  auto in = single_rank(img, txt, 0.1, torch::arange(3, torch::kLong));
  in.img_all = torch::cat({img, img});
  in.txt_all = torch::cat({txt, txt});
  in.image_id_all = torch::arange(6, torch::kLong);
  in.offset = 3;  // ids 3..5 there, local ids are 0..2
  EXPECT_THROW(itc_loss(in), fnvlp::Error);
  in.offset = 4;  // rows 4..7 of 6
  EXPECT_THROW(itc_loss(in), fnvlp::Error);
  in.offset = 0;
  in.soft_weight = 1.5;
  EXPECT_THROW(itc_loss(in), fnvlp::Error);
  in.soft_weight = 0.4;
  in.soft = SoftTargets::kGiven;  // without soft_i2t/soft_t2i
  EXPECT_THROW(itc_loss(in), fnvlp::Error);
  EXPECT_EQ(parse_soft_targets("momentum"), SoftTargets::kGiven);
  EXPECT_THROW(parse_soft_targets("grit"), fnvlp::Error);
}

// Data-parallel gradient equivalence, simulated in one process. A tiny "encoder" (a linear map and
// L2 normalisation) produces the embeddings of a batch of B = R*b pairs; the reference is the
// gradient of the full-batch loss. Each simulated rank sees only its b rows with graph and the
// gathered embeddings of all B rows as constants, as after an all-gather without gradient. Double
// precision, so that the comparison measures the method, not float rounding.
struct Encoder {
  torch::Tensor w_img, w_txt, temp;
  Encoder() {
    torch::manual_seed(11);
    w_img = (torch::randn({10, 8}, torch::kDouble) * 0.4).requires_grad_(true);
    w_txt = (torch::randn({12, 8}, torch::kDouble) * 0.4).requires_grad_(true);
    temp = torch::tensor(0.1, torch::kDouble).requires_grad_(true);
  }
  void zero() {
    for (auto* t : {&w_img, &w_txt, &temp})
      if (t->grad().defined()) t->mutable_grad().zero_();
  }
  std::vector<torch::Tensor> grads() const {
    return {w_img.grad().clone(), w_txt.grad().clone(), temp.grad().clone()};
  }
};

struct Batch {
  torch::Tensor x_img, x_txt, ids, exclude_i2t, exclude_t2i, weight_t2i;
};

Batch make_batch(int64_t n) {
  torch::manual_seed(12);
  Batch bt;
  bt.x_img = torch::randn({n, 10}, torch::kDouble);
  bt.x_txt = torch::randn({n, 12}, torch::kDouble);
  // Pairs 1 and 6 share an image, across the simulated ranks.
  bt.ids = torch::arange(n, torch::kLong);
  bt.ids[6] = bt.ids[1];
  bt.exclude_i2t = torch::rand({n, n}) < 0.15;
  bt.exclude_t2i = torch::rand({n, n}) < 0.15;
  bt.weight_t2i = torch::rand({n, n}) + 0.5;
  return bt;
}

ItcInputs rank_inputs(const Encoder& enc, const Batch& bt, int64_t offset, int64_t b,
                      SoftTargets soft) {
  ItcInputs in;
  in.img = normed(bt.x_img.narrow(0, offset, b).mm(enc.w_img));
  in.txt = normed(bt.x_txt.narrow(0, offset, b).mm(enc.w_txt));
  {
    torch::NoGradGuard ng;  // the all-gather: values only
    in.img_all = normed(bt.x_img.mm(enc.w_img));
    in.txt_all = normed(bt.x_txt.mm(enc.w_txt));
  }
  in.offset = offset;
  in.temp = enc.temp;
  in.image_id = bt.ids.narrow(0, offset, b);
  in.image_id_all = bt.ids;
  in.exclude_i2t = bt.exclude_i2t.narrow(0, offset, b);
  in.exclude_t2i = bt.exclude_t2i.narrow(0, offset, b);
  in.weight_t2i = bt.weight_t2i.narrow(0, offset, b);
  in.soft = soft;
  return in;
}

// Gradients of R simulated ranks, averaged as the trainer averages them. With `exchange` each
// rank adds the cross-rank term built from the gathered gradients summed over ranks (the
// allreduce); without it, the plain gather-without-gradient of ALBEF.
std::vector<torch::Tensor> distributed_grads(Encoder& enc, const Batch& bt, int64_t ranks,
                                             SoftTargets soft, bool exchange, double* mean_loss) {
  const int64_t b = bt.ids.size(0) / ranks;
  std::vector<ItcInputs> ins;
  std::vector<ItcResult> res;
  ItcGatheredGrads summed;
  for (int64_t r = 0; r < ranks; ++r) {
    ins.push_back(rank_inputs(enc, bt, r * b, b, soft));
    ins.back().cross_rank_grad = exchange;
    res.push_back(itc_loss(ins.back()));
    if (exchange) {
      auto g = itc_gathered_grads(res.back());
      // This rank's own rows get nothing from its own loss (they come from the local tensors).
      EXPECT_EQ(g.img_all.narrow(0, r * b, b).abs().max().item<double>(), 0.0);
      summed.img_all = summed.img_all.defined() ? summed.img_all + g.img_all : g.img_all;
      summed.txt_all = summed.txt_all.defined() ? summed.txt_all + g.txt_all : g.txt_all;
    }
  }
  enc.zero();
  *mean_loss = 0;
  for (int64_t r = 0; r < ranks; ++r) {
    torch::Tensor total = res[r].loss;
    if (exchange) total = total + itc_cross_rank_term(ins[r], summed);
    total.backward();
    *mean_loss += scalar(res[r].loss) / ranks;
  }
  auto g = enc.grads();
  for (auto& t : g) t /= ranks;  // the trainer's gradient average over ranks
  return g;
}

std::vector<torch::Tensor> full_grads(Encoder& enc, const Batch& bt, SoftTargets soft,
                                      double* loss) {
  auto in = rank_inputs(enc, bt, 0, bt.ids.size(0), soft);
  enc.zero();
  auto r = itc_loss(in);
  r.loss.backward();
  *loss = scalar(r.loss);
  return enc.grads();
}

double max_abs_diff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, scalar((a[i] - b[i]).abs().max()));
  return m;
}

TEST(ItcLoss, CrossRankGradientEqualsSingleProcessGradient) {
  Encoder enc;
  const Batch bt = make_batch(8);
  for (SoftTargets soft : {SoftTargets::kNone, SoftTargets::kPseudo}) {
    double full_loss = 0;
    auto ref = full_grads(enc, bt, soft, &full_loss);
    for (int64_t ranks : {2, 4}) {
      double loss = 0;
      auto got = distributed_grads(enc, bt, ranks, soft, /*exchange=*/true, &loss);
      EXPECT_NEAR(loss, full_loss, 1e-10) << ranks << " ranks, soft " << to_string(soft);
      EXPECT_LT(max_abs_diff(got, ref), 1e-10) << ranks << " ranks, soft " << to_string(soft);
    }
  }
}

TEST(ItcLoss, GatherWithoutGradientLosesTheCrossRankTerms) {
  // Why the exchange exists: without it, the weight gradients differ noticeably (the other
  // ranks' anchors never push on this rank's embeddings); the temperature's does not, since it
  // enters every anchor's loss on that anchor's own rank.
  Encoder enc;
  const Batch bt = make_batch(8);
  double full_loss = 0, loss = 0;
  auto ref = full_grads(enc, bt, SoftTargets::kPseudo, &full_loss);
  auto got = distributed_grads(enc, bt, 2, SoftTargets::kPseudo, /*exchange=*/false, &loss);
  EXPECT_NEAR(loss, full_loss, 1e-10);
  EXPECT_GT(scalar((got[0] - ref[0]).abs().max()), 1e-3);
  EXPECT_LT(scalar((got[2] - ref[2]).abs().max()), 1e-10);
}

TEST(ItcLoss, CosineHelperMatchesTheLogits) {
  auto bt = make_batch(8);
  Encoder enc;
  auto in = rank_inputs(enc, bt, 4, 4, SoftTargets::kNone);
  auto c = itc_cosine(in);
  auto r = itc_loss(in);
  EXPECT_TRUE(torch::allclose(c.i2t / 0.1, r.sim_i2t, 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(c.t2i / 0.1, r.sim_t2i, 1e-5, 1e-5));
}

// ---------------------------------------------------------------------------------------------
// ITM

TEST(ItmLoss, NeverSamplesSameImageOrExcludedPairs) {
  const int64_t b = 8;
  auto ids = torch::tensor({0, 0, 1, 1, 1, 2, 3, 3}, torch::kLong);
  auto same = ids.unsqueeze(1).eq(ids.unsqueeze(0));
  torch::manual_seed(21);
  auto ex_i2t = torch::rand({b, b}) < 0.2;
  auto ex_t2i = torch::rand({b, b}) < 0.2;
  // Same-image pairs get the largest similarities: the most tempting wrong choices.
  auto sim_i2t = torch::randn({b, b}) + same.to(torch::kFloat) * 20;
  auto sim_t2i = torch::randn({b, b}) + same.to(torch::kFloat) * 20;
  // Rows that do have a valid candidate must always get one.
  auto has_i2t = (~same & ~ex_i2t).any(1), has_t2i = (~same & ~ex_t2i).any(1);
  auto gen = make_gen(5);
  for (auto mode : {ItmNegativeMode::kMultinomial, ItmNegativeMode::kArgmax}) {
    for (int draw = 0; draw < 500; ++draw) {
      auto neg = sample_itm_negatives(sim_i2t, sim_t2i, ids, ex_i2t, ex_t2i, mode, gen);
      auto check = [&](const torch::Tensor& j, const torch::Tensor& ex, const torch::Tensor& has) {
        ASSERT_TRUE(j.ge(0).eq(has).all().item<bool>());
        auto jj = j.clamp_min(0).unsqueeze(1);
        auto bad = (same.gather(1, jj) | ex.gather(1, jj)).squeeze(1) & j.ge(0);
        ASSERT_FALSE(bad.any().item<bool>()) << "a same-image or excluded pair was drawn";
      };
      check(neg.neg_image_for_text, ex_t2i, has_t2i);
      check(neg.neg_text_for_image, ex_i2t, has_i2t);
    }
  }
}

TEST(ItmLoss, RowsWithoutCandidatesGetMinusOne) {
  auto gen = make_gen(1);
  // Every pair shows the same image: ALBEF's "invalid multinomial distribution" case.
  auto sim = torch::randn({4, 4});
  auto neg = sample_itm_negatives(sim, sim, torch::zeros({4}, torch::kLong), {}, {},
                                  ItmNegativeMode::kMultinomial, gen);
  EXPECT_TRUE(neg.neg_image_for_text.eq(-1).all().item<bool>());
  EXPECT_TRUE(neg.neg_text_for_image.eq(-1).all().item<bool>());
  auto pairs = itm_pairs(neg);
  EXPECT_EQ(pairs.labels.size(0), 4);
  EXPECT_TRUE(pairs.labels.eq(1).all().item<bool>());

  // Row 0 loses its only candidates to exclusion, row 1 to NaN similarities, row 2 keeps one.
  auto ids = torch::arange(3, torch::kLong);
  auto ex = torch::zeros({3, 3}, torch::kBool);
  ex[0][1] = true;
  ex[0][2] = true;
  auto s = torch::randn({3, 3});
  s[1][0] = NAN;
  s[1][2] = INFINITY;
  s[2][0] = NAN;
  for (auto mode : {ItmNegativeMode::kMultinomial, ItmNegativeMode::kArgmax}) {
    auto n = sample_itm_negatives(s, s, ids, ex, ex, mode, gen);
    EXPECT_EQ(n.neg_image_for_text[0].item<int64_t>(), -1);
    EXPECT_EQ(n.neg_image_for_text[1].item<int64_t>(), -1);
    EXPECT_EQ(n.neg_image_for_text[2].item<int64_t>(), 1);
  }
}

TEST(ItmLoss, ArgmaxPicksTheHardestValidNegative) {
  auto ids = torch::tensor({0, 0, 1, 2}, torch::kLong);
  auto sim = torch::tensor({{9.0, 8.0, 1.0, 3.0},  // 1 shares the image: 3 is the hardest valid
                            {7.0, 9.0, 2.0, 0.5},
                            {0.0, 4.0, 9.0, 5.0},
                            {6.0, 1.0, 2.0, 9.0}});
  auto ex = torch::zeros({4, 4}, torch::kBool);
  ex[2][3] = true;  // 3 excluded for row 2: next is 1
  auto gen = make_gen(0);
  auto n = sample_itm_negatives(sim, sim, ids, ex, ex, ItmNegativeMode::kArgmax, gen);
  std::vector<int64_t> want = {3, 2, 1, 0};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(n.neg_text_for_image[i].item<int64_t>(), want[i]);
  EXPECT_TRUE(n.neg_text_for_image.equal(n.neg_image_for_text));
}

TEST(ItmLoss, MultinomialFrequenciesFollowTheSoftmax) {
  // 200 anchors, each with the same four candidates' logits (the rest excluded or the
  // anchor's own image), 100 draws each: 20,000 samples of one distribution.
  const int64_t b = 200;
  const std::vector<double> logits = {1.0, 0.0, -1.0, 0.5};
  auto ids = torch::arange(b, torch::kLong);
  auto sim = torch::full({b, b}, 9.0);  // would dominate if exclusion leaked
  auto ex = torch::ones({b, b}, torch::kBool);
  auto cols = (ids.unsqueeze(1) + 1 + torch::arange(4, torch::kLong)).remainder(b);
  sim.scatter_(1, cols, torch::tensor(logits, torch::kFloat).expand({b, 4}));
  ex.scatter_(1, cols, false);
  auto gen = make_gen(42);
  std::vector<double> counts(4, 0);
  const int rounds = 100;
  for (int d = 0; d < rounds; ++d) {
    auto n = sample_itm_negatives(sim, sim, ids, ex, ex, ItmNegativeMode::kMultinomial, gen);
    auto k = (n.neg_text_for_image - ids - 1).remainder(b);
    ASSERT_TRUE(k.lt(4).all().item<bool>());
    for (int64_t c = 0; c < 4; ++c) counts[c] += k.eq(c).sum().item<double>();
  }
  auto p = torch::softmax(torch::tensor(logits, torch::kDouble), 0);
  double chi2 = 0;
  for (int64_t c = 0; c < 4; ++c) {
    double expected = rounds * b * p[c].item<double>();
    chi2 += (counts[c] - expected) * (counts[c] - expected) / expected;
  }
  EXPECT_LT(chi2, 20.0);  // 3 degrees of freedom: P(chi2 > 20) ~ 2e-4
}

TEST(ItmLoss, SameSeedSameNegatives) {
  torch::manual_seed(3);
  auto sim = torch::randn({16, 16});
  auto ids = torch::arange(16, torch::kLong);
  auto g1 = make_gen(9), g2 = make_gen(9), g3 = make_gen(10);
  auto a = sample_itm_negatives(sim, sim.t(), ids, {}, {}, ItmNegativeMode::kMultinomial, g1);
  auto c = sample_itm_negatives(sim, sim.t(), ids, {}, {}, ItmNegativeMode::kMultinomial, g2);
  auto d = sample_itm_negatives(sim, sim.t(), ids, {}, {}, ItmNegativeMode::kMultinomial, g3);
  EXPECT_TRUE(a.neg_image_for_text.equal(c.neg_image_for_text));
  EXPECT_TRUE(a.neg_text_for_image.equal(c.neg_text_for_image));
  EXPECT_FALSE(a.neg_image_for_text.equal(d.neg_image_for_text) &&
               a.neg_text_for_image.equal(d.neg_text_for_image));
}

TEST(ItmLoss, PairsAndLoss) {
  ItmNegatives neg;
  neg.neg_image_for_text = torch::tensor({2, -1, 0}, torch::kLong);
  neg.neg_text_for_image = torch::tensor({1, 2, -1}, torch::kLong);
  auto p = itm_pairs(neg);
  EXPECT_TRUE(p.image_index.equal(torch::tensor({0, 1, 2, 2, 0, 0, 1}, torch::kLong)));
  EXPECT_TRUE(p.text_index.equal(torch::tensor({0, 1, 2, 0, 2, 1, 2}, torch::kLong)));
  EXPECT_TRUE(p.labels.equal(torch::tensor({1, 1, 1, 0, 0, 0, 0}, torch::kLong)));

  torch::manual_seed(4);
  auto logits = torch::randn({7, 2}, torch::requires_grad());
  auto loss = itm_loss(logits, p.labels);
  auto lp = torch::log_softmax(logits.detach(), 1);
  double want = 0;
  for (int i = 0; i < 7; ++i) want -= lp[i][p.labels[i].item<int64_t>()].item<double>();
  EXPECT_NEAR(scalar(loss), want / 7, 1e-6);
  auto empty = torch::zeros({0, 2}, torch::requires_grad());
  auto l0 = itm_loss(empty, torch::zeros({0}, torch::kLong));
  EXPECT_EQ(scalar(l0), 0.0);
  l0.backward();
  EXPECT_TRUE(empty.grad().defined());
}

// ---------------------------------------------------------------------------------------------
// ITM pairs drawn on the device (draw_itm_pairs: the static step's)

// Structure of the 3b pairs: positives, a negative image per text, a negative text per image.
void expect_pair_layout(const ItmPairs& p, int64_t b) {
  const auto ar = torch::arange(b, torch::kLong);
  ASSERT_EQ(p.image_index.size(0), 3 * b);
  EXPECT_TRUE(p.image_index.narrow(0, 0, b).equal(ar));
  EXPECT_TRUE(p.image_index.narrow(0, 2 * b, b).equal(ar));
  EXPECT_TRUE(p.text_index.narrow(0, 0, 2 * b).equal(torch::cat({ar, ar})));
  EXPECT_TRUE(p.labels.equal(
      torch::cat({torch::ones({b}, torch::kLong), torch::zeros({2 * b}, torch::kLong)})));
  EXPECT_TRUE(p.weight.narrow(0, 0, b).eq(1).all().item<bool>());
}

TEST(ItmDraws, NeverDrawSameImageOrExcludedAndWeighRowsWithoutCandidates) {
  const int64_t b = 8;
  auto ids = torch::tensor({0, 0, 1, 1, 1, 2, 3, 3}, torch::kLong);
  auto same = ids.unsqueeze(1).eq(ids.unsqueeze(0));
  torch::manual_seed(21);
  auto ex_i2t = torch::rand({b, b}) < 0.3;
  auto ex_t2i = torch::rand({b, b}) < 0.3;
  ex_t2i[6].fill_(true);  // text 6 has no candidate image left
  auto sim_i2t = torch::randn({b, b}) + same.to(torch::kFloat) * 20;
  auto sim_t2i = torch::randn({b, b}) + same.to(torch::kFloat) * 20;
  sim_i2t[2][5] = NAN;  // never drawn
  auto has_i2t = (~same & ~ex_i2t & sim_i2t.isfinite()).any(1);
  auto has_t2i = (~same & ~ex_t2i & sim_t2i.isfinite()).any(1);
  for (auto mode : {ItmNegativeMode::kMultinomial, ItmNegativeMode::kArgmax}) {
    for (int draw = 0; draw < 300; ++draw) {
      const ItmPairs p = draw_itm_pairs(sim_i2t, sim_t2i, ids, ex_i2t, ex_t2i, mode);
      expect_pair_layout(p, b);
      auto check = [&](const torch::Tensor& j, const torch::Tensor& w, const torch::Tensor& ex,
                       const torch::Tensor& sim, const torch::Tensor& has) {
        ASSERT_TRUE(w.eq(has.to(torch::kFloat)).all().item<bool>());
        const auto jj = j.unsqueeze(1);
        const auto bad =
            (same.gather(1, jj) | ex.gather(1, jj) | ~sim.gather(1, jj).isfinite()).squeeze(1) &
            has;
        ASSERT_FALSE(bad.any().item<bool>()) << "an invalid pair was drawn";
        ASSERT_TRUE(j.masked_select(~has).equal(torch::arange(b).masked_select(~has)))
            << "a row without candidates gets itself as its (weight 0) placeholder";
      };
      check(p.image_index.narrow(0, b, b), p.weight.narrow(0, b, b), ex_t2i, sim_t2i, has_t2i);
      check(p.text_index.narrow(0, 2 * b, b), p.weight.narrow(0, 2 * b, b), ex_i2t, sim_i2t,
            has_i2t);
    }
  }
}

// The exponential race draws ALBEF's distribution: softmax over the valid candidates.
TEST(ItmDraws, FrequenciesFollowTheSoftmax) {
  const int64_t b = 200;
  const std::vector<double> logits = {1.0, 0.0, -1.0, 0.5};
  auto ids = torch::arange(b, torch::kLong);
  auto sim = torch::full({b, b}, 9.0);  // would dominate if exclusion leaked
  auto ex = torch::ones({b, b}, torch::kBool);
  auto cols = (ids.unsqueeze(1) + 1 + torch::arange(4, torch::kLong)).remainder(b);
  sim.scatter_(1, cols, torch::tensor(logits, torch::kFloat).expand({b, 4}));
  ex.scatter_(1, cols, false);
  torch::manual_seed(42);
  std::vector<double> counts(4, 0);
  const int rounds = 100;
  for (int d = 0; d < rounds; ++d) {
    const ItmPairs p = draw_itm_pairs(sim, sim, ids, ex, ex, ItmNegativeMode::kMultinomial);
    auto k = (p.text_index.narrow(0, 2 * b, b) - ids - 1).remainder(b);
    ASSERT_TRUE(k.lt(4).all().item<bool>());
    for (int64_t c = 0; c < 4; ++c) counts[c] += k.eq(c).sum().item<double>();
  }
  auto prob = torch::softmax(torch::tensor(logits, torch::kDouble), 0);
  double chi2 = 0;
  for (int64_t c = 0; c < 4; ++c) {
    double expected = rounds * b * prob[c].item<double>();
    chi2 += (counts[c] - expected) * (counts[c] - expected) / expected;
  }
  EXPECT_LT(chi2, 20.0);  // 3 degrees of freedom: P(chi2 > 20) ~ 2e-4
}

// Argmax mode draws nothing: the same negatives as the host's sample_itm_negatives, and the
// weighted loss over the 3b pairs equals the host pairs' loss, whose rows without a candidate are
// dropped instead of weighted 0.
TEST(ItmDraws, ArgmaxMatchesTheHostPairsAndLoss) {
  const int64_t b = 6;
  auto ids = torch::tensor({0, 1, 2, 3, 4, 5}, torch::kLong);
  torch::manual_seed(8);
  auto sim_i2t = torch::randn({b, b}), sim_t2i = torch::randn({b, b});
  auto ex = torch::zeros({b, b}, torch::kBool);
  ex[4].fill_(true);  // row 4 has no candidate in either direction
  auto gen = make_gen(0);
  const auto host =
      sample_itm_negatives(sim_i2t, sim_t2i, ids, ex, ex, ItmNegativeMode::kArgmax, gen);
  const ItmPairs dev = draw_itm_pairs(sim_i2t, sim_t2i, ids, ex, ex, ItmNegativeMode::kArgmax);
  const ItmPairs hp = itm_pairs(host);
  const auto keep = dev.weight.gt(0);
  EXPECT_TRUE(dev.image_index.masked_select(keep).equal(hp.image_index));
  EXPECT_TRUE(dev.text_index.masked_select(keep).equal(hp.text_index));
  EXPECT_TRUE(dev.labels.masked_select(keep).equal(hp.labels));
  EXPECT_EQ(dev.weight.sum().item<double>(), static_cast<double>(hp.labels.size(0)));
  torch::manual_seed(9);
  auto logits = torch::randn({3 * b, 2}, torch::requires_grad());
  auto kept_logits = logits.index_select(0, keep.nonzero().squeeze(1));
  const auto weighted = itm_loss(logits, dev.labels, dev.weight);
  const auto dropped = itm_loss(kept_logits, hp.labels);
  EXPECT_NEAR(scalar(weighted), scalar(dropped), 1e-6);
  weighted.backward();
  EXPECT_EQ(logits.grad().index_select(0, (~keep).nonzero().squeeze(1)).abs().sum().item<float>(),
            0.0f)
      << "a placeholder pair must get no gradient";
}

// ---------------------------------------------------------------------------------------------
// MLM

constexpr int64_t kPad = 0, kCls = 101, kSep = 102, kMask = 103, kVocab = 1000;

// Captions [CLS] w ... w [SEP] [PAD]...: words in 200..999, lengths 5..len.
void make_captions(int64_t b, int64_t len, torch::Tensor* ids, torch::Tensor* attn) {
  torch::manual_seed(31);
  *ids = torch::randint(200, kVocab, {b, len}, torch::kLong);
  *attn = torch::ones({b, len}, torch::kLong);
  auto lengths = torch::randint(5, len + 1, {b}, torch::kLong);
  for (int64_t i = 0; i < b; ++i) {
    int64_t n = lengths[i].item<int64_t>();
    (*ids)[i][0] = kCls;
    (*ids)[i][n - 1] = kSep;
    (*ids)[i].narrow(0, n, len - n).fill_(kPad);
    (*attn)[i].narrow(0, n, len - n).fill_(0);
  }
}

TEST(MlmLoss, MaskingStatisticsFollowBert) {
  torch::Tensor ids, attn;
  make_captions(1024, 64, &ids, &attn);
  auto maskable = attn.ne(0) & ids.ne(kCls) & ids.ne(kSep);
  const double n_maskable = maskable.sum().item<double>();
  for (double p : {0.15, 0.5}) {
    auto gen = make_gen(7);
    auto m = mask_tokens(ids, attn, p, kVocab, kMask, {kPad, kCls, kSep}, gen);
    auto selected = m.labels.ne(-100);
    EXPECT_FALSE((selected & ~maskable).any().item<bool>()) << "a special or pad was selected";
    const double n_sel = selected.sum().item<double>();
    EXPECT_NEAR(n_sel / n_maskable, p, 0.01);
    const double n_mask = (selected & m.input_ids.eq(kMask)).sum().item<double>();
    const double n_same = (selected & m.input_ids.eq(ids)).sum().item<double>();
    const double n_rand = n_sel - n_mask - n_same;
    EXPECT_NEAR(n_mask / n_sel, 0.8, 0.02);
    EXPECT_NEAR(n_rand / n_sel, 0.1, 0.02);
    EXPECT_NEAR(n_same / n_sel, 0.1, 0.02);
    EXPECT_TRUE(m.input_ids.masked_select(~selected).equal(ids.masked_select(~selected)));
    EXPECT_TRUE(m.input_ids.ge(0).all().item<bool>() && m.input_ids.lt(kVocab).all().item<bool>());
    // positions / targets / labels agree.
    EXPECT_EQ(m.positions.size(0), static_cast<int64_t>(n_sel));
    EXPECT_TRUE(m.labels.reshape({-1}).index_select(0, m.positions).equal(m.targets));
    EXPECT_TRUE(ids.reshape({-1}).index_select(0, m.positions).equal(m.targets));
  }
}

TEST(MlmLoss, SameGeneratorStateSameMasks) {
  torch::Tensor ids, attn;
  make_captions(32, 20, &ids, &attn);
  auto g1 = make_gen(123), g2 = make_gen(123), g3 = make_gen(124);
  auto a = mask_tokens(ids, attn, 0.5, kVocab, kMask, {kPad, kCls, kSep}, g1);
  auto b = mask_tokens(ids, attn, 0.5, kVocab, kMask, {kPad, kCls, kSep}, g2);
  auto c = mask_tokens(ids, attn, 0.5, kVocab, kMask, {kPad, kCls, kSep}, g3);
  EXPECT_TRUE(a.input_ids.equal(b.input_ids));
  EXPECT_TRUE(a.positions.equal(b.positions));
  EXPECT_FALSE(a.input_ids.equal(c.input_ids));
  // A copy of the state replays the masks after the generator moved on (FALCON's reward).
  auto g4 = make_gen(5);
  auto saved = g4.clone();
  auto first = mask_tokens(ids, attn, 0.5, kVocab, kMask, {kPad, kCls, kSep}, g4);
  auto replay = mask_tokens(ids, attn, 0.5, kVocab, kMask, {kPad, kCls, kSep}, saved);
  EXPECT_TRUE(first.input_ids.equal(replay.input_ids));
}

TEST(MlmLoss, NothingSelectedGivesZeroLossWithGraph) {
  torch::Tensor ids, attn;
  make_captions(4, 10, &ids, &attn);
  auto gen = make_gen(1);
  auto m = mask_tokens(ids, attn, 0.0, kVocab, kMask, {kPad, kCls, kSep}, gen);
  EXPECT_EQ(m.positions.size(0), 0);
  EXPECT_TRUE(m.input_ids.equal(ids));
  auto hidden = torch::randn({4, 10, 6}, torch::requires_grad());
  auto head = torch::randn({6, kVocab});
  auto logits = gather_positions(hidden, m.positions).mm(head);
  auto loss = mlm_loss(logits, m.targets);
  EXPECT_EQ(scalar(loss), 0.0);
  loss.backward();
  EXPECT_EQ(hidden.grad().abs().sum().item<float>(), 0.0f);
}

TEST(MlmLoss, LossEqualsCrossEntropyByHand) {
  torch::Tensor ids, attn;
  make_captions(6, 12, &ids, &attn);
  auto gen = make_gen(2);
  auto m = mask_tokens(ids, attn, 0.5, kVocab, kMask, {kPad, kCls, kSep}, gen);
  ASSERT_GT(m.positions.size(0), 0);
  torch::manual_seed(3);
  auto hidden = torch::randn({6, 12, 8});
  auto head = torch::randn({8, kVocab}, torch::requires_grad());
  auto logits = gather_positions(hidden, m.positions).mm(head);
  // The rows of the flat [b*L] layout, computed without gather_positions.
  auto flat_logits = hidden.reshape({-1, 8}).mm(head.detach());
  auto lp = torch::log_softmax(flat_logits, 1);
  double want = 0;
  const int64_t count = m.positions.size(0);
  for (int64_t k = 0; k < count; ++k)
    want -= lp[m.positions[k].item<int64_t>()][m.targets[k].item<int64_t>()].item<double>();
  want /= count;
  auto loss = mlm_loss(logits, m.targets);
  EXPECT_NEAR(scalar(loss), want, 1e-4);
  // Same through torch's cross_entropy with ignore_index over all tokens (the unselected -100).
  EXPECT_NEAR(scalar(loss), scalar(F::cross_entropy(flat_logits, m.labels.reshape({-1}))), 1e-4);
  // ALBEF's distilled variant: (1 - a) * CE + a * soft cross-entropy.
  auto soft = torch::softmax(torch::randn({count, kVocab}), 1);
  double soft_ce = -scalar((soft * torch::log_softmax(logits.detach(), 1)).sum(1).mean());
  EXPECT_NEAR(scalar(mlm_loss(logits, m.targets, soft, 0.4)), 0.6 * want + 0.4 * soft_ce, 1e-4);
}

// The one-pass softmax cross-entropy on CPU float32 against libtorch's: the loss and its gradient
// at BERT's vocabulary, with logits spanning far beyond exp's range, a non-contiguous input, a
// NaN logit (the loss turns NaN, for the trainer's finite check) and targets outside the
// vocabulary (refused).
TEST(MlmLoss, FusedCrossEntropyMatchesLibtorch) {
  torch::manual_seed(4);
  const int64_t M = 9, V = 30522;
  auto base = torch::randn({M, V}) * 4.0;
  base[2] *= 40.0;      // exps far below float's range beside the row maximum
  base[5][77] = 300.0;  // one dominant logit
  const auto targets = torch::tensor(std::vector<int64_t>{0, 77, 30521, 5, 77, 77, 12, 9, 3});
  auto a = base.clone().requires_grad_(true), b = base.clone().requires_grad_(true);
  const auto got = mlm_loss(a, targets);
  const auto want = F::cross_entropy(b, targets);
  EXPECT_NEAR(scalar(got), scalar(want), 2e-5 * std::max(1.0, std::abs(scalar(want))));
  (got * 3.0).backward();
  (want * 3.0).backward();
  EXPECT_LT((a.grad() - b.grad()).abs().max().item<double>(), 1e-6);
  // A strided view: the same loss as its contiguous copy.
  const auto wide = torch::randn({M, 2 * V});
  EXPECT_NEAR(scalar(mlm_loss(wide.narrow(1, 0, V), targets)),
              scalar(F::cross_entropy(wide.narrow(1, 0, V).contiguous(), targets)), 1e-4);
  auto with_nan = base.clone();
  with_nan[3][10] = std::nan("");
  EXPECT_TRUE(std::isnan(scalar(mlm_loss(with_nan, targets))));
  EXPECT_THROW(mlm_loss(base, torch::full({M}, V, torch::kLong)), fnvlp::Error);
  EXPECT_THROW(mlm_loss(base, torch::full({M}, -100, torch::kLong)), fnvlp::Error);
}

// The fused decoder + cross-entropy against mlm_loss over torch::linear: loss and the gradients of
// h, W and b at BERT's vocabulary; W's gradient either returned (no buffer) or added into the
// bound buffer in place (as the trainer's flat gradients); M = 0, a NaN and bad targets.
TEST(MlmLoss, LinearCrossEntropyMatchesLinearThenCrossEntropy) {
  torch::manual_seed(5);
  const int64_t M = 11, K = 64, V = 30522;
  const auto h0 = torch::randn({M, K}), w0 = torch::randn({V, K}) * 0.2, b0 = torch::randn({V});
  auto targets = torch::randint(V, {M}, torch::kLong);
  targets[0] = V - 1;
  targets[3] = 0;
  auto leaves = [&] {
    return std::vector<torch::Tensor>{h0.clone().requires_grad_(true),
                                      w0.clone().requires_grad_(true),
                                      b0.clone().requires_grad_(true)};
  };
  auto want = leaves();
  const auto ref = mlm_loss(torch::linear(want[0], want[1], want[2]), targets);
  (ref * 2.5).backward();
  for (const bool bound : {false, true}) {
    SCOPED_TRACE(bound ? "W's gradient into its bound buffer" : "W's gradient returned");
    auto got = leaves();
    const auto prior = torch::randn({V, K});
    if (bound) got[1].mutable_grad() = prior.clone();
    const void* buffer = bound ? got[1].grad().data_ptr() : nullptr;
    const auto loss = linear_cross_entropy(got[0], got[1], got[2], targets);
    EXPECT_NEAR(scalar(loss), scalar(ref), 1e-5 * std::abs(scalar(ref)));
    (loss * 2.5).backward();
    if (bound) EXPECT_EQ(got[1].grad().data_ptr(), buffer);
    const auto dw = bound ? got[1].grad() - prior : got[1].grad();
    for (const auto& [g, w] :
         {std::pair{got[0].grad(), want[0].grad()}, std::pair{dw, want[1].grad()},
          std::pair{got[2].grad(), want[2].grad()}}) {
      ASSERT_TRUE(g.defined());
      const double scale = w.abs().max().item<double>();
      EXPECT_GT(scale, 0.0);
      EXPECT_LT((g - w).abs().max().item<double>() / scale, 1e-5);
    }
  }
  // Nothing selected: 0 with a graph, as mlm_loss.
  const auto none = linear_cross_entropy(torch::zeros({0, K}).requires_grad_(true), w0, b0,
                                         torch::zeros({0}, torch::kLong));
  EXPECT_EQ(scalar(none), 0.0);
  EXPECT_TRUE(none.requires_grad());
  auto with_nan = h0.clone();
  with_nan[4][1] = std::nan("");
  EXPECT_TRUE(std::isnan(scalar(linear_cross_entropy(with_nan, w0, b0, targets))));
  EXPECT_THROW(linear_cross_entropy(h0, w0, b0, torch::full({M}, V, torch::kLong)), fnvlp::Error);
  EXPECT_THROW(linear_cross_entropy(h0, w0, b0, torch::full({M}, -1, torch::kLong)), fnvlp::Error);
  EXPECT_THROW(linear_cross_entropy(h0, w0.narrow(1, 0, K / 2), b0, targets), fnvlp::Error);
}

// The static step's MLM rows: padded with distinct unselected positions whose targets are -100;
// the padded loss equals the unpadded one (and gives the pads no gradient), 0 with nothing
// selected; the row counts round up to the multiple.
TEST(MlmLoss, PaddedPositionsGiveTheSameLoss) {
  torch::Tensor ids, attn;
  make_captions(6, 12, &ids, &attn);
  auto gen = make_gen(2);
  const auto m = mask_tokens(ids, attn, 0.3, kVocab, kMask, {kPad, kCls, kSep}, gen, torch::kCPU);
  const int64_t M = m.positions.size(0);
  ASSERT_GT(M, 0);
  const int64_t rows = padded_rows(M, 16, 6 * 12);
  EXPECT_EQ(rows % 16, 0);
  EXPECT_GE(rows, M);
  const auto p = pad_positions(m, rows);
  ASSERT_EQ(p.positions.size(0), rows);
  EXPECT_TRUE(p.positions.narrow(0, 0, M).equal(m.positions));
  EXPECT_EQ(std::get<0>(at::_unique(p.positions)).size(0), rows) << "positions must be distinct";
  EXPECT_TRUE(p.targets.narrow(0, M, rows - M).eq(-100).all().item<bool>());
  EXPECT_TRUE(m.labels.reshape({-1})
                  .index_select(0, p.positions.narrow(0, M, rows - M))
                  .eq(-100)
                  .all()
                  .item<bool>())
      << "a pad must sit on an unselected position";
  torch::manual_seed(3);
  const auto hidden = torch::randn({6, 12, 8}, torch::requires_grad());
  const auto w = torch::randn({kVocab, 8}, torch::requires_grad()), bias = torch::randn({kVocab});
  const auto want = linear_cross_entropy(gather_positions(hidden, m.positions), w, bias, m.targets);
  const auto got =
      padded_linear_cross_entropy(gather_positions(hidden, p.positions), w, bias, p.targets);
  EXPECT_NEAR(scalar(got), scalar(want), 1e-5);
  const auto g_want = torch::autograd::grad({want}, {hidden, w});
  const auto g_got = torch::autograd::grad({got}, {hidden, w});
  for (size_t i = 0; i < 2; ++i)
    EXPECT_LT((g_got[i] - g_want[i]).abs().max().item<double>(), 1e-5) << "gradient " << i;
  // Nothing selected: all rows are pads, the loss is 0 (not NaN) and still has a graph.
  auto none_gen = make_gen(1);
  const auto none =
      mask_tokens(ids, attn, 0.0, kVocab, kMask, {kPad, kCls, kSep}, none_gen, torch::kCPU);
  const auto padded_none = pad_positions(none, padded_rows(0, 16, 72));
  const auto zero = padded_linear_cross_entropy(gather_positions(hidden, padded_none.positions), w,
                                                bias, padded_none.targets);
  EXPECT_EQ(scalar(zero), 0.0);
  // ALBEF's distilled MLM over padded rows (momentum distillation in the static step): the loss of
  // the selected rows alone, alpha read from a tensor.
  const auto logits = torch::linear(gather_positions(hidden, m.positions), w, bias);
  const auto soft = torch::softmax(torch::randn_like(logits), 1);
  const auto padded_logits = torch::linear(gather_positions(hidden, p.positions), w, bias);
  auto padded_soft = torch::softmax(torch::randn_like(padded_logits), 1);
  padded_soft.narrow(0, 0, M).copy_(soft);
  EXPECT_NEAR(scalar(padded_mlm_loss(padded_logits, p.targets, padded_soft, torch::full({}, 0.4f))),
              scalar(mlm_loss(logits, m.targets, soft, 0.4)), 1e-5);
  EXPECT_NEAR(scalar(padded_mlm_loss(padded_logits, p.targets)),
              scalar(mlm_loss(logits, m.targets)), 1e-5);
  EXPECT_TRUE(zero.requires_grad());
  EXPECT_EQ(padded_rows(0, 16, 72), 16);
  EXPECT_EQ(padded_rows(17, 16, 72), 32);
  EXPECT_EQ(padded_rows(70, 16, 72), 72);
  EXPECT_THROW(pad_positions(m, M - 1), fnvlp::Error);
}

}  // namespace
