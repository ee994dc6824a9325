#include "fnvlp/train/embed_export.hpp"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <vector>

#include "fnvlp/eval/retrieval.hpp"

namespace fnvlp::train {

data::Embeddings embed_dataset(const Comm& comm, model::Albef& model,
                               const data::Augmenter& augment, const data::PairDataset& ds,
                               int64_t batch, int64_t epoch, int64_t step) {
  torch::NoGradGuard no_grad;
  model->eval();
  const data::BlockPartition part(ds.num_pairs(), comm.size());
  const data::PairRange block = part.block(comm.rank());
  std::vector<float> img, txt;
  std::vector<int64_t> pid, iid, lab;
  for (int64_t first = block.begin; first < block.end; first += batch) {
    std::vector<int64_t> ids;
    for (int64_t p = first; p < std::min(block.end, first + batch); ++p) ids.push_back(p);
    const data::Batch b = ds.read(ids);
    const torch::Device dev = model->temp().device();
    const auto x = augment.eval(b.images).to(dev);
    const auto ie = model->image_embed(model->encode_image(x)).to(torch::kCPU).contiguous();
    const auto te =
        model->text_embed(model->encode_text(b.tokens.to(dev), b.attention_mask.to(dev)))
            .to(torch::kCPU)
            .contiguous();
    img.insert(img.end(), ie.data_ptr<float>(), ie.data_ptr<float>() + ie.numel());
    txt.insert(txt.end(), te.data_ptr<float>(), te.data_ptr<float>() + te.numel());
    pid.insert(pid.end(), ids.begin(), ids.end());
    iid.insert(iid.end(), b.image_id.data_ptr<int64_t>(),
               b.image_id.data_ptr<int64_t>() + b.size());
    const auto l = b.label.to(torch::kLong).contiguous();
    lab.insert(lab.end(), l.data_ptr<int64_t>(), l.data_ptr<int64_t>() + b.size());
  }
  model->train();
  data::Embeddings e;
  e.epoch = epoch;
  e.step = step;
  e.dim = model->config().embed_dim;
  e.image_emb = comm.allgatherv(img);
  e.text_emb = comm.allgatherv(txt);
  e.pair_id = comm.allgatherv(pid);
  e.image_id = comm.allgatherv(iid);
  const auto labels = comm.allgatherv(lab);
  e.label.assign(labels.begin(), labels.end());
  return e;
}

nlohmann::json zero_shot_validation(const Comm& comm, model::Albef& model,
                                    const data::Augmenter& augment, const data::PairDataset& val,
                                    int64_t batch, int64_t epoch, int64_t step,
                                    const std::string& path) {
  const data::Embeddings v = embed_dataset(comm, model, augment, val, batch, epoch, step);
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

std::pair<torch::Tensor, torch::Tensor> block_rows(const data::Embeddings& e,
                                                   const data::PairRange& block) {
  const auto opts = torch::TensorOptions().dtype(torch::kFloat);
  auto img = torch::from_blob(const_cast<float*>(e.image_emb.data()), {e.size(), e.dim}, opts);
  auto txt = torch::from_blob(const_cast<float*>(e.text_emb.data()), {e.size(), e.dim}, opts);
  return {img.narrow(0, block.begin, block.size()).clone(),
          txt.narrow(0, block.begin, block.size()).clone()};
}

}  // namespace fnvlp::train
