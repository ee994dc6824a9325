#include "fnvlp/eval/eval_job.hpp"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <memory>

#include "fnvlp/core/blas.hpp"
#include "fnvlp/data/dataset.hpp"
#include "fnvlp/data/sampler.hpp"
#include "fnvlp/data/shard_job.hpp"
#include "fnvlp/model/albef.hpp"
#include "fnvlp/store/pretrained.hpp"
#include "fnvlp/store/run_dir.hpp"

namespace fnvlp::eval {

using json = nlohmann::json;

namespace {

// libtorch's intra-op threads and OpenBLAS's own pool (core/blas.hpp).
void set_threads(int n) {
  torch::set_num_threads(n);
  set_blas_threads(n);
}

std::unique_ptr<data::PairDataset> open_dataset(const Comm& comm, const std::string& dir,
                                                bool verify_checksums) {
  if (verify_checksums) data::verify_shard_checksums(comm, dir);
  std::unique_ptr<data::PairDataset> ds;
  comm.collective([&] { ds = std::make_unique<data::PairDataset>(dir); });
  return ds;
}

// Features and labels of the images with a known label (label >= 0) among `rows`.
struct Labelled {
  std::vector<float> x;
  std::vector<int64_t> y;
};
void take(Labelled& out, const ImageFeatures& f, const DatasetIndex& idx, int64_t image) {
  const int64_t label = idx.label[static_cast<size_t>(idx.image_first_pair[image])];
  if (label < 0) return;
  out.x.insert(out.x.end(), f.cls.begin() + image * f.dim, f.cls.begin() + (image + 1) * f.dim);
  out.y.push_back(label);
}

json run_probe(const Comm& comm, model::AlbefImpl& model, const EvalOptions& opt,
               const data::PairDataset& ds, const ImageFeatures& feats) {
  const DatasetIndex idx = index_dataset(ds);
  Labelled train, test;
  std::string split;
  if (!opt.probe_train_dir.empty()) {
    const auto tds = open_dataset(comm, opt.probe_train_dir, opt.verify_checksums);
    DatasetIndex tidx;
    comm.collective([&] { tidx = index_dataset(*tds); });
    const ImageFeatures tf =
        encode_image_features(comm, model, *tds, tidx, opt.retrieval.batch_size);
    for (int64_t i = 0; i < tidx.num_images(); ++i) take(train, tf, tidx, i);
    for (int64_t i = 0; i < idx.num_images(); ++i) take(test, feats, idx, i);
    split = "train: " + opt.probe_train_dir + ", test: " + opt.data_dir;
  } else {
    FNVLP_CHECK(opt.probe_cfg.test_modulus >= 2, "probe.test_modulus must be >= 2");
    const auto mod = static_cast<uint64_t>(opt.probe_cfg.test_modulus);
    for (int64_t i = 0; i < idx.num_images(); ++i) {
      const auto iid = static_cast<uint64_t>(idx.image_id[idx.image_first_pair[i]]);
      take(data::mix64(iid) % mod == 0 ? test : train, feats, idx, i);
    }
    split = "images of " + opt.data_dir + " with mix64(image_id) % " + std::to_string(mod) +
            " == 0 test, others train";
  }
  std::string text;
  comm.collective([&] {
    if (!comm.is_root()) return;
    FNVLP_CHECK(!train.y.empty() && !test.y.empty(),
                "--probe: " << opt.data_dir << (opt.probe_train_dir.empty() ? "" : " / ")
                            << opt.probe_train_dir << " has no labelled images (label >= 0) in "
                            << (train.y.empty() ? "the training" : "the test") << " split");
    json j = linear_probe(train.x, train.y, test.x, test.y, feats.dim, opt.probe_cfg).to_json();
    j["probe_features"] = "vit_cls";
    j["probe_split"] = split;
    text = j.dump();
  });
  comm.bcast(text);
  return json::parse(text);
}

}  // namespace

json run_evaluation(const Comm& comm, const EvalOptions& opt) {
  FNVLP_CHECK(!opt.checkpoint.empty() && !opt.data_dir.empty() && !opt.out.empty(),
              "fnvlp-eval needs --checkpoint, --data and --out");
  FNVLP_CHECK(opt.threads >= 1, "--threads must be >= 1");
  set_threads(static_cast<int>(opt.threads));
  const model::ModelConfig mc = store::open_pretrained(comm, opt.checkpoint);
  const auto ds = open_dataset(comm, opt.data_dir, opt.verify_checksums);
  store::refuse_other_vocabulary(opt.checkpoint, ds->manifest().vocab_sha256, opt.data_dir);
  model::Albef model(mc);
  store::load_pretrained_weights(comm, opt.checkpoint, *model);
  ImageFeatures feats;
  const RetrievalEvalResult r = evaluate_retrieval(
      comm, *model, *ds, opt.retrieval, !opt.ranks_out.empty(), opt.probe ? &feats : nullptr);
  json out = r.to_json();
  out["checkpoint"] = store::resolve_checkpoint_dir(opt.checkpoint);
  out["data"] = opt.data_dir;
  out["ranks"] = comm.size();
  out["seconds"] = r.seconds;
  if (opt.probe) out.update(run_probe(comm, *model, opt, *ds, feats));
  comm.collective([&] {
    if (!comm.is_root()) return;
    store::write_file_atomic(opt.out, out.dump(2) + "\n");
    if (!opt.ranks_out.empty())
      store::write_file_atomic(opt.ranks_out, json{{"i2t_itc", r.i2t_itc_rank},
                                                   {"i2t_itm", r.i2t_itm_rank},
                                                   {"t2i_itc", r.t2i_itc_rank},
                                                   {"t2i_itm", r.t2i_itm_rank}}
                                                      .dump() +
                                                  "\n");
    spdlog::info(
        "eval: txt_r1={:.2f} txt_r5={:.2f} img_r1={:.2f} img_r5={:.2f} r_mean={:.2f} (ITC only: "
        "r_mean={:.2f}){}{} -> {}",
        r.itm.txt_r1, r.itm.txt_r5, r.itm.img_r1, r.itm.img_r5, r.itm.r_mean(), r.itc.r_mean(),
        r.has_class ? fmt::format(" class-level: txt_r1={:.2f} img_r1={:.2f} r_mean={:.2f}",
                                  r.class_itm.txt_r1, r.class_itm.img_r1, r.class_itm.r_mean())
                    : "",
        opt.probe ? " probe_accuracy=" + std::to_string(out["probe_accuracy"].get<double>()) : "",
        opt.out);
  });
  return out;
}

}  // namespace fnvlp::eval
