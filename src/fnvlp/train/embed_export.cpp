#include "fnvlp/train/embed_export.hpp"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "fnvlp/eval/retrieval.hpp"

namespace fnvlp::train {

data::Embeddings embed_pairs(model::Albef& model, const data::Augmenter& augment,
                             const data::PairDataset& ds, const std::vector<int64_t>& pair_ids,
                             int64_t batch) {
  torch::NoGradGuard no_grad;
  model->eval();
  data::Embeddings e;
  e.dim = model->config().embed_dim;
  for (size_t first = 0; first < pair_ids.size(); first += static_cast<size_t>(batch)) {
    const std::vector<int64_t> ids(
        pair_ids.begin() + static_cast<std::ptrdiff_t>(first),
        pair_ids.begin() + static_cast<std::ptrdiff_t>(
                               std::min(pair_ids.size(), first + static_cast<size_t>(batch))));
    const data::Batch b = ds.read(ids);
    const torch::Device dev = model->temp().device();
    const auto x = augment.eval(b).to(dev);
    const auto ie = model->image_embed(model->encode_image(x)).to(torch::kCPU).contiguous();
    const auto te =
        model->text_embed(model->encode_text(b.tokens.to(dev), b.attention_mask.to(dev)))
            .to(torch::kCPU)
            .contiguous();
    e.image_emb.insert(e.image_emb.end(), ie.data_ptr<float>(), ie.data_ptr<float>() + ie.numel());
    e.text_emb.insert(e.text_emb.end(), te.data_ptr<float>(), te.data_ptr<float>() + te.numel());
    e.pair_id.insert(e.pair_id.end(), ids.begin(), ids.end());
    e.image_id.insert(e.image_id.end(), b.image_id.data_ptr<int64_t>(),
                      b.image_id.data_ptr<int64_t>() + b.size());
    const auto l = b.label.to(torch::kInt).contiguous();
    e.label.insert(e.label.end(), l.data_ptr<int32_t>(), l.data_ptr<int32_t>() + b.size());
  }
  model->train();
  if (!pair_ids.empty()) e.first = pair_ids.front();
  return e;
}

data::Embeddings embed_dataset(const Comm& comm, model::Albef& model,
                               const data::Augmenter& augment, const data::PairDataset& ds,
                               int64_t batch, int64_t epoch, int64_t step) {
  const data::PairRange block =
      data::BlockPartition(ds.num_pairs(), comm.size()).block(comm.rank());
  std::vector<int64_t> ids(static_cast<size_t>(block.size()));
  for (int64_t p = block.begin; p < block.end; ++p) ids[static_cast<size_t>(p - block.begin)] = p;
  data::Embeddings e = embed_pairs(model, augment, ds, ids, batch);
  e.epoch = epoch;
  e.step = step;
  e.first = block.begin;
  return e;
}

data::Embeddings gather_embeddings(const Comm& comm, const data::Embeddings& block) {
  data::Embeddings e;
  e.epoch = block.epoch;
  e.step = block.step;
  e.dim = block.dim;
  e.image_emb = comm.allgatherv(block.image_emb);
  e.text_emb = comm.allgatherv(block.text_emb);
  e.pair_id = comm.allgatherv(block.pair_id);
  e.image_id = comm.allgatherv(block.image_id);
  e.label = comm.allgatherv(block.label);
  e.glofnd_lambda_image = comm.allgatherv(block.glofnd_lambda_image);
  e.glofnd_lambda_text = comm.allgatherv(block.glofnd_lambda_text);
  return e;
}

// Rank 0 creates the file with every chunk allocated; the ranks then write their rows in rank
// order (one writer at a time: no MPI-IO needed, and the bytes do not depend on the rank count);
// rank 0 renames it into place. A failure on any rank fails the export on every rank.
void write_embeddings_collective(const Comm& comm, const std::string& path,
                                 const data::Embeddings& block, int64_t total) {
  const std::string tmp = path + ".tmp";
  const bool lambdas = !comm.all_ok(block.glofnd_lambda_image.empty());  // any rank has them
  comm.collective([&] {
    if (comm.is_root())
      data::create_embeddings(tmp, total, block.dim, lambdas, block.epoch, block.step);
  });
  for (int r = 0; r < comm.size(); ++r)
    comm.collective([&] {
      if (comm.rank() == r && block.size() > 0) data::write_embedding_rows(tmp, block);
    });
  comm.collective([&] {
    if (comm.is_root())
      FNVLP_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0,
                  "cannot rename " << tmp << " to " << path);
  });
}

nlohmann::json zero_shot_validation(const Comm& comm, model::Albef& model,
                                    const data::Augmenter& augment, const data::PairDataset& val,
                                    int64_t batch, int64_t epoch, int64_t step,
                                    const std::string& path) {
  // Held-out pairs are few: every rank ranks all of them.
  data::Embeddings block;
  comm.collective([&] { block = embed_dataset(comm, model, augment, val, batch, epoch, step); });
  const data::Embeddings v = gather_embeddings(comm, block);
  const auto r = eval::retrieval_from_embeddings(v.image_emb, v.text_emb, v.dim, v.image_id);
  nlohmann::json rec = r.to_json("val_");
  rec["step"] = step;
  rec["epoch"] = epoch;
  rec["val_pairs"] = v.size();
  if (comm.is_root())
    spdlog::info(
        "val epoch={} txt_r1={:.1f} txt_r5={:.1f} img_r1={:.1f} img_r5={:.1f} "
        "r_mean={:.1f} ({} pairs, ITC only)",
        epoch, r.txt_r1, r.txt_r5, r.img_r1, r.img_r5, r.r_mean(), v.size());
  comm.collective([&] {
    if (comm.is_root()) data::write_embeddings(path, v);
  });
  return rec;
}

std::pair<torch::Tensor, torch::Tensor> embedding_tensors(const data::Embeddings& e) {
  const auto opts = torch::TensorOptions().dtype(torch::kFloat);
  auto img = torch::from_blob(const_cast<float*>(e.image_emb.data()), {e.size(), e.dim}, opts);
  auto txt = torch::from_blob(const_cast<float*>(e.text_emb.data()), {e.size(), e.dim}, opts);
  return {img, txt};
}

}  // namespace fnvlp::train
