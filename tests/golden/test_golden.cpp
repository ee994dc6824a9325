// Golden step test (tests/golden/README.md, llm.c's test_gpt2 scheme): tiny_step.h5
// holds the PyTorch twin's (tests/bench/pytorch_albef.py) initial weights, a fixed batch with its
// MLM masks and ITM negatives, the step-0 losses, logits checksums and every parameter gradient,
// and the losses of ten AdamW steps. This test loads the weights into fnvlp::model::Albef by name
// and replays the steps through fnvlp's own model, losses and fused AdamW (the library pieces
// train/trainer.cpp's train_step is made of, on one rank), within the tolerances the file
// carries. It guards the hand-written kernels (attention, GELU, LayerNorm, dense, the fused
// linear cross-entropy, AdamW) against silent drift from the reference formulas.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "fnvlp/comm/flat_gradients.hpp"
#include "fnvlp/comm/tensors.hpp"
#include "fnvlp/core/blas.hpp"
#include "fnvlp/core/error.hpp"
#include "fnvlp/data/h5.hpp"
#include "fnvlp/loss/itc.hpp"
#include "fnvlp/loss/itm.hpp"
#include "fnvlp/loss/mlm.hpp"
#include "fnvlp/model/albef.hpp"
#include "fnvlp/train/device.hpp"
#include "fnvlp/train/fused_adamw.hpp"
#include "fnvlp/train/schedule.hpp"

namespace {

using namespace fnvlp;

constexpr int64_t kSchema = 1;
constexpr const char* kLossNames[4] = {"itc", "itm", "mlm", "total"};
constexpr const char* kLogits[4] = {"itc_i2t", "itc_t2i", "itm", "mlm"};

// FNVLP_GOLDEN_DEVICE=cuda replays the steps on the GPU (ctest gpu.golden_step).
torch::Device golden_device() {
  const char* env = std::getenv("FNVLP_GOLDEN_DEVICE");
  return env && std::string(env) == "cuda" ? torch::Device(torch::kCUDA)
                                           : torch::Device(torch::kCPU);
}

// FNVLP_GOLDEN_FILE overrides the file ctest's golden.make writes into the build directory.
std::string golden_path() {
  const char* env = std::getenv("FNVLP_GOLDEN_FILE");
  return env && *env ? env : FNVLP_BINARY_DIR "/tests/golden/tiny_step.h5";
}

hid_t memory_type(torch::ScalarType type, const std::string& ctx) {
  switch (type) {
    case torch::kFloat:
      return H5T_NATIVE_FLOAT;
    case torch::kDouble:
      return H5T_NATIVE_DOUBLE;
    case torch::kLong:
      return H5T_NATIVE_INT64;
    case torch::kByte:
      return H5T_NATIVE_UINT8;
    default:
      FNVLP_FAIL(ctx << ": no HDF5 type for " << type);
  }
}

class GoldenFile {
 public:
  explicit GoldenFile(std::string path) : path_(std::move(path)) {
    h5::quiet();
    file_ = h5::open_file(path_);
  }

  // Any dataset as a CPU tensor of `type` (HDF5 converts), in its stored shape.
  torch::Tensor read(const std::string& name, torch::ScalarType type) const {
    h5::Handle ds = h5::open_dataset(file_, name, path_);
    const std::string ctx = path_ + ":/" + name;
    std::vector<int64_t> shape;
    for (hsize_t d : h5::dims(ds, ctx)) shape.push_back(static_cast<int64_t>(d));
    torch::Tensor t = torch::empty(shape, torch::dtype(type));
    const hid_t mem = memory_type(type, ctx);
    if (t.numel() > 0) H5_CHECK(H5Dread(ds, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data_ptr()), ctx);
    return t;
  }

