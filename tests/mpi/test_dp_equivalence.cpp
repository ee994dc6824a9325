// Gradient equivalence of data parallelism (ctest runs it at np 1, 2, 4): one step of the tiny
// model's ITC loss on R ranks with b pairs each, gradients averaged through Comm, equals the
// single-process gradient on the concatenated batch of R*b pairs.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "fnvlp/loss/itc.hpp"
#include "fnvlp/model/albef.hpp"
#include "fnvlp/train/grad_sync.hpp"

using fnvlp::Comm;

namespace {

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

GlobalBatch make_batch(int64_t n) {
  torch::manual_seed(1234);
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
    in.img_all = fnvlp::train::allgather_rows(comm, in.img, &in.offset);
    in.txt_all = fnvlp::train::allgather_rows(comm, in.txt, nullptr);
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
        comm.allreduce(t->data_ptr<float>(), static_cast<size_t>(t->numel()), MPI_SUM);
      }
      total = total + fnvlp::loss::itc_cross_rank_term(in, gg);
    }
    total.backward();
    fnvlp::train::allreduce_gradients(comm, dp->parameters());
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
