// Weights in and out (store/weights_io.hpp) against the PyTorch twin: make_weights.py saves one
// randomly initialised twin under timm's, Hugging Face BERT's and ALBEF's names, as safetensors and
// as torch.save zips, with its forward on a fixed batch; fnvlp imports each and must compute the
// same image tokens, text states, ITC embeddings and ITM logits (fp32 tolerance). The export is
// imported back bitwise and loaded by the twin (check_export.py, ctest weights.export_twin).
// Hostile and mismatched files are named errors that change no parameter.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "fnvlp/core/config.hpp"
#include "fnvlp/core/error.hpp"
#include "fnvlp/model/albef.hpp"
#include "fnvlp/store/safetensors.hpp"
#include "fnvlp/store/weights_io.hpp"

namespace {

using namespace fnvlp;
namespace fs = std::filesystem;

std::string dir() {
  const char* env = std::getenv("FNVLP_WEIGHTS_DIR");
  return env && *env ? env : FNVLP_BINARY_DIR "/tests/golden/weights";
}
std::string wfile(const std::string& f) { return dir() + "/" + f; }

model::ModelConfig model_config(const std::string& file = "model.yaml") {
  model::ModelConfig mc;
  config::from_yaml(config::load(wfile(file)), mc);
  return mc;
}

torch::Tensor ref(const std::string& name) {
  const hid_t f = H5Fopen(wfile("ref.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(f, 0) << wfile("ref.h5");
  const hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  const hid_t s = H5Dget_space(d);
  std::vector<hsize_t> dims(static_cast<size_t>(H5Sget_simple_extent_ndims(s)));
  H5Sget_simple_extent_dims(s, dims.data(), nullptr);
  std::vector<int64_t> shape(dims.begin(), dims.end());
  const hid_t type = H5Dget_type(d);
  const bool integer = H5Tget_class(type) == H5T_INTEGER;
  auto t = torch::empty(shape, integer ? torch::kLong : torch::kFloat);
  H5Dread(d, integer ? H5T_NATIVE_INT64 : H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
          t.data_ptr());
  H5Tclose(type);
  H5Sclose(s);
  H5Dclose(d);
  H5Fclose(f);
  return t;
}

// max |a - b| / max |b|: fp32 against fp32 with other summation orders.
double rel_diff(const torch::Tensor& a, const torch::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  return (a - b).abs().max().item<double>() / b.abs().max().item<double>();
}
constexpr double kTol = 2e-5;

struct Forward {
  torch::Tensor image_tokens, text_hidden, image_embed, text_embed, itm;
};

Forward forward(model::AlbefImpl& m) {
  torch::NoGradGuard g;
  m.eval();
  Forward f;
  const auto ids = ref("ids"), mask = ref("mask");
  f.image_tokens = m.encode_image(ref("images"));
  f.text_hidden = m.encode_text(ids, mask);
  f.image_embed = m.image_embed(f.image_tokens);
  f.text_embed = m.text_embed(f.text_hidden);
  f.itm = m.itm_logits(m.fuse(f.text_hidden, mask, f.image_tokens));
  return f;
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// The message import_weights throws ("" if it loads), and whether any parameter changed.
std::string import_error(const std::vector<std::string>& files, model::AlbefImpl& m,
                         bool* changed = nullptr) {
  std::vector<torch::Tensor> before;
  for (const auto& p : m.parameters()) before.push_back(p.detach().clone());
  std::string err;
  try {
    store::import_weights(files, m);
  } catch (const fnvlp::Error& e) {
    err = e.message();
  }
  if (changed) {
    *changed = false;
    const auto after = m.parameters();
    for (size_t i = 0; i < before.size(); ++i) *changed |= !torch::equal(before[i], after[i]);
  }
  return err;
}

void expect_deit_bert(const std::string& deit, const std::string& bert) {
  model::Albef m(model_config(), /*seed=*/3);
  const auto report = store::import_weights({wfile(deit), wfile(bert)}, *m);
  const auto f = forward(*m);
  EXPECT_LT(rel_diff(f.image_tokens, ref("image_tokens")), kTol) << deit;
  EXPECT_LT(rel_diff(f.text_hidden, ref("text_hidden")), kTol) << bert;
  // What BERT and DeiT do not hold keeps fnvlp's initialisation: cross-attention, the ITC and
  // ITM heads, the temperature; nothing else.
  std::set<std::string> left(report.left_at_init.begin(), report.left_at_init.end());
  std::set<std::string> want = {"vision_proj.weight",
                                "vision_proj.bias",
                                "text_proj.weight",
                                "text_proj.bias",
                                "itm_head.weight",
                                "itm_head.bias",
                                "temp"};
  for (int l = 0; l < 2; ++l)
    for (const char* mod : {"cross_q", "cross_kv", "cross_output", "cross_norm"})
      for (const char* wb : {"weight", "bias"})
        want.insert("fusion_layers." + std::to_string(l) + "." + mod + "." + wb);
  EXPECT_EQ(left, want);
  ASSERT_EQ(report.files.size(), 2u);
  EXPECT_EQ(report.files[0].layout, "timm_vit");
  EXPECT_EQ(report.files[1].layout, "hf_bert");
  EXPECT_TRUE(contains(report.files[0].unused, "head.weight"));
  for (const char* u : {"bert.embeddings.position_ids", "bert.pooler.dense.weight",
                        "cls.predictions.decoder.weight"})
    EXPECT_TRUE(contains(report.files[1].unused, u)) << u;
  EXPECT_EQ(report.files[1].unused.size(), 4u) << "position_ids, pooler (2), decoder";
}

}  // namespace

TEST(WeightsImport, DeitAndBertSafetensorsMatchTheTwin) {
  expect_deit_bert("deit.safetensors", "bert.safetensors");
}

TEST(WeightsImport, DeitAndBertTorchSaveMatchTheTwin) { expect_deit_bert("deit.pth", "bert.bin"); }

TEST(WeightsImport, BertWithGammaBetaLayerNormNames) {
  model::Albef m(model_config(), 3);
  store::import_weights({wfile("bert_ln_gamma.bin")}, *m);
  EXPECT_LT(rel_diff(forward(*m).text_hidden, ref("text_hidden")), kTol);
}

TEST(WeightsImport, AlbefCheckpointMatchesTheTwinEverywhere) {
  model::Albef m(model_config(), 3);
  const auto report = store::import_weights({wfile("albef.pth")}, *m);
  EXPECT_TRUE(report.left_at_init.empty()) << report.summary();
  EXPECT_EQ(report.files.at(0).layout, "albef");
  EXPECT_TRUE(contains(report.files[0].unused, "image_queue"));
  EXPECT_TRUE(contains(report.files[0].unused, "visual_encoder_m.pos_embed"));
  const auto f = forward(*m);
  EXPECT_LT(rel_diff(f.image_embed, ref("image_embed")), kTol);
  EXPECT_LT(rel_diff(f.text_embed, ref("text_embed")), kTol);
  EXPECT_LT(rel_diff(f.itm, ref("itm_logits")), kTol);
  EXPECT_NEAR(m->temp().item<double>(), 0.05, 1e-7);
}

// make_weights.py's ALBEF file holds momentum copies equal to the online weights + 0.01.
TEST(WeightsImport, AlbefMomentumCopyIntoAMomentumModel) {
  model::Albef online(model_config(), 3), m(model_config(), 5);
  store::import_weights({wfile("albef.pth")}, *online);
  const auto report = store::import_weights({wfile("deit.safetensors"), wfile("albef.pth")}, *m,
                                            store::WeightsCopy::kMomentum);
  EXPECT_EQ(std::set<std::string>(report.left_at_init.begin(), report.left_at_init.end()),
            (std::set<std::string>{"itm_head.weight", "itm_head.bias", "temp"}))
      << "ALBEF's momentum model has no ITM head or temperature";
  EXPECT_TRUE(contains(report.files.at(1).unused, "visual_encoder.pos_embed"));
  EXPECT_EQ(report.files.at(0).unused.size(),
            store::read_safetensors_header(wfile("deit.safetensors")).tensors.size())
      << "nothing of DeiT's file goes into a momentum model";
  const auto a = online->named_parameters(), b = m->named_parameters();
  size_t checked = 0;
  for (const auto& [p, src] : report.loaded) {
    EXPECT_NE(src.find("_m."), std::string::npos) << p << " <- " << src;
    EXPECT_LT((b[p] - a[p] - 0.01).abs().max().item<double>(), 1e-6) << p;
    ++checked;
  }
  EXPECT_EQ(checked, a.size() - 3);
}

TEST(WeightsImport, TwinStateDictInFnvlpNames) {
  model::Albef m(model_config(), 3);
  const auto report = store::import_weights({wfile("twin_state_dict.pt")}, *m);
  EXPECT_EQ(report.files.at(0).layout, "fnvlp");
  EXPECT_TRUE(report.left_at_init.empty());
  EXPECT_TRUE(report.files[0].unused.empty());
  const auto f = forward(*m);
  EXPECT_LT(rel_diff(f.itm, ref("itm_logits")), kTol);
}

TEST(WeightsImport, PositionEmbeddingInterpolatedAsAlbef) {
  model::Albef m(model_config("model48.yaml"), 3);
  const auto report = store::import_weights({wfile("deit.safetensors")}, *m);
  const torch::Tensor pos = m->named_parameters()["visual_encoder.pos_embed"];
  EXPECT_EQ(pos.sizes(), (std::vector<int64_t>{1, 37, 64}));
  EXPECT_LT(rel_diff(pos.detach(), ref("pos_embed_48")), 1e-6);
  bool said = false;
  for (const auto& [p, src] : report.loaded)
    if (p == "visual_encoder.pos_embed") said = src.find("interpolated from") != std::string::npos;
  EXPECT_TRUE(said) << "the report says the position embedding was interpolated";
}

TEST(WeightsExport, RoundTripIsBitwiseAndKeepsAlbefNames) {
  model::Albef a(model_config(), 3);
  store::import_weights({wfile("albef.pth")}, *a);
  const std::string out = wfile("export.safetensors");
  store::export_albef_safetensors(*a, out, {{"fnvlp.test", "round trip"}});
  const auto h = store::read_safetensors_header(out);
  EXPECT_EQ(h.metadata.at("format"), "pt");
  EXPECT_EQ(h.metadata.at("fnvlp.test"), "round trip");
  EXPECT_NE(h.metadata.at("fnvlp.model").find("vision_width: 64"), std::string::npos);
  // The export's names are ALBEF's own: those of albef.pth without its momentum copies and
  // queues.
  std::set<std::string> exported, albef;
  for (const auto& t : h.tensors) exported.insert(t.name);
  const auto theirs = store::import_weights({wfile("albef.pth")}, *a);
  for (const auto& [p, src] : theirs.loaded) {
    std::string s = src.substr(src.find(": ") + 2);
    s = s.substr(0, s.find(" ("));
    for (size_t at = 0;;) {
      const size_t plus = s.find(" + ", at);
      albef.insert(s.substr(at, plus == std::string::npos ? std::string::npos : plus - at));
      if (plus == std::string::npos) break;
      at = plus + 3;
    }
  }
  albef.insert("text_encoder.cls.predictions.decoder.weight");
  albef.insert("text_encoder.cls.predictions.decoder.bias");
  EXPECT_EQ(exported, albef);
  model::Albef b(model_config(), 11);
  const auto report = store::import_weights({out}, *b);
  EXPECT_TRUE(report.left_at_init.empty());
  const auto pa = a->named_parameters(), pb = b->named_parameters();
  for (const auto& item : pa)
    EXPECT_TRUE(torch::equal(item.value(), pb[item.key()]))
        << item.key() << " after export + import";
}

TEST(WeightsImport, MismatchesAreNamedErrorsAndChangeNothing) {
  model::Albef m(model_config(), 3);
  bool changed = true;
  // DeiT's width (64) into a model of another vision width.
  auto wide = model_config();
  wide.vision_width = 128;
  model::Albef w(wide, 3);
  std::string e = import_error({wfile("deit.safetensors")}, *w, &changed);
  EXPECT_NE(e.find("deit.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find("where parameter visual_encoder."), std::string::npos) << e;
  EXPECT_NE(e.find("needs [1, 1, 128]"), std::string::npos) << e;
  EXPECT_FALSE(changed);
  // Another vocabulary.
  auto vocab = model_config();
  vocab.vocab_size = 600;
  model::Albef v(vocab, 3);
  e = import_error({wfile("bert.safetensors")}, *v, &changed);
  EXPECT_NE(e.find("needs [600"), std::string::npos) << e;
  EXPECT_NE(e.find("vocabulary"), std::string::npos) << e;
  EXPECT_FALSE(changed);
  // A BERT with fewer layers than text + fusion: a missing required tensor.
  auto deep = model_config();
  deep.fusion_layers = 3;
  model::Albef d(deep, 3);
  e = import_error({wfile("bert.bin")}, *d, &changed);
  EXPECT_NE(e.find("no tensor bert.encoder.layer.4.attention.self.query.weight"), std::string::npos)
      << e;
  EXPECT_FALSE(changed);
  // The same parameters from two files.
  e = import_error({wfile("deit.safetensors"), wfile("deit.pth")}, *m, &changed);
  EXPECT_NE(e.find("is in both"), std::string::npos) << e;
  EXPECT_FALSE(changed);
}

TEST(WeightsImport, HostileFilesAreNamedErrors) {
  model::Albef m(model_config(), 3);
  const std::string tmp = ::testing::TempDir() + "/fnvlp_weights_hostile";
  fs::create_directories(tmp);
  auto bytes_of = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  auto put = [&](const std::string& name, const std::string& b) {
    std::ofstream(tmp + "/" + name, std::ios::binary) << b;
    return tmp + "/" + name;
  };
  struct Case {
    std::string file, expect;
  };
  const std::string zip = bytes_of(wfile("deit.pth"));
  std::vector<Case> cases = {
      {put("truncated.pth", zip.substr(0, zip.size() / 2)), "not a readable torch.save file"},
      {put("legacy.pth", std::string("\x80\x02\x8a\x0a", 4) + "a pickle of torch < 1.6"),
       "legacy (pre-1.6) format"},
      {put("empty.safetensors", ""), "not a safetensors file"},
      {put("cut.safetensors", bytes_of(wfile("deit.safetensors")).substr(0, 40)),
       "runs past the end"},
  };
  // A weight stored as int64: not a floating-point tensor.
  {
    const auto h = store::read_safetensors_header(wfile("deit.safetensors"));
    std::vector<std::vector<char>> keep;
    std::vector<store::SafetensorsOut> out;
    for (const auto& t : h.tensors) {
      keep.push_back(store::read_safetensors_bytes(h, t));
      const bool cls = t.name == "cls_token";
      store::SafetensorsOut o;
      o.name = t.name;
      o.dtype = cls ? std::string("I32") : t.dtype;
      o.shape = t.shape;
      o.data = keep.back().data();
      out.push_back(o);
    }
    store::write_safetensors(tmp + "/int.safetensors", out);
    cases.push_back({tmp + "/int.safetensors", "'cls_token' has dtype I32"});
  }
  {
    const std::vector<float> x(4, 1.0f);
    store::write_safetensors(tmp + "/unknown.safetensors", {{"some.tensor", "F32", {4}, x.data()}});
    cases.push_back({tmp + "/unknown.safetensors", "names of no known layout"});
  }
  for (const auto& c : cases) {
    bool changed = true;
    const std::string e = import_error({c.file}, *m, &changed);
    EXPECT_FALSE(e.empty()) << c.file << " was accepted";
    EXPECT_NE(e.find(c.file), std::string::npos) << "names the file: " << e;
    EXPECT_NE(e.find(c.expect), std::string::npos) << c.expect << " in: " << e;
    EXPECT_FALSE(changed) << c.file;
  }
}
