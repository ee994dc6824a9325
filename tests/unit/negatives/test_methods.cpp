// The training-method plug-ins (negatives/method.hpp) on one rank, driven through their hooks as
// the trainer drives them: each changes what its method changes and nothing else.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>

#include "fnvlp/core/error.hpp"
#include "fnvlp/data/augment.hpp"
#include "fnvlp/negatives/falcon_method.hpp"
#include "fnvlp/negatives/fnc_method.hpp"
#include "fnvlp/negatives/glofnd_method.hpp"
#include "fnvlp/negatives/grit_method.hpp"
#include "fnvlp/negatives/momentum_method.hpp"
#include "fnvlp/negatives/oracle_method.hpp"
#include "fnvlp/negatives/srcl_method.hpp"
#include "fnvlp/negatives/tcl_method.hpp"
#include "fnvlp/store/checkpoint.hpp"
#include "fnvlp/train/methods.hpp"

namespace fs = std::filesystem;
using namespace fnvlp;
using namespace fnvlp::negatives;

namespace {

model::ModelConfig tiny() {
  model::ModelConfig c;
  c.image_size = 16;
  c.patch_size = 8;
  c.vision_width = 32;
  c.vision_layers = 1;
  c.vision_heads = 2;
  c.text_width = 32;
  c.text_layers = 1;
  c.fusion_layers = 1;
  c.text_heads = 2;
  c.vocab_size = 200;
  c.max_len = 8;
  c.embed_dim = 16;
  c.dropout = 0;
  return c;
}

// A model, a 64-pair partition on this rank, and a batch of 8 pairs with two sharing an image.
struct Fixture {
  Comm comm;
  model::ModelConfig mc = tiny();
  model::Albef model{nullptr};
  data::BlockPartition partition{64, 1};
  data::Augmenter augment{data::AugmentConfig{}, 16};
  std::unique_ptr<MethodEnv> env;
  data::Batch batch;
  StepClock clock;
  Fixture() {
    torch::manual_seed(3);
    model = model::Albef(mc);
    env = std::make_unique<MethodEnv>(MethodEnv{comm, model, mc, partition, augment, 64, 4, 3, 7});
    const int64_t b = 8;
    batch.images = torch::randint(0, 255, {b, 16, 16, 3}, torch::kUInt8);
    batch.tokens = torch::randint(1, 199, {b, 8}, torch::kLong);
    batch.tokens.select(1, 0).fill_(101);
    batch.attention_mask = torch::ones({b, 8}, torch::kLong);
    batch.pair_id = torch::arange(10, 10 + b, torch::kLong);
    batch.image_id = torch::tensor({0, 0, 1, 2, 3, 4, 5, 6}, torch::kLong);
    batch.label = torch::tensor({0, 0, 1, 1, 2, 2, 3, 3}, torch::kLong);
    batch.prepared = augment.eval(batch.images);
  }
  // The step's context up to the ITC inputs, as the trainer fills it.
  std::pair<StepContext, loss::ItcInputs> step(int64_t step, int64_t epoch) {
    StepContext s{batch, batch, clock, step, epoch, 100};
    s.images = batch.prepared;
    auto view2 = step_generator(7, step, 0, kTclViewStream);
    s.images2 = augment.train(batch.images, view2);
    s.image_tokens = model->encode_image(s.images);
    s.text_hidden = model->encode_text(batch.tokens, batch.attention_mask);
    s.img = model->image_embed(s.image_tokens);
    s.txt = model->text_embed(s.text_hidden);
    s.temp = model->temp();
    s.soft_weight = 0.4;
    loss::ItcInputs in;
    in.img = s.img;
    in.txt = s.txt;
    in.img_all = s.img.detach();
    in.txt_all = s.txt.detach();
    in.temp = s.temp;
    in.image_id = batch.image_id;
    in.image_id_all = batch.image_id;
    s.label_all = batch.label;
    s.negative = in.image_id.unsqueeze(1) != in.image_id_all.unsqueeze(0);
    return {std::move(s), std::move(in)};
  }
};

std::string scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("fnvlp_methods_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

}  // namespace

TEST(GlofndMethod, FiltersFromItsStartEpochAndReportsLambdaAndPrecision) {
  Fixture f;
  GlofndOptions o;
  o.init = -1;  // every similarity is above λ: every negative is filtered after the update
  o.lr = 1e-6;
  GlofndMethod m(*f.env, 0.1, 1, o);
  auto [s0, in0] = f.step(0, 0);
  m.adjust_itc(s0, in0);
  EXPECT_FALSE(in0.exclude_i2t.defined()) << "filtered before negatives.start_epoch";
  nlohmann::json t0;
  m.telemetry(t0);
  EXPECT_FALSE(t0.contains("filtered_frac_i2t"));
  auto [s1, in1] = f.step(1, 1);
  m.adjust_itc(s1, in1);
  ASSERT_TRUE(in1.exclude_i2t.defined());
  EXPECT_TRUE(torch::equal(in1.exclude_i2t, s1.negative));
  EXPECT_TRUE(torch::equal(in1.exclude_t2i, s1.negative));
  EXPECT_NE(m.state().image.lambda(10), -1.0f) << "λ of a batch anchor took an Adam step";
  EXPECT_EQ(m.state().image.lambda(30), -1.0f) << "λ of an anchor outside the batch moved";
  nlohmann::json t;
  m.telemetry(t);
  EXPECT_DOUBLE_EQ(t["filtered_frac_i2t"].get<double>(), 1.0);
  // 8 anchors x 7 or 6 negatives; same label: pairs (2,3), (4,5), (6,7) both ways; the pair
  // (0,1) shares its image, so it is a positive, not a same-label negative.
  EXPECT_DOUBLE_EQ(t["fn_recall"].get<double>(), 1.0);
  EXPECT_NEAR(t["fn_precision"].get<double>(), 6.0 / 54.0, 1e-12);
  EXPECT_TRUE(t.contains("lambda_image_mean") && t.contains("lambda_text_p95"));
  nlohmann::json again;
  m.telemetry(again);
  EXPECT_FALSE(again.contains("filtered_frac_i2t")) << "the window was not reset";
}

TEST(GlofndMethod, SavesByPairIdAndExportsTheLambdasOfItsBlock) {
  Fixture f;
  GlofndMethod a(*f.env, 0.1, 0, GlofndOptions{});
  auto [s, in] = f.step(0, 0);
  a.adjust_itc(s, in);
  EXPECT_TRUE(a.collective_save());
  const std::string dir = scratch("glofnd");
  a.save(dir);
  GlofndMethod b(*f.env, 0.1, 0, GlofndOptions{});
  b.load(dir, 1);
  EXPECT_EQ(b.state().image.export_rows(), a.state().image.export_rows());
  EXPECT_EQ(b.state().text.export_rows(), a.state().text.export_rows());
  data::Embeddings e;  // the rank's block of the export: its 64 pairs
  for (int64_t p = 0; p < 64; ++p) e.pair_id.push_back(p);
  b.export_embeddings(e);
  EXPECT_EQ(e.glofnd_lambda_image, a.state().image.lambdas());
  EXPECT_EQ(e.glofnd_lambda_image.size(), 64u);
  data::Embeddings other;  // rows of another block: refused, no gather
  other.first = 64;
  for (int64_t p = 64; p < 128; ++p) other.pair_id.push_back(p);
  EXPECT_THROW(b.export_embeddings(other), fnvlp::Error);
}

TEST(GlofndMethod, StateBytesCoverItsCheckpointFiles) {
  Fixture f;
  GlofndMethod m(*f.env, 0.1, 0, GlofndOptions{});
  // Two files of 64 pairs x (4 float columns + a valid byte): the free-space check counts them.
  EXPECT_EQ(m.state_bytes(), 2u * 64u * (4u * 4u + 1u));
  const std::string dir = scratch("glofnd_bytes");
  m.save(dir);
  std::vector<int64_t> ids(64);
  for (int64_t p = 0; p < 64; ++p) ids[p] = p;
  uint64_t payload = 0;
  for (const char* name : {"glofnd_image", "glofnd_text"}) {
    const store::PerPairRows r = store::load_per_pair(dir, name, f.comm, ids);
    payload += r.values.size() * sizeof(float) + r.valid.size();
  }
  EXPECT_EQ(m.state_bytes(), payload);
}

TEST(FncMethod, RemovesTheTopAlphaNegativesOfEachAnchor) {
  Fixture f;
  FncMethod m(*f.env, 0.2, 0);
  auto [s, in] = f.step(0, 0);
  m.adjust_itc(s, in);
  ASSERT_TRUE(in.exclude_i2t.defined());
  const auto per_row = in.exclude_i2t.sum(1);
  const auto negatives = s.negative.sum(1);
  for (int64_t i = 0; i < 8; ++i)
    EXPECT_EQ(per_row[i].item<int64_t>(),
              static_cast<int64_t>(std::ceil(0.2 * negatives[i].item<double>())));
  EXPECT_FALSE((in.exclude_i2t & ~s.negative).any().item<bool>()) << "a positive was excluded";
  nlohmann::json t;
  m.telemetry(t);
  EXPECT_GT(t["filtered_frac_i2t"].get<double>(), 0.0);
}

// The oracle removes exactly the negatives of the anchor's class: recall and precision 1 by
// construction; a pair sharing the image is a positive, not removed; an unknown label removes none.
TEST(OracleMethod, RemovesExactlyTheSameLabelNegativesFromItsStartEpoch) {
  Fixture f;
  OracleMethod m(*f.env, 1);
  auto [s0, in0] = f.step(0, 0);
  m.adjust_itc(s0, in0);
  EXPECT_FALSE(in0.exclude_i2t.defined()) << "filtered before negatives.start_epoch";
  auto [s, in] = f.step(1, 1);
  m.adjust_itc(s, in);
  ASSERT_TRUE(in.exclude_i2t.defined() && in.exclude_t2i.defined());
  // Labels {0, 0, 1, 1, 2, 2, 3, 3}, images {0, 0, 1, ...}: rows 0/1 share an image (positives).
  const auto want = torch::zeros({8, 8}, torch::kBool);
  for (int64_t i = 2; i < 8; i += 2) want[i][i + 1] = want[i + 1][i] = true;
  EXPECT_TRUE(torch::equal(in.exclude_i2t, want)) << in.exclude_i2t;
  EXPECT_TRUE(torch::equal(in.exclude_t2i, want));
  nlohmann::json t;
  m.telemetry(t);
  EXPECT_DOUBLE_EQ(t["fn_precision"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(t["fn_recall"].get<double>(), 1.0);
  // Unknown labels (-1) match nothing, not even each other.
  const auto unknown = torch::full({8}, -1, torch::kLong);
  EXPECT_FALSE(oracle_filter(s.negative, unknown, unknown).any().item<bool>());
  // The static step: key {0} before the start epoch, {1} from it, the same mask.
  EXPECT_EQ(m.static_key(f.batch, {0, 0, 100}), std::vector<int64_t>{0});
  EXPECT_EQ(m.static_key(f.batch, {5, 1, 100}), std::vector<int64_t>{1});
  m.stage(f.batch, {5, 1, 100}, {1});
  auto [s2, in2] = f.step(5, 1);
  s2.static_step = true;
  m.adjust_itc(s2, in2);
  EXPECT_TRUE(torch::equal(in2.exclude_i2t, want));
}

TEST(SrclMethod, WithoutHelperWeighsNegativesByTheModelAlone) {
  Fixture f;
  SrclMethod m(*f.env, SrclConfig{});
  auto [s, in] = f.step(5, 0);
  m.adjust_itc(s, in);
  ASSERT_TRUE(in.weight_i2t.defined());
  EXPECT_FALSE(in.exclude_i2t.defined());
  const auto mean = (in.weight_i2t * s.negative).sum(1) / s.negative.sum(1);
  EXPECT_TRUE(torch::allclose(mean, torch::ones_like(mean), 1e-5, 1e-5));
  nlohmann::json t;
  m.telemetry(t);
  EXPECT_EQ(t["srcl_helper_weight"].get<double>(), 0.0);
}

// The static step's GloFND: its key is the batch's most-repeated anchor count (0 before its start
// epoch), its update filters as the eager one, and a commit on a 0 flag leaves λ as it was.
TEST(GlofndMethod, StaticHooksUpdateLikeTheEagerOnesAndCommitOnTheFlag) {
  Fixture f;
  GlofndOptions o;
  o.init = -1;
  o.lr = 1e-3;
  GlofndMethod eager(*f.env, 0.1, 1, o), staged(*f.env, 0.1, 1, o);
  const negatives::StepPosition before{0, 0, 100}, at{1, 1, 100};
  EXPECT_EQ(staged.static_key(f.batch, before), std::vector<int64_t>{0});
  EXPECT_EQ(staged.static_key(f.batch, at), std::vector<int64_t>{1});
  data::Batch twice = f.batch;
  twice.pair_id = torch::tensor({10, 11, 10, 13, 10, 15, 16, 11}, torch::kLong);
  EXPECT_EQ(staged.static_key(twice, at), std::vector<int64_t>{3});
  staged.stage(f.batch, before, {0});
  auto [s0, in0] = f.step(0, 0);
  s0.static_step = true;
  staged.adjust_itc(s0, in0);
  EXPECT_FALSE(in0.exclude_i2t.defined()) << "filtered before negatives.start_epoch";
  // A step taken: the eager update, and the window's λ.
  staged.stage(f.batch, at, {2});  // more rounds than needed, as agreed with another rank
  auto [s1, in1] = f.step(1, 1);
  auto [e1, ein1] = f.step(1, 1);
  s1.static_step = true;
  staged.adjust_itc(s1, in1);
  eager.adjust_itc(e1, ein1);
  ASSERT_TRUE(in1.exclude_i2t.defined());
  EXPECT_TRUE(torch::equal(in1.exclude_i2t, ein1.exclude_i2t));
  EXPECT_TRUE(torch::equal(in1.exclude_t2i, ein1.exclude_t2i));
  s1.finite = torch::ones({});
  staged.commit(s1);
  staged.after_device_step(at);
  EXPECT_EQ(staged.state().image.lambdas(), eager.state().image.lambdas());
  EXPECT_EQ(staged.state().text.lambdas(), eager.state().text.lambdas());
  // A step skipped on the device: λ as before it, and its λ out of the window's statistics.
  const std::vector<float> kept = staged.state().image.lambdas();
  staged.stage(f.batch, at, {1});
  auto [s2, in2] = f.step(2, 1);
  s2.static_step = true;
  staged.adjust_itc(s2, in2);
  ASSERT_NE(staged.state().image.lambdas(), kept);
  s2.finite = torch::zeros({});
  staged.commit(s2);
  staged.after_device_step(at);
  EXPECT_EQ(staged.state().image.lambdas(), kept);
  nlohmann::json t, te;
  staged.telemetry(t);
  eager.telemetry(te);
  EXPECT_DOUBLE_EQ(t.at("lambda_image_mean").get<double>(),
                   te.at("lambda_image_mean").get<double>());
}

TEST(TclMethod, AddsWeightedImcAndLmi) {
  Fixture f;
  TclConfig c;
  c.enabled = true;
  c.imc_weight = 0.5;
  c.lmi_weight = 2;
  c.grid = 2;
  TclMethod m(*f.env, c);
  auto [s, in] = f.step(0, 0);
  std::vector<NamedLoss> out;
  m.extra_losses(s, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].name, "imc");
  EXPECT_EQ(out[0].weight, 0.5);
  EXPECT_EQ(out[1].name, "lmi");
  EXPECT_EQ(out[1].weight, 2.0);
  for (const auto& l : out) {
    EXPECT_TRUE(std::isfinite(l.value.item<double>()));
    EXPECT_TRUE(l.value.requires_grad());
  }
}

TEST(MomentumMethod, BuildsMomentumKeysAndFollowsTheModelAfterEachStep) {
  Fixture f;
  MomentumMethod m(*f.env, 0.5, 16);
  auto [s, plain] = f.step(0, 0);
  loss::ItcInputs in;
  ASSERT_TRUE(m.build_itc(s, in));
  EXPECT_TRUE(in.momentum_keys);
  EXPECT_EQ(in.img_all.size(0), 8) << "the queue starts empty";
  {
    torch::NoGradGuard ng;
    f.model->parameters()[0].add_(1.0);
  }
  m.after_step(s);
  auto [s2, plain2] = f.step(1, 0);
  loss::ItcInputs in2;
  m.build_itc(s2, in2);
  EXPECT_EQ(in2.img_all.size(0), 16) << "the step's momentum features were not queued";
  const std::string dir = scratch("momentum");
  m.save(dir);
  MomentumMethod other(*f.env, 0.5, 16);
  other.load(dir, 1);
  EXPECT_THROW(other.load(scratch("empty"), 1), fnvlp::Error);
}

TEST(GroupedMethods, GritOwnsAGroupedSamplerAndReportsItsQ) {
  Fixture f;
  GritConfig g;
  g.q = 1;
  GritMethod m(*f.env, 16, g);
  ASSERT_NE(m.sampler(), nullptr);
  EXPECT_TRUE(m.wants_epoch_embeddings());
  EXPECT_FALSE(m.synchronous_sampler());
  m.set_epoch_embeddings(1, torch::nn::functional::normalize(torch::randn({64, 16})),
                         torch::nn::functional::normalize(torch::randn({64, 16})));
  m.sampler()->start_epoch(1);
  std::vector<int64_t> ids;
  ASSERT_TRUE(m.sampler()->next(ids));
  m.on_batch(m.sampler()->state());
  nlohmann::json t;
  m.telemetry(t);
  EXPECT_DOUBLE_EQ(t["q_mean"].get<double>(), 1.0);
}

TEST(GroupedMethods, FalconTrainsNoPolicyInEpochZeroAndAsksForThePlainMlm) {
  Fixture f;
  FalconConfig c;
  c.quantiles = 4;
  c.hidden = 8;
  FalconMethod m(*f.env, 16, c);
  EXPECT_TRUE(m.synchronous_sampler());
  EXPECT_TRUE(m.needs_plain_mlm());
  auto [s, in] = f.step(0, 0);
  s.masking = loss::mask_tokens(f.batch.tokens, f.batch.attention_mask, 0.5, 200, 103, {},
                                torch::make_generator<at::CPUGeneratorImpl>(1));
  m.after_step(s);
  EXPECT_EQ(m.scheduler().updates(), 0);
  const std::string dir = scratch("falcon");
  m.save(dir);
  m.load(dir, 1);
}

TEST(TrainMethods, BuildsTheConfiguredMethodsInHookOrder) {
  Fixture f;
  train::PretrainConfig cfg;
  cfg.loss.tcl.enabled = true;
  cfg.negatives.method = NegativesKind::kFnc;
  cfg.sampler.kind = SamplerKind::kGrit;
  cfg.sampler.search_space = 16;
  cfg.train.batch_size = 4;
  const auto methods = train::make_methods(cfg, *f.env);
  std::vector<std::string> names;
  for (const auto& m : methods) names.push_back(m->name());
  EXPECT_EQ(names, (std::vector<std::string>{"fnc", "grit", "tcl"}));
  train::PretrainConfig o;
  o.negatives.method = NegativesKind::kOracle;
  EXPECT_EQ(train::make_methods(o, *f.env).at(0)->name(), "oracle");
}

TEST(TrainMethods, RefusesMomentumWithANegativesMethodAndFalconWithoutMlm) {
  train::PretrainConfig cfg;
  cfg.loss.soft_targets = SoftTargetsKind::kMomentum;
  cfg.negatives.method = NegativesKind::kGlofnd;
  EXPECT_THROW(train::validate_methods(cfg), fnvlp::Error);
  train::PretrainConfig f;
  f.sampler.kind = SamplerKind::kFalcon;
  f.loss.mlm_weight = 0;
  EXPECT_THROW(train::validate_methods(f), fnvlp::Error);
  train::PretrainConfig a;
  a.negatives.alpha = 1.5;
  EXPECT_THROW(train::validate_methods(a), fnvlp::Error);
  EXPECT_NO_THROW(train::validate_methods(train::PretrainConfig{}));
}
