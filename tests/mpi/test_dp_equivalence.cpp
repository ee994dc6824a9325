// Gradient equivalence of data parallelism (ctest runs it at np 1, 2, 4): one step of the tiny
// model's ITC loss on R ranks with b pairs each, gradients averaged through Comm, equals the
// single-process gradient on the concatenated batch of R*b pairs; the same with ALBEF momentum
// distillation (momentum model, queue) over several steps.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "fnvlp/comm/flat_gradients.hpp"
#include "fnvlp/comm/tensors.hpp"
#include "fnvlp/loss/itc.hpp"
#include "fnvlp/model/albef.hpp"
#include "fnvlp/negatives/momentum.hpp"

using fnvlp::Comm;

namespace {

// The average over ranks one tensor at a time (the trainer averages one flat buffer).
void average_each(const fnvlp::Comm& comm, const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  for (const auto& p : params) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    // The embedding's gradient is sparse on the CPU: averaged densely.
    auto g = p.grad().is_sparse() ? p.grad().to_dense() : p.grad().contiguous();
    comm.allreduce(g.data_ptr<float>(), static_cast<size_t>(g.numel()), fnvlp::ReduceOp::kSum);
    p.mutable_grad() = g.mul_(1.0f / static_cast<float>(comm.size()));
  }
}

fnvlp::model::ModelConfig tiny() {
  fnvlp::model::ModelConfig c;  // the defaults are the tiny preset
  c.image_size = 32;
  c.patch_size = 8;
  c.vision_width = c.text_width = 64;
  c.vision_heads = c.text_heads = 2;
  c.embed_dim = 32;
  return c;
}

struct GlobalBatch {
  torch::Tensor images, ids, mask, image_id;
};

GlobalBatch make_batch(int64_t n, uint64_t seed = 1234) {
  torch::manual_seed(seed);
  GlobalBatch g;
  g.images = torch::randn({n, 3, 32, 32});
  g.ids = torch::randint(1000, 2000, {n, 12}, torch::kLong);
  g.ids.select(1, 0).fill_(101);
  g.mask = torch::ones({n, 12}, torch::kLong);
  for (int64_t i = 0; i < n; ++i) g.mask[i].slice(0, 6 + i % 6).zero_();  // ragged lengths
  g.ids = g.ids * g.mask;
  g.image_id = torch::arange(n, torch::kLong).div(2, "floor");  // pairs share images two by two
  return g;
}

std::vector<torch::Tensor> grads(fnvlp::model::Albef& m) {
  std::vector<torch::Tensor> out;
  for (auto& p : m->parameters())
    out.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
  return out;
}

TEST(DataParallel, ItcGradientOfRanksEqualsTheConcatenatedBatch) {
  Comm comm;
  const int64_t b = 3, n = b * comm.size();
  const GlobalBatch g = make_batch(n);

  torch::manual_seed(7);
  fnvlp::model::Albef ref(tiny());
  torch::manual_seed(7);
  fnvlp::model::Albef dp(tiny());

  // Reference: one process, the whole batch.
  {
    fnvlp::loss::ItcInputs in;
    in.img = ref->image_embed(ref->encode_image(g.images));
    in.txt = ref->text_embed(ref->encode_text(g.ids, g.mask));
    in.img_all = in.img.detach();
    in.txt_all = in.txt.detach();
    in.temp = ref->temp();
    in.image_id = in.image_id_all = g.image_id;
    fnvlp::loss::itc_loss(in).loss.backward();
  }
  // Data parallel: this rank's slice, gathered embeddings, cross-rank term, averaged gradients.
  {
    const auto rows = torch::indexing::Slice(comm.rank() * b, (comm.rank() + 1) * b);
    fnvlp::loss::ItcInputs in;
    in.img = dp->image_embed(dp->encode_image(g.images.index({rows})));
    in.txt = dp->text_embed(dp->encode_text(g.ids.index({rows}), g.mask.index({rows})));
    in.img_all = fnvlp::allgather_rows(comm, in.img, &in.offset);
    in.txt_all = fnvlp::allgather_rows(comm, in.txt, nullptr);
    in.temp = dp->temp();
    in.image_id = g.image_id.index({rows});
    in.image_id_all = g.image_id;
    in.cross_rank_grad = comm.size() > 1;
    const auto res = fnvlp::loss::itc_loss(in);
    torch::Tensor total = res.loss;
    if (in.cross_rank_grad) {
      auto gg = fnvlp::loss::itc_gathered_grads(res);
      for (torch::Tensor* t : {&gg.img_all, &gg.txt_all}) {
        *t = t->contiguous();
        comm.allreduce(t->data_ptr<float>(), static_cast<size_t>(t->numel()),
                       fnvlp::ReduceOp::kSum);
      }
      total = total + fnvlp::loss::itc_cross_rank_term(in, gg);
    }
    total.backward();
    average_each(comm, dp->parameters());
  }
  const auto gr = grads(ref), gd = grads(dp);
  ASSERT_EQ(gr.size(), gd.size());
  double worst = 0;
  for (size_t i = 0; i < gr.size(); ++i) {
    const double scale = std::max(1e-6, gr[i].abs().max().item<double>());
    worst = std::max(worst, (gr[i] - gd[i]).abs().max().item<double>() / scale);
  }
  EXPECT_LT(worst, 1e-4) << "largest relative gradient difference over " << gr.size() << " tensors";
}

}  // namespace