  // Names of the links in a group.
  std::vector<std::string> members(const std::string& group) const {
    h5::Handle g(H5_CHECK(H5Gopen2(file_, group.c_str(), H5P_DEFAULT), path_ << ":/" << group),
                 H5Gclose);
    H5G_info_t info;
    H5_CHECK(H5Gget_info(g, &info), path_ << ":/" << group);
    std::vector<std::string> out;
    for (hsize_t i = 0; i < info.nlinks; ++i) {
      const ssize_t n = H5_CHECK(
          H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT),
          path_ << ":/" << group);
      std::string name(static_cast<size_t>(n) + 1, '\0');
      H5_CHECK(H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(),
                                  H5P_DEFAULT),
               path_ << ":/" << group);
      name.resize(static_cast<size_t>(n));
      out.push_back(name);
    }
    return out;
  }

  double attr_double(const std::string& group, const std::string& name) const {
    h5::Handle g(H5_CHECK(H5Gopen2(file_, group.c_str(), H5P_DEFAULT), path_ << ":/" << group),
                 H5Gclose);
    return h5::read_attr_double(g, name, path_ + ":/" + group);
  }
  int64_t attr_int(const std::string& group, const std::string& name) const {
    h5::Handle g(H5_CHECK(H5Gopen2(file_, group.c_str(), H5P_DEFAULT), path_ << ":/" << group),
                 H5Gclose);
    return h5::read_attr_int(g, name, path_ + ":/" + group);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  h5::Handle file_;
};

// Reads ModelConfig's fields from /config's "model.*" attributes (every field must be there).
struct ConfigReader {
  const GoldenFile& f;
  void operator()(const char* key, int64_t& v, const config::Bounds& = {}) {
    v = f.attr_int("config", std::string("model.") + key);
  }
  void operator()(const char* key, double& v, const config::Bounds& = {}) {
    v = f.attr_double("config", std::string("model.") + key);
  }
};

struct Tolerances {
  double loss, logits, grad, grad_atol, grad_norm, clip_norm, step_loss;
};

struct Checksum {
  torch::Tensor sums;    // float64 [3]: sum, sum of squares, sum of |x|
  torch::Tensor sample;  // float32 at the file's sample indices
  int64_t numel = 0;
};

// What fnvlp computes, in the file's layout.
struct Replay {
  std::map<std::string, torch::Tensor> grads;  // step 0, before clipping
  torch::Tensor losses;                        // float64 [4], step 0
  std::map<std::string, Checksum> logits;      // step 0
  torch::Tensor step_losses, grad_norm, lr;    // [S, 4], [S], [S]
  std::vector<std::string> name_errors;        // missing / extra / mis-shaped parameters
  double seconds = 0;
};

Checksum checksum(const torch::Tensor& t, const torch::Tensor& index) {
  const torch::Tensor x = t.detach().to(torch::kDouble).reshape({-1});
  Checksum c;
  c.sums = torch::stack({x.sum(), (x * x).sum(), x.abs().sum()});
  c.sample = t.detach().reshape({-1}).index_select(0, index).to(torch::kFloat);
  c.numel = t.numel();
  return c;
}

// Copies /params into the model by fnvlp's parameter names; every mismatch is listed.
std::vector<std::string> load_weights(const GoldenFile& f, model::AlbefImpl& m) {
  std::vector<std::string> errors;
  const auto stored = f.members("params");
  std::set<std::string> expected;
  torch::NoGradGuard no_grad;
  for (auto& item : m.named_parameters()) {
    expected.insert(item.key());
    if (std::find(stored.begin(), stored.end(), item.key()) == stored.end()) {
      errors.push_back("missing in the file: " + item.key());
      continue;
    }
    const torch::Tensor w = f.read("params/" + item.key(), torch::kFloat);
    if (w.sizes() != item.value().sizes()) {
      std::ostringstream os;
      os << "shape of " << item.key() << ": file " << w.sizes() << ", fnvlp "
         << item.value().sizes();
      errors.push_back(os.str());
      continue;
    }
    item.value().copy_(w);
  }
  for (const auto& name : stored)
    if (!expected.count(name)) errors.push_back("in the file but not in fnvlp: " + name);
  return errors;
}

