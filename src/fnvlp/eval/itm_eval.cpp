#include "fnvlp/eval/itm_eval.hpp"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <unordered_map>

#include "fnvlp/core/progress.hpp"
#include "fnvlp/data/augment.hpp"
#include "fnvlp/data/dataset.hpp"
#include "fnvlp/data/h5.hpp"
#include "fnvlp/data/sampler.hpp"
#include "fnvlp/data/shard.hpp"
#include "fnvlp/model/albef.hpp"

namespace fnvlp::eval {

namespace fs = std::filesystem;
using json = nlohmann::json;

void RetrievalEvalConfig::validate() const {
  FNVLP_CHECK(k_test >= 1, "eval.k_test must be >= 1, got " << k_test);
  FNVLP_CHECK(batch_size >= 1, "eval.batch_size must be >= 1, got " << batch_size);
}

DatasetIndex index_dataset(const data::PairDataset& ds) {
  DatasetIndex idx;
  for (const auto& sh : ds.manifest().shards) {
    const std::string path = (fs::path(ds.dir()) / sh.file).string();
    std::vector<int64_t> iid;
    std::vector<int32_t> lab;
    {
      std::lock_guard<std::mutex> lock(h5::global_mutex());
      h5::Handle f = h5::open_file(path);
      data::ShardHeader h;  // checked against the manifest when `ds` opened it
      h.image_size = ds.manifest().image_size;
      h.max_len = ds.manifest().max_len;
      h.num_pairs = sh.num_pairs;
      iid = data::read_shard_column<int64_t>(f, path, data::shard_ds::kImageId, h);
      lab = data::read_shard_column<int32_t>(f, path, data::shard_ds::kLabel, h);
    }
    FNVLP_CHECK(static_cast<int64_t>(iid.size()) == sh.num_pairs &&
                    static_cast<int64_t>(lab.size()) == sh.num_pairs,
                path << ": image_id/label have " << iid.size() << "/" << lab.size()
                     << " rows, the manifest says " << sh.num_pairs << " pairs");
    FNVLP_CHECK(sh.first_pair_id == idx.num_pairs(),
                path << ": first pair_id " << sh.first_pair_id << ", expected " << idx.num_pairs());
    idx.image_id.insert(idx.image_id.end(), iid.begin(), iid.end());
    idx.label.insert(idx.label.end(), lab.begin(), lab.end());
  }
  FNVLP_CHECK(idx.num_pairs() == ds.num_pairs() && ds.num_pairs() > 0,
              ds.dir() << ": " << idx.num_pairs() << " pairs in the shards, manifest says "
                       << ds.num_pairs());
  std::unordered_map<int64_t, int64_t> row_of;
  idx.text_image.resize(idx.image_id.size());
  for (int64_t p = 0; p < idx.num_pairs(); ++p) {
    auto [it, fresh] = row_of.emplace(idx.image_id[static_cast<size_t>(p)], idx.num_images());
    if (fresh) idx.image_first_pair.push_back(p);
    idx.text_image[static_cast<size_t>(p)] = it->second;
  }
  return idx;
}

json RetrievalEvalResult::to_json(const std::string& prefix) const {
  json j = itm.to_json(prefix);
  j.update(itc.to_json(prefix + "itc_"));
  j[prefix + "k_test"] = k_test;
  j[prefix + "pairs"] = pairs;
  j[prefix + "images"] = images;
  if (has_class) {
    j.update(class_itm.to_json(prefix + "class_"));
    j.update(class_itc.to_json(prefix + "class_itc_"));
    j[prefix + "class_queries_images"] = class_queries_images;
    j[prefix + "class_queries_texts"] = class_queries_texts;
  }
  return j;
}

namespace {

// Rows [begin, end) of the chunks of a fixed grid (chunk = batch rows) that `rank` owns: the
// chunks are split in contiguous blocks over ranks, so concatenating every rank's rows in rank
// order gives 0..n-1.
struct Rows {
  int64_t begin = 0, end = 0;
};
Rows owned_rows(int64_t n, int64_t batch, int rank, int ranks) {
  const int64_t chunks = (n + batch - 1) / batch;
  const data::PairRange c = data::BlockPartition(chunks, ranks).block(rank);
  return {std::min(n, c.begin * batch), std::min(n, c.end * batch)};
}

void append(std::vector<float>& out, const torch::Tensor& t) {
  const torch::Tensor c = t.contiguous();
  out.insert(out.end(), c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

torch::Tensor as_tensor(std::vector<float>& v, std::vector<int64_t> shape) {
  return torch::from_blob(v.data(), shape, torch::kFloat32);
}

struct EncodedImages {
  std::vector<float> tokens, embed, cls;  // this rank's chunks, then every rank's after gather
  int64_t seq = 0, width = 0;
};

// Encodes the distinct images of `rows` chunk by chunk (eval transform: resize + normalise).
EncodedImages encode_images(model::AlbefImpl& model, const data::PairDataset& ds,
                            const DatasetIndex& idx, Rows rows, int64_t batch, bool keep_tokens) {
  const data::Augmenter aug(data::AugmentConfig{}, model.config().image_size);
  EncodedImages out;
  out.seq = 1 + model.config().num_patches();
  out.width = model.config().vision_width;
  for (int64_t first = rows.begin; first < rows.end; first += batch) {
    progress("eval: encoding images");
    std::vector<int64_t> pairs;
    for (int64_t i = first; i < std::min(rows.end, first + batch); ++i)
      pairs.push_back(idx.image_first_pair[static_cast<size_t>(i)]);
    const data::Batch b = ds.read(pairs);
    const torch::Tensor tokens = model.encode_image(aug.eval(b));
    if (keep_tokens) {
      append(out.tokens, tokens);
      append(out.embed, model.image_embed(tokens));
    }
    append(out.cls, tokens.select(1, 0));
  }
  return out;
}

}  // namespace

ImageFeatures encode_image_features(const Comm& comm, model::AlbefImpl& model,
                                    const data::PairDataset& ds, const DatasetIndex& index,
                                    int64_t batch_size) {
  torch::NoGradGuard no_grad;
  model.eval();
  EncodedImages e;
  comm.collective([&] {
    e = encode_images(model, ds, index,
                      owned_rows(index.num_images(), batch_size, comm.rank(), comm.size()),
                      batch_size, false);
  });
  ImageFeatures f;
  f.cls = comm.allgatherv(e.cls);
  f.dim = e.width;
  return f;
}

RetrievalEvalResult evaluate_retrieval(const Comm& comm, model::AlbefImpl& model,
                                       const data::PairDataset& ds, const RetrievalEvalConfig& cfg,
                                       bool per_query_ranks, ImageFeatures* features) {
  cfg.validate();
  const auto t0 = std::chrono::steady_clock::now();
  torch::NoGradGuard no_grad;
  model.eval();
  const model::ModelConfig& mc = model.config();
  DatasetIndex idx;
  comm.collective([&] {
    idx = index_dataset(ds);
    FNVLP_CHECK(ds.max_len() <= mc.max_len, ds.dir()
                                                << ": captions of " << ds.max_len()
                                                << " tokens exceed model.max_len " << mc.max_len);
  });
  const int64_t ni = idx.num_images(), nt = idx.num_pairs(), L = ds.max_len();
  const int64_t D = mc.embed_dim, Dt = mc.text_width, bs = cfg.batch_size;
  const Rows my_images = owned_rows(ni, bs, comm.rank(), comm.size());
  const Rows my_texts = owned_rows(nt, bs, comm.rank(), comm.size());

  // 1. Features of this rank's chunks, then everyone's.
  EncodedImages img;
  std::vector<float> txt_hidden, txt_embed;
  std::vector<int64_t> txt_mask;
  comm.collective([&] {
    img = encode_images(model, ds, idx, my_images, bs, true);
    for (int64_t first = my_texts.begin; first < my_texts.end; first += bs) {
      progress("eval: encoding texts");
      std::vector<int64_t> pairs;
      for (int64_t p = first; p < std::min(my_texts.end, first + bs); ++p) pairs.push_back(p);
      const data::Batch b = ds.read(pairs);
      const torch::Tensor h = model.encode_text(b.tokens, b.attention_mask);
      append(txt_hidden, h);
      append(txt_embed, model.text_embed(h));
      const torch::Tensor m = b.attention_mask.contiguous();
      txt_mask.insert(txt_mask.end(), m.data_ptr<int64_t>(), m.data_ptr<int64_t>() + m.numel());
    }
  });
  std::vector<float> all_tokens = comm.allgatherv(img.tokens);
  std::vector<float> all_img_embed = comm.allgatherv(img.embed);
  std::vector<float> all_hidden = comm.allgatherv(txt_hidden);
  std::vector<float> all_txt_embed = comm.allgatherv(txt_embed);
  std::vector<int64_t> all_mask = comm.allgatherv(txt_mask);
  if (features) {
    features->cls = comm.allgatherv(img.cls);
    features->dim = img.width;
  }
  const torch::Tensor image_tokens = as_tensor(all_tokens, {ni, img.seq, img.width});
  const torch::Tensor image_embed = as_tensor(all_img_embed, {ni, D});
  const torch::Tensor text_hidden = as_tensor(all_hidden, {nt, L, Dt});
  const torch::Tensor text_embed = as_tensor(all_txt_embed, {nt, D});
  const torch::Tensor text_mask = torch::from_blob(all_mask.data(), {nt, L}, torch::kInt64);
  const double t_encode =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // 2. Owned query rows: ITC rank, top-k, ITM re-scoring of the candidates.
  HitCounts txt_itc, txt_itm, img_itc, img_itm;
  HitCounts c_txt_itc, c_txt_itm, c_img_itc, c_img_itm;  // class-level: labelled queries only
  std::vector<int64_t> r_i2t_itc, r_i2t_itm, r_t2i_itc, r_t2i_itm;
  auto image_label = [&](int64_t i) {
    return idx.label[static_cast<size_t>(idx.image_first_pair[static_cast<size_t>(i)])];
  };
  auto itm_positive = [&](const torch::Tensor& fused) {
    const torch::Tensor s = model.itm_logits(fused).select(1, 1).contiguous();
    return std::vector<float>(s.data_ptr<float>(), s.data_ptr<float>() + s.numel());
  };
  comm.collective([&] {
    for (int64_t first = my_images.begin; first < my_images.end; first += bs) {
      const int64_t last = std::min(my_images.end, first + bs);
      // One grid chunk of ITC rows: the same matmul whatever the rank count.
      const torch::Tensor sim =
          torch::mm(image_embed.slice(0, first, last), text_embed.t()).contiguous();
      for (int64_t i = first; i < last; ++i) {
        progress("eval: ITM re-ranking, image queries");
        const float* row = sim.data_ptr<float>() + (i - first) * nt;
        auto pos = [&](int64_t t) { return idx.text_image[static_cast<size_t>(t)] == i; };
        const int64_t r_itc = positive_rank(row, nt, pos);
        const std::vector<int64_t> cand = top_k(row, nt, cfg.k_test);
        const torch::Tensor ci = torch::tensor(cand, torch::kInt64);
        const auto k = static_cast<int64_t>(cand.size());
        // The image's cross-attention keys once for its k candidate texts.
        const torch::Tensor fused =
            model.fuse_cls(text_hidden.index_select(0, ci), text_mask.index_select(0, ci),
                           model.image_keys(image_tokens.narrow(0, i, 1)),
                           {torch::Tensor(), torch::zeros({k}, torch::kLong)});
        const std::vector<float> itm = itm_positive(fused);
        const int64_t r_itm = reranked_rank(cand, itm, nt, pos);
        txt_itc.add(r_itc);
        txt_itm.add(r_itm);
        if (const int64_t c = image_label(i); c >= 0) {
          auto same = [&](int64_t t) { return idx.label[static_cast<size_t>(t)] == c; };
          c_txt_itc.add(positive_rank(row, nt, same));
          c_txt_itm.add(reranked_rank(cand, itm, nt, same));
        }
        if (per_query_ranks) r_i2t_itc.push_back(r_itc), r_i2t_itm.push_back(r_itm);
      }
    }
    for (int64_t first = my_texts.begin; first < my_texts.end; first += bs) {
      const int64_t last = std::min(my_texts.end, first + bs);
      const torch::Tensor sim =
          torch::mm(text_embed.slice(0, first, last), image_embed.t()).contiguous();
      for (int64_t t = first; t < last; ++t) {
        progress("eval: ITM re-ranking, text queries");
        const float* row = sim.data_ptr<float>() + (t - first) * ni;
        const int64_t gt = idx.text_image[static_cast<size_t>(t)];
        auto pos = [&](int64_t i) { return i == gt; };
        const int64_t r_itc = positive_rank(row, ni, pos);
        const std::vector<int64_t> cand = top_k(row, ni, cfg.k_test);
        const torch::Tensor ci = torch::tensor(cand, torch::kInt64);
        const auto k = static_cast<int64_t>(cand.size());
        // The text's first-layer self-attention once for its k candidate images.
        const torch::Tensor fused =
            model.fuse_cls(text_hidden.narrow(0, t, 1), text_mask.narrow(0, t, 1),
                           model.image_keys(image_tokens.index_select(0, ci)),
                           {torch::zeros({k}, torch::kLong), torch::Tensor()});
        const std::vector<float> itm = itm_positive(fused);
        const int64_t r_itm = reranked_rank(cand, itm, ni, pos);
        img_itc.add(r_itc);
        img_itm.add(r_itm);
        if (const int64_t c = idx.label[static_cast<size_t>(t)]; c >= 0) {
          auto same = [&](int64_t i) { return image_label(i) == c; };
          c_img_itc.add(positive_rank(row, ni, same));
          c_img_itm.add(reranked_rank(cand, itm, ni, same));
        }
        if (per_query_ranks) r_t2i_itc.push_back(r_itc), r_t2i_itm.push_back(r_itm);
      }
    }
  });

  // 3. Integer counts: exact sums for any rank count.
  std::vector<int64_t> c;
  for (const HitCounts* h :
       {&txt_itc, &txt_itm, &img_itc, &img_itm, &c_txt_itc, &c_txt_itm, &c_img_itc, &c_img_itm})
    c.insert(c.end(), {h->r1, h->r5, h->r10, h->queries});
  comm.allreduce_sum(c);
  auto counts = [&](int k) {
    return HitCounts{c[4 * k], c[4 * k + 1], c[4 * k + 2], c[4 * k + 3]};
  };
  RetrievalEvalResult r;
  r.itc = metrics_from_counts(counts(0), counts(2));
  r.itm = metrics_from_counts(counts(1), counts(3));
  r.class_queries_images = counts(4).queries;
  r.class_queries_texts = counts(6).queries;
  r.has_class = r.class_queries_images > 0 && r.class_queries_texts > 0;
  if (r.has_class) {
    r.class_itc = metrics_from_counts(counts(4), counts(6));
    r.class_itm = metrics_from_counts(counts(5), counts(7));
  }
  r.k_test = cfg.k_test;
  r.pairs = nt;
  r.images = ni;
  if (per_query_ranks) {
    r.i2t_itc_rank = comm.allgatherv(r_i2t_itc);
    r.i2t_itm_rank = comm.allgatherv(r_i2t_itm);
    r.t2i_itc_rank = comm.allgatherv(r_t2i_itc);
    r.t2i_itm_rank = comm.allgatherv(r_t2i_itm);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (comm.is_root())
    spdlog::info(
        "eval: {} images x {} captions, k_test {}: encode {:.1f}s, ITM re-ranking {:.1f}s "
        "(rank 0: {} image and {} caption queries)",
        ni, nt, cfg.k_test, t_encode, r.seconds - t_encode, my_images.end - my_images.begin,
        my_texts.end - my_texts.begin);
  return r;
}

}  // namespace fnvlp::eval