namespace {

// Largest difference of a tensor relative to its own scale, that scale floored at 1e-3 of the
// largest over all tensors: tensors with gradients a thousand times smaller than the rest
// (LayerNorm biases here, ~1e-5) carry float32 summation noise of ~1e-8 (measured), far above 1e-4
// of their own scale, while a real error is of the order of the gradient itself.
double worst_relative(std::vector<torch::Tensor> a, std::vector<torch::Tensor> b) {
  EXPECT_EQ(a.size(), b.size());
  // libtorch 2.x leaves the word embeddings' gradient sparse where 1.13 made it dense.
  for (auto* v : {&a, &b})
    for (auto& t : *v)
      if (t.is_sparse()) t = t.to_dense();
  double global = 0, worst = 0;
  for (const auto& t : a) global = std::max(global, t.abs().max().item<double>());
  for (size_t i = 0; i < a.size(); ++i) {
    const double scale = std::max({1e-6, 1e-3 * global, a[i].abs().max().item<double>()});
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>() / scale);
  }
  return worst;
}

// One replica with momentum distillation: online model, momentum model, queue.
struct Replica {
  fnvlp::model::Albef model{nullptr}, momentum{nullptr};
  fnvlp::negatives::FeatureQueue queue{nullptr};
  Replica(int64_t queue_size) {
    torch::manual_seed(7);
    model = fnvlp::model::Albef(tiny());
    // The trainer starts the momentum model as a copy of the online one (unit-tested, and the
    // integration test checks its first step); here it starts from other weights. With keys equal
    // (or EMA-close) to the anchors, most of each anchor's gradient lies along its own key and is
    // projected out by the L2 normalisation; the remainder carries float32 cancellation noise of
    // ~1e-3 relative (measured at np 2 and 4), which would blur a comparison meant to catch real
    // errors. Data-parallel exactness does not depend on the momentum weights.
    momentum = fnvlp::model::Albef(tiny(), 1);
    momentum->eval();
    queue = fnvlp::negatives::FeatureQueue(queue_size, tiny().embed_dim);
  }
  // The trainer's step for the rows [first, first + b) of g (gathered over `comm` when given):
  // momentum ITC loss, backward, averaged gradients, SGD (a small step: a large one makes the
  // next steps amplify float32 noise), EMA, enqueue. Returns the gradients.
  std::vector<torch::Tensor> step(const Comm* comm, const GlobalBatch& g, int64_t first,
                                  int64_t b) {
    const auto rows = torch::indexing::Slice(first, first + b);
    const auto images = g.images.index({rows});
    const auto img = model->image_embed(model->encode_image(images));
    const auto txt =
        model->text_embed(model->encode_text(g.ids.index({rows}), g.mask.index({rows})));
    fnvlp::loss::MomentumItc mi;
    {
      torch::NoGradGuard no_grad;
      mi.img_m = momentum->image_embed(momentum->encode_image(images));
      mi.txt_m =
          momentum->text_embed(momentum->encode_text(g.ids.index({rows}), g.mask.index({rows})));
    }
    mi.img = img;
    mi.txt = txt;
    mi.img_m_all = comm ? fnvlp::allgather_rows(*comm, mi.img_m, &mi.offset) : mi.img_m;
    mi.txt_m_all = comm ? fnvlp::allgather_rows(*comm, mi.txt_m, nullptr) : mi.txt_m;
    mi.image_id = g.image_id.index({rows});
    mi.image_id_all = g.image_id;  // the global batch in rank order, as allgather_ids gives
    mi.queue_img = queue->img();
    mi.queue_txt = queue->txt();
    mi.queue_image_id = queue->image_id();
    mi.temp = model->temp();
    mi.alpha = 0.4;
    const auto in = fnvlp::loss::momentum_itc_inputs(mi);
    model->zero_grad();
    fnvlp::loss::itc_loss(in).loss.backward();
    if (comm) average_each(*comm, model->parameters());
    const auto g_out = grads(model);
    {
      torch::NoGradGuard no_grad;
      for (auto& p : model->parameters())
        if (p.grad().defined()) p.sub_(0.01 * p.grad());
    }
    fnvlp::negatives::ema_update(*momentum, *model, 0.9);
    queue->enqueue(mi.img_m_all, mi.txt_m_all, g.image_id, torch::arange(g.image_id.size(0)));
    return g_out;
  }
};