// Replays make_golden.py's steps through fnvlp (trainer.cpp train_step on one rank: no gather,
// no negatives method, no momentum, no TCL), with the file's MLM masks and ITM negatives and the
// twin's constant ITC soft-target weight (the trainer ramps it over loss.soft_warmup_steps).
Replay replay(const GoldenFile& f) {
  torch::set_num_threads(1);
  set_blas_threads(1);
  const auto t0 = std::chrono::steady_clock::now();
  model::ModelConfig mc;
  ConfigReader reader{f};
  mc.fields(reader);
  model::Albef model(mc, /*seed=*/0);  // every weight is then overwritten from the file
  Replay r;
  r.name_errors = load_weights(f, *model);
  if (!r.name_errors.empty()) return r;
  const torch::Device dev = golden_device();
  if (dev.is_cuda()) train::configure_cuda_math(dev, /*deterministic=*/true);
  model->to(dev);

  auto opt_attr = [&](const char* k) { return f.attr_double("config", std::string("optim.") + k); };
  auto loss_attr = [&](const char* k) { return f.attr_double("config", std::string("loss.") + k); };
  const int64_t steps = f.attr_int("config", "steps");
  const int64_t total_steps = f.attr_int("config", "total_steps");
  const int64_t warmup = f.attr_int("config", "optim.warmup_steps");
  const double base_lr = opt_attr("lr"), min_lr = opt_attr("min_lr"), clip = opt_attr("grad_clip");
  const double w_itc = loss_attr("itc_weight"), w_itm = loss_attr("itm_weight"),
               w_mlm = loss_attr("mlm_weight"), alpha = loss_attr("soft_weight");

  // The trainer's optimizer: AdamW, weight decay on parameters of two or more dimensions.
  std::vector<torch::Tensor> decay, no_decay;
  for (auto& p : model->parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  const std::vector<torch::Tensor> params = model->parameters();
  FlatGradients grads(params);
  auto adamw = [&](double wd) {
    return torch::optim::AdamWOptions(base_lr)
        .betas({opt_attr("beta1"), opt_attr("beta2")})
        .eps(opt_attr("eps"))
        .weight_decay(wd);
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(
      decay, std::make_unique<torch::optim::AdamWOptions>(adamw(opt_attr("weight_decay"))));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(adamw(0.0)));
  torch::optim::AdamW optimizer(std::move(groups), adamw(opt_attr("weight_decay")));

  const torch::Tensor images =
      model::normalize_images(f.read("inputs/images", torch::kByte).to(dev));
  const torch::Tensor ids = f.read("inputs/ids", torch::kLong).to(dev);
  const torch::Tensor mask = f.read("inputs/mask", torch::kLong).to(dev);
  const torch::Tensor image_id = f.read("inputs/image_id", torch::kLong).to(dev);
  const torch::Tensor mlm_ids = f.read("inputs/mlm_input_ids", torch::kLong).to(dev);
  const torch::Tensor mlm_selected = f.read("inputs/mlm_selected", torch::kByte).to(dev);
  const torch::Tensor neg_image = f.read("inputs/itm_neg_image", torch::kLong).to(dev);
  const torch::Tensor neg_text = f.read("inputs/itm_neg_text", torch::kLong).to(dev);

  r.step_losses = torch::zeros({steps, 4}, torch::kDouble);
  r.grad_norm = torch::zeros({steps}, torch::kDouble);
  r.lr = torch::zeros({steps}, torch::kDouble);
  model->train();
  for (int64_t s = 0; s < steps; ++s) {
    const double lr = train::lr_at(s, total_steps, warmup, base_lr, min_lr);
    for (auto& group : optimizer.param_groups())
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);

    const torch::Tensor image_tokens = model->encode_image(images);
    const torch::Tensor text_hidden = model->encode_text(ids, mask);
    loss::ItcInputs in;
    in.img = model->image_embed(image_tokens);
    in.txt = model->text_embed(text_hidden);
    in.img_all = in.img.detach();
    in.txt_all = in.txt.detach();
    in.temp = model->temp();
    in.image_id = image_id;
    in.image_id_all = image_id;
    in.soft = loss::SoftTargets::kPseudo;
    in.soft_weight = alpha;
    const loss::ItcResult itc = loss::itc_loss(in);

    const loss::ItmPairs pairs = loss::itm_pairs({neg_image[s], neg_text[s]});
    const std::vector<torch::Tensor> keys = model->image_keys(image_tokens);
    const torch::Tensor fused =
        model->fuse_cls(text_hidden, mask, keys, {pairs.text_index, pairs.image_index});
    const torch::Tensor itm_logits = model->itm_logits(fused);
    const torch::Tensor itm = loss::itm_loss(itm_logits, pairs.labels);

    const torch::Tensor positions = mlm_selected[s].reshape({-1}).nonzero().reshape({-1});
    const torch::Tensor targets = ids.reshape({-1}).index_select(0, positions);
    const torch::Tensor at_masked =
        model->fuse_at(model->encode_text(mlm_ids[s], mask), mask, keys, {}, positions);
    const torch::Tensor mlm = loss::linear_cross_entropy(
        model->mlm_hidden(at_masked), model->mlm_decoder_weight(), model->mlm_bias(), targets);

    const torch::Tensor total = w_itc * itc.loss + w_itm * itm + w_mlm * mlm;
    const double values[4] = {itc.loss.item<double>(), itm.item<double>(), mlm.item<double>(),
                              total.item<double>()};
    for (int k = 0; k < 4; ++k) r.step_losses[s][k] = values[k];
    if (s == 0) {
      r.losses = r.step_losses[0].clone();
      torch::NoGradGuard no_grad;
      const std::map<std::string, torch::Tensor> logits = {{"itc_i2t", itc.sim_i2t},
                                                           {"itc_t2i", itc.sim_t2i},
                                                           {"itm", itm_logits},
                                                           {"mlm", model->mlm_logits(at_masked)}};
      for (const auto& [name, t] : logits)
        r.logits[name] =
            checksum(t.to(torch::kCPU), f.read("forward/" + name + "_sample_index", torch::kLong));
    }
    grads.zero();
    total.backward();
    if (s == 0)
      for (auto& item : model->named_parameters())
        r.grads[item.key()] = item.value().grad().to(torch::kCPU).clone();
    double norm = 0;
    if (clip > 0) grads.clip_scale(clip, &norm);  // the norm alone: the step clips by itself
    train::adamw_step(optimizer, grads, clip);
    r.grad_norm[s] = norm;
    r.lr[s] = lr;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

class GoldenStep : public ::testing::Test {
 protected:
  // One replay for all tests of the suite; a failure to read the file fails each of them.
  static void SetUpTestSuite() {
    if (golden_device().is_cuda() && !torch::cuda::is_available()) return;  // SetUp skips
    try {
      file_ = new GoldenFile(golden_path());
      const int64_t schema = file_->attr_int("/", "fnvlp_golden_schema");
      FNVLP_CHECK(schema == kSchema, file_->path() << ": golden schema " << schema << ", expected "
                                                   << kSchema << " (regenerate, README.md)");
      auto tol = [](const char* k) { return file_->attr_double("tolerances", k); };
      tol_ = {tol("rtol_loss"),      tol("rtol_logits"),    tol("rtol_grad"),     tol("atol_grad"),
              tol("rtol_grad_norm"), tol("rtol_clip_norm"), tol("rtol_step_loss")};
      replay_ = new Replay(replay(*file_));
      if (replay_->name_errors.empty())
        std::cout << "golden: " << file_->path() << ", replayed in " << std::fixed
                  << std::setprecision(2) << replay_->seconds << " s\n";
    } catch (const std::exception& e) {
      setup_error_ = new std::string(e.what());
    }
  }
  static void TearDownTestSuite() {
    delete replay_;
    delete file_;
    delete setup_error_;
    replay_ = nullptr;
    file_ = nullptr;
    setup_error_ = nullptr;
  }
  void SetUp() override {
    if (golden_device().is_cuda() && !torch::cuda::is_available())
      GTEST_SKIP() << "FNVLP_GOLDEN_DEVICE=cuda: no CUDA device (or no CUDA libtorch) here";
    ASSERT_EQ(setup_error_, nullptr) << *setup_error_;
    ASSERT_TRUE(replay_->name_errors.empty())
        << "parameter names of fnvlp and " << file_->path() << " disagree:\n  " << [] {
             std::string s;
             for (const auto& e : replay_->name_errors) s += e + "\n  ";
             return s;
           }();
  }

  static GoldenFile* file_;
  static Replay* replay_;
  static Tolerances tol_;
  static std::string* setup_error_;
};

GoldenFile* GoldenStep::file_ = nullptr;
Replay* GoldenStep::replay_ = nullptr;
Tolerances GoldenStep::tol_{};
std::string* GoldenStep::setup_error_ = nullptr;

double rel(double got, double ref) { return std::abs(got - ref) / std::max(std::abs(ref), 1e-30); }

// The largest measured difference of a test against its tolerance, printed at the end: how much
// margin is left (README.md's table comes from these lines).
struct Worst {
  const char* what;
  double tolerance, value = 0;
  std::string where;
  void see(double v, const std::string& w) {
    if (v > value) value = v, where = w;
  }
  ~Worst() {
    std::cout << "golden: " << what << ": largest difference " << std::scientific
              << std::setprecision(2) << value << " (" << where << "), tolerance " << tolerance
              << "\n";
  }
};

// Loading succeeded for every parameter, one-to-one (SetUp asserts the list of mismatches).
TEST_F(GoldenStep, ParameterNamesAndShapesMatch) {
  EXPECT_EQ(replay_->grads.size(), file_->members("params").size());
  EXPECT_EQ(file_->members("grads").size(), file_->members("params").size());
}

TEST_F(GoldenStep, Losses) {
  const torch::Tensor ref = file_->read("forward/losses", torch::kDouble);
  Worst worst{"step-0 losses (relative)", tol_.loss};
  for (int k = 0; k < 4; ++k) {
    const double got = replay_->losses[k].item<double>(), want = ref[k].item<double>();
    worst.see(rel(got, want), kLossNames[k]);
    EXPECT_LE(rel(got, want), tol_.loss)
        << kLossNames[k] << " loss: fnvlp " << std::setprecision(9) << got << ", PyTorch " << want
        << " (relative difference " << rel(got, want) << ", tolerance " << tol_.loss << ")";
  }
}

TEST_F(GoldenStep, LogitsChecksums) {
  Worst worst{"logits checksums (relative to mean |x|)", tol_.logits};
  for (const char* name : kLogits) {
    const std::string n = name;
    const torch::Tensor ref = file_->read("forward/" + n + "_checksum", torch::kDouble);
    const torch::Tensor ref_sample = file_->read("forward/" + n + "_sample", torch::kFloat);
    const Checksum& got = replay_->logits.at(n);
    // make_golden.py samples evenly from the first to the last element: the same count here.
    const int64_t last =
        file_->read("forward/" + n + "_sample_index", torch::kLong).max().item<int64_t>();
    ASSERT_EQ(got.numel, last + 1)
        << n << " logits: fnvlp has " << got.numel << " elements, PyTorch " << last + 1;
    const double sum_abs = ref[2].item<double>();
    const double scale = sum_abs / static_cast<double>(got.numel);  // mean |x|
    // The sum may cancel to near 0: measured against the sum of magnitudes.
    const double d_sum = std::abs(got.sums[0].item<double>() - ref[0].item<double>()) / sum_abs;
    worst.see(d_sum, n + " sum");
    EXPECT_LE(d_sum, tol_.logits) << n << " logits: sum " << got.sums[0].item<double>()
                                  << " vs PyTorch " << ref[0].item<double>()
                                  << " (difference / sum|x| = " << d_sum << ")";
    for (int k = 1; k < 3; ++k) {
      // A sum of squares doubles the elements' relative error.
      const double d = rel(got.sums[k].item<double>(), ref[k].item<double>()) / 2;
      worst.see(d, n + (k == 1 ? " sum of squares / 2" : " sum of |x| / 2"));
      EXPECT_LE(d, tol_.logits) << n << " logits: " << (k == 1 ? "sum of squares " : "sum of |x| ")
                                << got.sums[k].item<double>() << " vs PyTorch "
                                << ref[k].item<double>() << " (relative difference " << 2 * d
                                << ", tolerance 2 x " << tol_.logits << ")";
    }
    for (int64_t i = 0; i < ref_sample.numel(); ++i) {
      const double d = std::abs(got.sample[i].item<double>() - ref_sample[i].item<double>());
      worst.see(d / scale, n + " element");
      EXPECT_LE(d, tol_.logits * scale)
          << n << " logits: sampled element " << i << " = " << got.sample[i].item<double>()
          << " vs PyTorch " << ref_sample[i].item<double>() << " (difference " << d
          << ", tolerance " << tol_.logits << " x mean |x| " << scale << ")";
    }
  }
}

TEST_F(GoldenStep, EveryParameterGradient) {
  Worst worst{"gradients (relative L2 per tensor)", tol_.grad};
  double sq = 0;
  for (const auto& [name, got] : replay_->grads) {
    const torch::Tensor ref = file_->read("grads/" + name, torch::kFloat).to(torch::kDouble);
    ASSERT_EQ(ref.sizes(), got.sizes()) << "gradient of " << name;
    const torch::Tensor g = got.to(torch::kDouble);
    sq += g.square().sum().item<double>();
    const double diff = (g - ref).norm().item<double>();
    const double ref_norm = ref.norm().item<double>();
    const double bound =
        tol_.grad * ref_norm + tol_.grad_atol * std::sqrt(static_cast<double>(ref.numel()));
    worst.see(ref_norm > 0 ? diff / ref_norm : diff, name);
    EXPECT_LE(diff, bound) << "gradient of " << name << ": ||fnvlp - PyTorch|| = " << diff
                           << ", ||PyTorch|| = " << ref_norm << " (relative " << diff / ref_norm
                           << ", tolerance " << tol_.grad << ")";
  }
  // The global norm of fnvlp's gradient, summed in double here, against the twin's
  // clip_grad_norm_ (per-tensor norms, then their norm).
  const double norm = std::sqrt(sq);
  const double ref = file_->read("steps/grad_norm", torch::kDouble)[0].item<double>();
  Worst global{"global gradient norm (relative)", tol_.grad_norm};
  global.see(rel(norm, ref), "summed in double");
  EXPECT_LE(rel(norm, ref), tol_.grad_norm)
      << "global gradient norm: fnvlp " << std::setprecision(9) << norm << ", PyTorch " << ref;
}

// FlatGradients::clip_scale's norm, what clipping scales by. It sums the squares of the whole
// flat buffer in float32: its own rounding (README.md "Findings") sets rtol_clip_norm.
TEST_F(GoldenStep, ClipNorm) {
  const double got = replay_->grad_norm[0].item<double>();
  const double ref = file_->read("steps/grad_norm", torch::kDouble)[0].item<double>();
  Worst worst{"clip norm of step 0 (relative)", tol_.clip_norm};
  worst.see(rel(got, ref), "FlatGradients::clip_scale");
  EXPECT_LE(rel(got, ref), tol_.clip_norm)
      << "gradient norm before clipping (FlatGradients::clip_scale): fnvlp " << std::setprecision(9)
      << got << ", PyTorch clip_grad_norm_ " << ref;
}

TEST_F(GoldenStep, TenAdamWSteps) {
  const torch::Tensor ref = file_->read("steps/losses", torch::kDouble);
  const torch::Tensor ref_lr = file_->read("steps/lr", torch::kDouble);
  ASSERT_EQ(ref.sizes(), replay_->step_losses.sizes());
  Worst worst{"losses of the AdamW steps (relative)", tol_.step_loss};
  for (int64_t s = 0; s < ref.size(0); ++s) {
    EXPECT_LE(rel(replay_->lr[s].item<double>(), ref_lr[s].item<double>()), 1e-12)
        << "learning rate at step " << s << ": fnvlp " << replay_->lr[s].item<double>()
        << ", PyTorch twin " << ref_lr[s].item<double>();
    for (int k = 0; k < 4; ++k) {
      const double got = replay_->step_losses[s][k].item<double>(), want = ref[s][k].item<double>();
      worst.see(rel(got, want), std::string(kLossNames[k]) + " at step " + std::to_string(s));
      EXPECT_LE(rel(got, want), tol_.step_loss)
          << kLossNames[k] << " loss at step " << s << ": fnvlp " << std::setprecision(9) << got
          << ", PyTorch " << want << " (relative difference " << rel(got, want) << ", tolerance "
          << tol_.step_loss << ")";
    }
  }
}

}  // namespace
