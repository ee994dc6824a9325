// ALBEF momentum distillation: EMA update, the feature queue (ring order, wrap, ids, checkpoint
// round trip), the momentum ITC loss against an independent computation, same-image queue
// entries as positives, and the momentum config example.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>
#include <vector>

#include "fnvlp/core/config.hpp"
#include "fnvlp/core/error.hpp"
#include "fnvlp/loss/itc.hpp"
#include "fnvlp/model/albef.hpp"
#include "fnvlp/negatives/momentum.hpp"
#include "fnvlp/store/checkpoint.hpp"
#include "fnvlp/train/pretrain_config.hpp"

namespace fs = std::filesystem;
using namespace fnvlp::train;
using namespace fnvlp::negatives;
using fnvlp::store::load_module;
using fnvlp::store::save_module;
namespace F = torch::nn::functional;

namespace {

struct Net : torch::nn::Module {
  Net() {
    fc = register_module("fc", torch::nn::Linear(3, 2));
    bn = register_module("bn", torch::nn::BatchNorm1d(2));
  }
  torch::nn::Linear fc{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};

torch::Tensor normed(torch::Tensor x) { return F::normalize(x, F::NormalizeFuncOptions().dim(1)); }

TEST(Momentum, EmaUpdateMatchesHandComputation) {
  torch::manual_seed(3);
  Net online, mom;
  copy_module(mom, online);
  EXPECT_TRUE(torch::equal(mom.fc->weight, online.fc->weight));
  const double m = 0.9;
  std::vector<float> w0(mom.fc->weight.data_ptr<float>(), mom.fc->weight.data_ptr<float>() + 6);
  // Two online updates, each followed by the EMA: theta_m = m theta_m + (1 - m) theta.
  std::vector<double> want(w0.begin(), w0.end());
  for (int k = 1; k <= 2; ++k) {
    torch::NoGradGuard no_grad;
    online.fc->weight.add_(0.5 * k);
    online.bn->running_mean.fill_(2.0 * k);
    online.bn->num_batches_tracked.fill_(7 * k);
    ema_update(mom, online, m);
    for (int i = 0; i < 6; ++i)
      want[i] = m * want[i] + (1 - m) * online.fc->weight.view(-1)[i].item<double>();
  }
  for (int i = 0; i < 6; ++i)
    EXPECT_NEAR(mom.fc->weight.view(-1)[i].item<double>(), want[i], 1e-6) << i;
  // Float buffers average too (0.9 * (0.1 * 2) + 0.1 * 4), integer ones follow the online model.
  EXPECT_NEAR(mom.bn->running_mean[0].item<double>(), 0.9 * 0.2 + 0.1 * 4.0, 1e-6);
  EXPECT_EQ(mom.bn->num_batches_tracked.item<int64_t>(), 14);
  EXPECT_FALSE(mom.fc->weight.grad().defined());
  // m = 1 freezes, m = 0 copies.
  const auto before = mom.fc->weight.clone();
  ema_update(mom, online, 1.0);
  EXPECT_TRUE(torch::equal(mom.fc->weight, before));
  ema_update(mom, online, 0.0);
  EXPECT_TRUE(torch::equal(mom.fc->weight, online.fc->weight));
  EXPECT_THROW(ema_update(mom, online, 1.5), fnvlp::Error);
  torch::nn::Linear other(3, 2);
  EXPECT_THROW(ema_update(mom, *other, 0.5), fnvlp::Error);
}

// Rows whose features and ids encode the entry number e: img = (e, -e), image_id = 100 + e.
struct Rows {
  torch::Tensor img, txt, image_id, pair_id;
};
Rows rows(int64_t first, int64_t n) {
  Rows r;
  const auto e = torch::arange(first, first + n, torch::kFloat);
  r.img = torch::stack({e, -e}, 1);
  r.txt = r.img * 10;
  r.image_id = torch::arange(first, first + n, torch::kLong) + 100;
  r.pair_id = torch::arange(first, first + n, torch::kLong) + 1000;
  return r;
}
void push(FeatureQueue& q, const Rows& r) { q->enqueue(r.img, r.txt, r.image_id, r.pair_id); }
std::vector<int64_t> entries(const FeatureQueue& q) {  // entry number per stored row
  std::vector<int64_t> out;
  for (int64_t i = 0; i < q->fill(); ++i) {
    const int64_t e = q->img()[i][0].item<int64_t>();
    EXPECT_EQ(q->image_id()[i].item<int64_t>(), 100 + e);
    EXPECT_EQ(q->pair_id()[i].item<int64_t>(), 1000 + e);
    EXPECT_EQ(q->txt()[i][1].item<float>(), -10.0f * static_cast<float>(e));
    out.push_back(e);
  }
  return out;
}

TEST(Momentum, QueueRingOrderWrapAndIds) {
  FeatureQueue q(5, 2);
  EXPECT_EQ(q->fill(), 0);
  EXPECT_EQ(q->img().size(0), 0);  // starts empty: no keys at all
  push(q, rows(0, 2));
  EXPECT_EQ(entries(q), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(q->ptr(), 2);
  push(q, rows(2, 2));
  EXPECT_EQ(entries(q), (std::vector<int64_t>{0, 1, 2, 3}));
  push(q, rows(4, 2));  // wraps: entry 5 overwrites the oldest (0)
  EXPECT_EQ(q->fill(), 5);
  EXPECT_EQ(q->ptr(), 1);
  EXPECT_EQ(entries(q), (std::vector<int64_t>{5, 1, 2, 3, 4}));
  push(q, rows(6, 7));  // more than the capacity: the last 5 where one-by-one would put them
  EXPECT_EQ(q->ptr(), (1 + 7) % 5);
  EXPECT_EQ(entries(q), (std::vector<int64_t>{10, 11, 12, 8, 9}));
  q->check(5, 2);
  FeatureQueue none(0, 2);  // queue_size 0: momentum distillation on the batch alone
  push(none, rows(0, 3));
  EXPECT_EQ(none->fill(), 0);
  EXPECT_THROW(q->enqueue(torch::zeros({2, 3}), torch::zeros({2, 3}),
                          torch::zeros({2}, torch::kLong), torch::zeros({2}, torch::kLong)),
               fnvlp::Error);
}

// The static step's enqueue: the pointer and fill on the device, a 0 flag changes nothing, a 1
// flag does what enqueue does (wrap, more rows than the capacity); the valid rows are the filled.
TEST(Momentum, FlaggedEnqueueIsTheEnqueueOrNothing) {
  FeatureQueue a(5, 2), b(5, 2);
  const auto taken = torch::ones({}), skipped = torch::zeros({});
  for (const auto& [first, n] :
       std::vector<std::pair<int64_t, int64_t>>{{0, 2}, {2, 2}, {4, 2}, {6, 7}}) {
    const Rows r = rows(first, n);
    b->enqueue_flagged(r.img, r.txt, r.image_id, r.pair_id, skipped);
    EXPECT_EQ(b->fill(), a->fill()) << "a skipped step moved the queue";
    push(a, r);
    b->enqueue_flagged(r.img, r.txt, r.image_id, r.pair_id, taken);
    EXPECT_EQ(entries(b), entries(a));
    EXPECT_EQ(b->ptr(), a->ptr());
    EXPECT_TRUE(torch::equal(b->valid(), torch::arange(5) < a->fill()));
  }
  b->check(5, 2);
}

// The flagged EMA: the EMA where the flag is 1, the momentum model bit for bit where it is 0.
TEST(Momentum, FlaggedEmaIsTheEmaOrNothing) {
  torch::manual_seed(4);
  Net online, mom, ref;
  copy_module(mom, online);
  copy_module(ref, online);
  {
    torch::NoGradGuard no_grad;
    online.fc->weight.add_(0.3);
    online.bn->num_batches_tracked.fill_(5);
  }
  const auto before = mom.fc->weight.clone();
  ema_update(mom, online, 0.9, torch::zeros({}));
  EXPECT_TRUE(torch::equal(mom.fc->weight, before));
  EXPECT_EQ(mom.bn->num_batches_tracked.item<int64_t>(), 0);
  ema_update(mom, online, 0.9, torch::ones({}));
  ema_update(ref, online, 0.9);
  EXPECT_TRUE(torch::allclose(mom.fc->weight, ref.fc->weight, 0, 1e-7));
  EXPECT_EQ(mom.bn->num_batches_tracked.item<int64_t>(), 5);
}

// ptr and fill are kept on the host between uses (no read of a GPU buffer per step); a write of
// the state buffer from outside, in place or by new storage (a checkpoint load, a move), is seen
// at the next use.
TEST(Momentum, QueueSeesItsStateWrittenFromOutside) {
  FeatureQueue q(4, 2);
  push(q, rows(0, 3));
  EXPECT_EQ(q->ptr(), 3);
  EXPECT_EQ(q->fill(), 3);
  torch::Tensor state = q->named_buffers()["state"];
  torch::NoGradGuard no_grad;
  state.copy_(torch::tensor({1, 4}, torch::kLong));
  EXPECT_EQ(q->ptr(), 1);
  EXPECT_EQ(q->fill(), 4);
  state.set_data(torch::tensor({2, 4}, torch::kLong));
  EXPECT_EQ(q->ptr(), 2);
  push(q, rows(3, 1));
  EXPECT_EQ(q->ptr(), 3);
  EXPECT_EQ(q->fill(), 4);
  EXPECT_TRUE(torch::equal(state, torch::tensor({3, 4}, torch::kLong)));
  // A write no counter sees (a raw pointer; a load onto a GPU that gets the old block back):
  // check(), run after every load, reads the state afresh.
  state.data_ptr<int64_t>()[0] = 1;
  q->check(4, 2);
  EXPECT_EQ(q->ptr(), 1);
}

TEST(Momentum, QueueCheckpointRoundTrip) {
  const std::string dir = ::testing::TempDir() + "/fnvlp_momentum_queue";
  fs::remove_all(dir);
  fs::create_directories(dir);
  FeatureQueue q(4, 2);
  push(q, rows(0, 3));
  save_module(dir, "momentum_queue", *q);
  FeatureQueue back(4, 2);
  load_module(dir, "momentum_queue", *back);
  back->check(4, 2);
  EXPECT_EQ(back->fill(), 3);
  EXPECT_EQ(back->ptr(), 3);
  EXPECT_EQ(entries(back), (std::vector<int64_t>{0, 1, 2}));
  push(q, rows(3, 2));  // both continue identically
  push(back, rows(3, 2));
  EXPECT_EQ(entries(back), entries(q));
  FeatureQueue other(6, 2);  // another queue_size: the loaded state does not fit
  load_module(dir, "momentum_queue", *other);
  EXPECT_THROW(other->check(6, 2), fnvlp::Error);
}

// The momentum ITC loss of one rank (offset 2 of a gathered batch of 4) with a queue of 3,
// computed independently from the equations of ALBEF §3.3 in double precision.
struct Case {
  torch::Tensor img, txt, img_m_all, txt_m_all, q_img, q_txt, ids_all, q_ids;
  int64_t offset = 2, b = 2;
  double temp = 0.1, alpha = 0.4;
};
Case make_case(uint64_t seed) {
  torch::manual_seed(seed);
  Case c;
  c.img = normed(torch::randn({2, 5}));
  c.txt = normed(torch::randn({2, 5}));
  c.img_m_all = normed(torch::randn({4, 5}));
  c.txt_m_all = normed(torch::randn({4, 5}));
  c.q_img = normed(torch::randn({3, 5}));
  c.q_txt = normed(torch::randn({3, 5}));
  c.ids_all = torch::tensor({0, 1, 2, 3}, torch::kLong);
  c.q_ids = torch::tensor({7, 3, 8}, torch::kLong);  // queue row 1 shows anchor 1's image (3)
  return c;
}
fnvlp::loss::MomentumItc inputs(const Case& c) {
  fnvlp::loss::MomentumItc m;
  m.img = c.img;
  m.txt = c.txt;
  m.img_m = c.img_m_all.narrow(0, c.offset, c.b);
  m.txt_m = c.txt_m_all.narrow(0, c.offset, c.b);
  m.img_m_all = c.img_m_all;
  m.txt_m_all = c.txt_m_all;
  m.offset = c.offset;
  m.image_id = c.ids_all.narrow(0, c.offset, c.b);
  m.image_id_all = c.ids_all;
  m.queue_img = c.q_img;
  m.queue_txt = c.q_txt;
  m.queue_image_id = c.q_ids;
  m.temp = torch::tensor(c.temp);
  m.alpha = c.alpha;
  return m;
}

double dot_d(const torch::Tensor& a, const torch::Tensor& b) {
  double s = 0;
  for (int64_t k = 0; k < a.size(0); ++k) s += a[k].item<double>() * b[k].item<double>();
  return s;
}

// One direction: anchors a (online) and am (momentum) against keys [gathered ; queue].
double reference(const torch::Tensor& a, const torch::Tensor& am, const torch::Tensor& keys,
                 const std::vector<int64_t>& key_ids, const std::vector<int64_t>& anchor_ids,
                 double temp, double alpha) {
  const int64_t n = keys.size(0);
  double total = 0;
  for (int64_t i = 0; i < a.size(0); ++i) {
    std::vector<double> z(n), zm(n);
    double mz = -1e300, mzm = -1e300;
    for (int64_t j = 0; j < n; ++j) {
      z[j] = dot_d(a[i], keys[j]) / temp;
      zm[j] = dot_d(am[i], keys[j]) / temp;
      mz = std::max(mz, z[j]);
      mzm = std::max(mzm, zm[j]);
    }
    double se = 0, sem = 0, npos = 0;
    for (int64_t j = 0; j < n; ++j) {
      se += std::exp(z[j] - mz);
      sem += std::exp(zm[j] - mzm);
      npos += key_ids[j] == anchor_ids[i];
    }
    for (int64_t j = 0; j < n; ++j) {
      const double hard = (key_ids[j] == anchor_ids[i]) / npos;
      const double soft = std::exp(zm[j] - mzm) / sem;
      const double y = (1 - alpha) * hard + alpha * soft;
      total -= y * (z[j] - mz - std::log(se));
    }
  }
  return total / static_cast<double>(a.size(0));
}

TEST(MomentumItc, LossMatchesAnIndependentComputation) {
  const Case c = make_case(11);
  const auto in = fnvlp::loss::momentum_itc_inputs(inputs(c));
  EXPECT_TRUE(in.momentum_keys);
  EXPECT_FALSE(in.cross_rank_grad);
  EXPECT_EQ(in.img_all.size(0), 4 + 3);
  const auto r = fnvlp::loss::itc_loss(in);
  const std::vector<int64_t> key_ids = {0, 1, 2, 3, 7, 3, 8}, anchor_ids = {2, 3};
  const auto keys_img = torch::cat({c.img_m_all, c.q_img}),
             keys_txt = torch::cat({c.txt_m_all, c.q_txt});
  const double li =
      reference(c.img, c.img_m_all.narrow(0, 2, 2), keys_txt, key_ids, anchor_ids, c.temp, c.alpha);
  const double lt =
      reference(c.txt, c.txt_m_all.narrow(0, 2, 2), keys_img, key_ids, anchor_ids, c.temp, c.alpha);
  EXPECT_NEAR(r.loss_i2t.item<double>(), li, 1e-5);
  EXPECT_NEAR(r.loss_t2i.item<double>(), lt, 1e-5);
  // The online logits are against the momentum keys, not the online features (ALBEF).
  EXPECT_TRUE(torch::allclose(r.sim_i2t, c.img.mm(keys_txt.t()) / c.temp));
  // Empty queue: the keys are the gathered momentum features alone.
  auto m = inputs(c);
  m.queue_img = torch::zeros({0, 5});
  m.queue_txt = torch::zeros({0, 5});
  m.queue_image_id = torch::zeros({0}, torch::kLong);
  const auto r0 = fnvlp::loss::itc_loss(fnvlp::loss::momentum_itc_inputs(m));
  EXPECT_NEAR(r0.loss_i2t.item<double>(),
              reference(c.img, c.img_m_all.narrow(0, 2, 2), c.txt_m_all, {0, 1, 2, 3}, anchor_ids,
                        c.temp, c.alpha),
              1e-5);
}

// The static step passes the whole queue with its filled rows marked: the same loss as the
// filled rows alone (the empty rows, image_id -1, leave the denominators and the soft targets).
TEST(MomentumItc, WholeQueueWithValidRowsEqualsTheFilledRows) {
  const Case c = make_case(15);
  const auto filled = fnvlp::loss::itc_loss(fnvlp::loss::momentum_itc_inputs(inputs(c)));
  auto m = inputs(c);
  const int64_t q = c.q_img.size(0), extra = 4;
  m.queue_img = torch::cat({c.q_img, torch::randn({extra, c.q_img.size(1)})});
  m.queue_txt = torch::cat({c.q_txt, torch::randn({extra, c.q_txt.size(1)})});
  m.queue_image_id = torch::cat({c.q_ids, torch::full({extra}, -1, torch::kLong)});
  m.queue_valid = torch::arange(q + extra) < q;
  const auto whole = fnvlp::loss::itc_loss(fnvlp::loss::momentum_itc_inputs(m));
  EXPECT_NEAR(whole.loss_i2t.item<double>(), filled.loss_i2t.item<double>(), 1e-6);
  EXPECT_NEAR(whole.loss_t2i.item<double>(), filled.loss_t2i.item<double>(), 1e-6);
  // A fresh queue, nothing written yet (image_id -1 everywhere): the gathered features alone.
  m.queue_valid = torch::zeros({q + extra}, torch::kBool);
  m.queue_image_id = torch::full({q + extra}, -1, torch::kLong);
  auto none = inputs(c);
  none.queue_img = torch::zeros({0, 5});
  none.queue_txt = torch::zeros({0, 5});
  none.queue_image_id = torch::zeros({0}, torch::kLong);
  EXPECT_NEAR(fnvlp::loss::itc_loss(fnvlp::loss::momentum_itc_inputs(m)).loss.item<double>(),
              fnvlp::loss::itc_loss(fnvlp::loss::momentum_itc_inputs(none)).loss.item<double>(),
              1e-6);
}

TEST(MomentumItc, OnlyTheOnlineAnchorsGetGradient) {
  Case c = make_case(12);
  c.img = c.img.clone().requires_grad_(true);
  c.txt = c.txt.clone().requires_grad_(true);
  c.img_m_all = c.img_m_all.clone().requires_grad_(true);  // must be treated as constants
  auto m = inputs(c);
  m.temp = torch::tensor(c.temp).requires_grad_(true);  // the learned temperature
  auto in = fnvlp::loss::momentum_itc_inputs(m);
  fnvlp::loss::itc_loss(in).loss.backward();
  EXPECT_TRUE(c.img.grad().defined() && c.img.grad().abs().sum().item<double>() > 0);
  EXPECT_TRUE(c.txt.grad().defined() && c.txt.grad().abs().sum().item<double>() > 0);
  EXPECT_TRUE(m.temp.grad().defined());
  EXPECT_FALSE(c.img_m_all.grad().defined());
  in.cross_rank_grad = true;  // nothing to exchange: refused
  EXPECT_THROW(fnvlp::loss::itc_loss(in), fnvlp::Error);
}

TEST(MomentumItc, SameImageQueueEntriesAreNeverNegatives) {
  const Case c = make_case(13);
  auto m = inputs(c);
  m.alpha = 0;  // hard targets only: the positive set alone decides the loss
  const auto r = fnvlp::loss::itc_loss(fnvlp::loss::momentum_itc_inputs(m));
  // Anchor 1 (image 3): its own gathered column 3 and queue row 1 (column 5) are positives.
  EXPECT_TRUE(r.positive[1][3].item<bool>());
  EXPECT_TRUE(r.positive[1][5].item<bool>());
  EXPECT_FALSE(r.positive[0][5].item<bool>());
  EXPECT_EQ(r.extra_positives.item<int64_t>(), 1);
  const auto keys_txt = torch::cat({c.txt_m_all, c.q_txt});
  const auto z = c.img.mm(keys_txt.t()) / c.temp;
  const auto logp = torch::log_softmax(z, 1);
  const double want =
      -(logp[0][2].item<double>() + 0.5 * (logp[1][3].item<double>() + logp[1][5].item<double>())) /
      2;
  const double as_negative = -(logp[0][2].item<double>() + logp[1][3].item<double>()) / 2;
  EXPECT_NEAR(r.loss_i2t.item<double>(), want, 1e-5);
  EXPECT_GT(std::abs(want - as_negative), 1e-3);  // the case distinguishes the two
}

// The data-parallel identity behind the trainer's plain gradient averaging in momentum mode, in
// double precision: the gradient of the loss of the whole batch of 6 equals the mean of the
// gradients of its two halves (two "ranks" with offsets 0 and 3), each contrasted against the
// same keys (all 6 momentum features + a queue). tests/mpi checks the same through MPI in float.
TEST(MomentumItc, BatchHalvesAddUpToTheWholeBatchInDouble) {
  fnvlp::model::ModelConfig cfg;
  cfg.image_size = 16;
  cfg.patch_size = 8;
  cfg.vision_width = cfg.text_width = 32;
  cfg.vision_heads = cfg.text_heads = 2;
  cfg.vision_layers = cfg.text_layers = 1;
  cfg.embed_dim = 16;
  fnvlp::model::Albef online(cfg, 1), mom(cfg, 2);
  online->to(torch::kDouble);
  mom->to(torch::kDouble);
  torch::manual_seed(4);
  const int64_t n = 6, len = 8;
  const auto images = torch::randn({n, 3, 16, 16}, torch::kDouble);
  const auto ids = torch::randint(1000, 2000, {n, len}, torch::kLong);
  const auto mask = torch::ones({n, len}, torch::kLong);
  const auto image_id = torch::tensor({0, 0, 1, 1, 2, 3}, torch::kLong);
  const auto q_img = normed(torch::randn({4, 16}, torch::kDouble));
  const auto q_txt = normed(torch::randn({4, 16}, torch::kDouble));
  const auto q_ids = torch::tensor({1, 9, 3, 0}, torch::kLong);
  torch::Tensor img_m_all, txt_m_all;
  {
    torch::NoGradGuard no_grad;
    img_m_all = mom->image_embed(mom->encode_image(images));
    txt_m_all = mom->text_embed(mom->encode_text(ids, mask));
  }
  auto grad_of = [&](int64_t first, int64_t b) {
    online->zero_grad();
    const auto rows = torch::indexing::Slice(first, first + b);
    fnvlp::loss::MomentumItc m;
    m.img = online->image_embed(online->encode_image(images.index({rows})));
    m.txt = online->text_embed(online->encode_text(ids.index({rows}), mask.index({rows})));
    m.img_m = img_m_all.index({rows});
    m.txt_m = txt_m_all.index({rows});
    m.img_m_all = img_m_all;
    m.txt_m_all = txt_m_all;
    m.offset = first;
    m.image_id = image_id.index({rows});
    m.image_id_all = image_id;
    m.queue_img = q_img;
    m.queue_txt = q_txt;
    m.queue_image_id = q_ids;
    m.temp = online->temp();
    m.alpha = 0.4;
    fnvlp::loss::itc_loss(fnvlp::loss::momentum_itc_inputs(m)).loss.backward();
    std::vector<torch::Tensor> g;
    for (auto& p : online->parameters())
      g.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
    return g;
  };
  const auto whole = grad_of(0, n), first = grad_of(0, 3), second = grad_of(3, 3);
  double worst = 0, largest = 0;
  for (size_t i = 0; i < whole.size(); ++i) {
    worst = std::max(worst, (whole[i] - 0.5 * (first[i] + second[i])).abs().max().item<double>());
    largest = std::max(largest, whole[i].abs().max().item<double>());
  }
  EXPECT_GT(largest, 1e-3);
  EXPECT_LT(worst, 1e-9 * largest);
}

TEST(MomentumConfig, ExampleConfigLoadsWithAlbefValues) {
  const std::string dir = std::string(FNVLP_SOURCE_DIR) + "/jobs/configs/";
  PretrainConfig cfg;
  fnvlp::config::from_yaml(YAML::LoadFile(dir + "albef_momentum.yaml"), cfg);
  EXPECT_EQ(cfg.loss.soft_targets, fnvlp::negatives::SoftTargetsKind::kMomentum);
  EXPECT_EQ(cfg.loss.momentum, 0.995);
  EXPECT_EQ(cfg.loss.queue_size, 65536);
  EXPECT_EQ(cfg.loss.soft_weight, 0.4);
  EXPECT_EQ(cfg.negatives.method, fnvlp::negatives::NegativesKind::kNone);
  cfg.model.validate();
  // Its model is the base preset.
  fnvlp::model::ModelConfig base;
  fnvlp::config::from_yaml(YAML::LoadFile(dir + "base.yaml")["model"], base);
  EXPECT_EQ(cfg.model.vision_width, base.vision_width);
  EXPECT_EQ(cfg.model.text_layers, base.text_layers);
  EXPECT_EQ(cfg.model.embed_dim, base.embed_dim);
  EXPECT_EQ(cfg.model.image_size, base.image_size);
}

}  // namespace