TEST(DataParallel, MomentumDistillationGradientOfRanksEqualsTheConcatenatedBatch) {
  Comm comm;
  const int64_t b = 3, n = b * comm.size();
  // Queue of n + 2: step 1 sees it empty, step 2 partly filled, step 3 after a wrap. Batches
  // reuse image ids (pairs share images two by two, the same ids every step), so queued entries
  // are positives of later anchors.
  Replica ref(n + 2), dp(n + 2);
  for (uint64_t s = 0; s < 3; ++s) {
    const GlobalBatch g = make_batch(n, 1234 + s);
    const auto gr = ref.step(nullptr, g, 0, n);
    const auto gd = dp.step(&comm, g, comm.rank() * b, b);
    // 1e-3, not the 1e-4 of the test above: without gradient through the columns the total is a
    // sum of larger per-anchor terms that partly cancel, and float32 noise reached 3.7e-4 at np 2
    // (step 0, measured). The math itself is checked in double precision to 1e-9 by the unit test
    // MomentumItc.BatchHalvesAddUpToTheWholeBatchInDouble; a real error here is of order 1.
    EXPECT_LT(worst_relative(gr, gd), 1e-3) << "step " << s;
    EXPECT_EQ(ref.queue->fill(), dp.queue->fill());
    EXPECT_EQ(ref.queue->ptr(), dp.queue->ptr());
    EXPECT_TRUE(torch::equal(ref.queue->image_id(), dp.queue->image_id()));
    EXPECT_TRUE(torch::allclose(ref.queue->img(), dp.queue->img(), 1e-4, 1e-5));
  }
  EXPECT_EQ(ref.queue->fill(), n + 2);
  EXPECT_LT(worst_relative(ref.momentum->parameters(), dp.momentum->parameters()), 1e-4);
  // The momentum model moved away from its start (EMA applied) but not onto the online model.
  Replica fresh(0);
  EXPECT_GT(worst_relative(fresh.momentum->parameters(), dp.momentum->parameters()), 0);
  EXPECT_GT(worst_relative(dp.model->parameters(), dp.momentum->parameters()), 0);
  // Every rank holds the same momentum weights and queue (replicated state).
  std::vector<double> sums = {dp.queue->img().sum().item<double>(),
                              dp.momentum->parameters()[0].sum().item<double>()};
  std::vector<double> mx = sums, mn = sums;
  comm.allreduce_max(mx);
  comm.allreduce_min(mn);
  EXPECT_EQ(mx, mn);
}

}  // namespace
