#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "fnvlp/core/config.hpp"

namespace {

struct OptimConfig {
  double lr = 1e-4;
  int64_t warmup_steps = 100;
  template <class V>
  void fields(V& v) {
    v("lr", lr);
    v("warmup_steps", warmup_steps);
  }
};

struct RunConfig {
  std::string name = "default";
  int64_t batch_size = 64;
  bool deterministic = false;
  std::vector<double> quantiles = {0.5};
  OptimConfig optim;
  template <class V>
  void fields(V& v) {
    v("name", name);
    v("batch_size", batch_size);
    v("deterministic", deterministic);
    v("quantiles", quantiles);
    v("optim", optim);
  }
};

std::string write_yaml(const std::string& text) {
  const std::string path = ::testing::TempDir() + "/fnvlp_config_test.yaml";
  std::ofstream(path) << text;
  return path;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const fnvlp::Error& e) {
    return e.what();
  }
  return "";
}

TEST(Config, DefaultsWhenAbsent) {
  RunConfig c = fnvlp::config::load_typed<RunConfig>("", {});
  EXPECT_EQ(c.batch_size, 64);
  EXPECT_DOUBLE_EQ(c.optim.lr, 1e-4);
}

TEST(Config, FileThenOverridesInOrder) {
  const auto path = write_yaml("name: tiny\nbatch_size: 32\noptim:\n  lr: 0.001\n");
  RunConfig c = fnvlp::config::load_typed<RunConfig>(
      path, {"batch_size=16", "optim.warmup_steps=7", "deterministic=true", "quantiles=[0, 0.5, 1]",
             "batch_size=8"});
  EXPECT_EQ(c.name, "tiny");
  EXPECT_EQ(c.batch_size, 8);  // the last override wins
  EXPECT_DOUBLE_EQ(c.optim.lr, 0.001);
  EXPECT_EQ(c.optim.warmup_steps, 7);
  EXPECT_TRUE(c.deterministic);
  EXPECT_EQ(c.quantiles, (std::vector<double>{0, 0.5, 1}));
}

TEST(Config, UnknownKeyIsAnErrorNamingItsPath) {
  const auto msg = error_of([] { fnvlp::config::load_typed<RunConfig>("", {"optim.lrr=0.1"}); });
  EXPECT_NE(msg.find("optim.lrr"), std::string::npos) << msg;
  EXPECT_NE(msg.find("lr"), std::string::npos) << msg;  // lists the known keys
}

TEST(Config, WrongTypeIsAnErrorNamingKeyAndType) {
  const auto msg = error_of([] { fnvlp::config::load_typed<RunConfig>("", {"batch_size=big"}); });
  EXPECT_NE(msg.find("batch_size"), std::string::npos) << msg;
  EXPECT_NE(msg.find("integer"), std::string::npos) << msg;
}

TEST(Config, MalformedOverrideAndFileAreErrors) {
  EXPECT_NE(error_of([] { fnvlp::config::load("", {"no_equals_sign"}); }).find("key=value"),
            std::string::npos);
  EXPECT_NE(
      error_of([] { fnvlp::config::load("/nonexistent.yaml", {}); }).find("/nonexistent.yaml"),
      std::string::npos);
  const auto bad = write_yaml("a: [1, 2\n");
  EXPECT_NE(error_of([&] { fnvlp::config::load(bad, {}); }).find("not valid YAML"),
            std::string::npos);
}

TEST(Config, DumpRoundTripsTheResolvedConfig) {
  RunConfig c;
  c.name = "x";
  c.optim.lr = 0.5;
  const std::string text = fnvlp::config::dump(fnvlp::config::to_yaml(c));
  RunConfig back;
  fnvlp::config::from_yaml(YAML::Load(text), back);
  EXPECT_EQ(back.name, "x");
  EXPECT_DOUBLE_EQ(back.optim.lr, 0.5);
  EXPECT_EQ(back.quantiles, c.quantiles);
}

}  // namespace

namespace {

enum class Kind { kAlpha, kBeta };
const std::vector<std::pair<Kind, const char*>>& enum_names(Kind) {
  static const std::vector<std::pair<Kind, const char*>> names = {{Kind::kAlpha, "alpha"},
                                                                  {Kind::kBeta, "beta"}};
  return names;
}

struct SectionConfig {
  bool enabled = false;
  double weight = 1;
  template <class V>
  void fields(V& v) {
    v("enabled", enabled);
    v("weight", weight);
  }
};

struct MethodConfig {
  Kind kind = Kind::kAlpha;
  double lr = 0.1;
  SectionConfig extra;
  OptimConfig optim;
  template <class V>
  void fields(V& v) {
    v("kind", kind);
    v("lr", lr);
    v("extra", extra);
    v("optim", optim);
  }
  static std::vector<fnvlp::config::RenamedKey> renamed_keys() {
    return {{"old_lr", "lr"}, {"extra", "extra.enabled"}, {"extra_weight", "extra.weight"}};
  }
};

}  // namespace

TEST(Config, EnumsLoadAndDumpByNameAndRejectOthersListingTheChoices) {
  MethodConfig c = fnvlp::config::load_typed<MethodConfig>("", {"kind=beta"});
  EXPECT_EQ(c.kind, Kind::kBeta);
  EXPECT_EQ(fnvlp::config::to_yaml(c)["kind"].as<std::string>(), "beta");
  const auto msg = error_of([] { fnvlp::config::load_typed<MethodConfig>("", {"kind=gamma"}); });
  EXPECT_NE(msg.find("'kind' has value 'gamma' (expected alpha | beta)"), std::string::npos) << msg;
}

TEST(Config, RenamedKeysLoadFromFilesAndOverridesWithANote) {
  const auto path = write_yaml("old_lr: 0.5\nextra: true\n");
  std::vector<std::string> notes;
  MethodConfig c = fnvlp::config::load_typed<MethodConfig>(path, {"extra_weight=3"}, &notes);
  EXPECT_DOUBLE_EQ(c.lr, 0.5);
  EXPECT_TRUE(c.extra.enabled);
  EXPECT_DOUBLE_EQ(c.extra.weight, 3);
  EXPECT_EQ(notes.size(), 3u);
  EXPECT_NE(notes[0].find("'old_lr' is now 'lr'"), std::string::npos) << notes[0];
  // The new form of a section that once was a scalar is left alone.
  MethodConfig n = fnvlp::config::load_typed<MethodConfig>("", {"extra={enabled: true}"});
  EXPECT_TRUE(n.extra.enabled);
  // Old and new names together are ambiguous.
  const auto both = write_yaml("old_lr: 0.5\nlr: 0.2\n");
  const auto msg = error_of([&] { fnvlp::config::load_typed<MethodConfig>(both, {}); });
  EXPECT_NE(msg.find("both 'old_lr' (old name) and 'lr' are set"), std::string::npos) << msg;
}

TEST(Config, LayeredFilesMergeSectionsKeyByKey) {
  const std::string base = ::testing::TempDir() + "/fnvlp_config_base.yaml";
  const std::string overlay = ::testing::TempDir() + "/fnvlp_config_overlay.yaml";
  std::ofstream(base) << "kind: alpha\noptim:\n  lr: 0.01\n  warmup_steps: 5\n";
  std::ofstream(overlay) << "kind: beta\noptim:\n  lr: 0.02\n";
  MethodConfig c = fnvlp::config::load_typed<MethodConfig>(std::vector<std::string>{base, overlay},
                                                           {"optim.lr=0.03"});
  EXPECT_EQ(c.kind, Kind::kBeta);
  EXPECT_DOUBLE_EQ(c.optim.lr, 0.03);
  EXPECT_EQ(c.optim.warmup_steps, 5) << "the overlay replaced the whole optim section";
}

namespace {

FNVLP_CONFIG_ENUM(Mode, (kFast, "fast"), (kSlow, "slow"))

// The one-list form (core/config_fields.hpp): members, defaults, bounds and keys in one place.
struct ListedConfig {
  int64_t not_a_key = 7;  // declared outside the list: never read, written or checked
  // clang-format off
  FNVLP_CONFIG_FIELDS(
      (double, lr, 1e-4, fnvlp::config::above(0)),
      (int64_t, steps, 10, fnvlp::config::at_least(1)),
      (double, fraction, 0.5, fnvlp::config::within(0, 1)),
      (std::string, name, ),
      (Mode, mode, Mode::kSlow),
      (OptimConfig, optim, ))
  // clang-format on
};

struct KeyCollector {
  std::vector<std::string> keys;
  template <class T>
  void operator()(const char* key, T&, const fnvlp::config::Bounds& = {}) {
    keys.emplace_back(key);
  }
};

}  // namespace

TEST(ConfigFields, OneListDeclaresMembersWithDefaultsAndVisitsThemInOrder) {
  ListedConfig c;
  EXPECT_DOUBLE_EQ(c.lr, 1e-4);
  EXPECT_EQ(c.steps, 10);
  EXPECT_EQ(c.name, "");
  EXPECT_EQ(c.mode, Mode::kSlow);
  EXPECT_EQ(c.optim.warmup_steps, 100);  // a nested section keeps its own defaults
  KeyCollector k;
  c.fields(k);
  EXPECT_EQ(k.keys, (std::vector<std::string>{"lr", "steps", "fraction", "name", "mode", "optim"}));
  const YAML::Node dumped = fnvlp::config::to_yaml(c);
  EXPECT_EQ(dumped["mode"].as<std::string>(), "slow");
  EXPECT_FALSE(dumped["not_a_key"]);
  const auto loaded = fnvlp::config::load_typed<ListedConfig>(
      "", {"lr=0.5", "steps=3", "name=x", "mode=fast", "optim.lr=2"});
  EXPECT_DOUBLE_EQ(loaded.lr, 0.5);
  EXPECT_EQ(loaded.steps, 3);
  EXPECT_EQ(loaded.name, "x");
  EXPECT_EQ(loaded.mode, Mode::kFast);
  EXPECT_DOUBLE_EQ(loaded.optim.lr, 2.0);
}

TEST(ConfigFields, ValuesOutsideTheirBoundsAreErrorsNamingKeyValueAndRange) {
  using fnvlp::config::load_typed;
  auto msg = error_of([] { load_typed<ListedConfig>("", {"steps=0"}); });
  EXPECT_NE(msg.find("'steps' = 0 is outside [1, inf)"), std::string::npos) << msg;
  msg = error_of([] { load_typed<ListedConfig>("", {"lr=0"}); });  // open bound
  EXPECT_NE(msg.find("'lr' = 0 is outside (0, inf)"), std::string::npos) << msg;
  msg = error_of([] { load_typed<ListedConfig>("", {"fraction=1.5"}); });
  EXPECT_NE(msg.find("'fraction' = 1.5 is outside [0, 1]"), std::string::npos) << msg;
  msg = error_of([] { load_typed<ListedConfig>("", {"lr=.nan"}); });
  EXPECT_NE(msg.find("'lr' = nan is outside (0, inf)"), std::string::npos) << msg;
  EXPECT_NO_THROW(load_typed<ListedConfig>("", {"fraction=1", "fraction=0"}));  // closed ends
}

TEST(ConfigFields, CheckValidatesAConfigBuiltInCode) {
  ListedConfig c;
  EXPECT_NO_THROW(fnvlp::config::check(c));
  c.fraction = -0.1;
  const auto msg = error_of([&] { fnvlp::config::check(c); });
  EXPECT_NE(msg.find("'fraction' = -0.1 is outside [0, 1]"), std::string::npos) << msg;
}

TEST(ConfigFields, BoundsDescribeThemselves) {
  using namespace fnvlp::config;
  EXPECT_EQ(describe(at_least(1)), "[1, inf)");
  EXPECT_EQ(describe(above(0)), "(0, inf)");
  EXPECT_EQ(describe(within(0, 1)), "[0, 1]");
  EXPECT_EQ(describe(between(0, 1)), "(0, 1)");
  EXPECT_EQ(describe(half_open(0, 1)), "[0, 1)");
  EXPECT_EQ(describe(above_to(0, 1)), "(0, 1]");
  EXPECT_EQ(describe(Bounds{}), "(-inf, inf)");
  EXPECT_FALSE(Bounds{}.contains(std::nan("")));
}

TEST(ConfigFields, EnumListNamesEachEnumeratorOnce) {
  EXPECT_EQ(enum_names(Mode{}).size(), 2u);
  EXPECT_STREQ(fnvlp::config::enum_to_name(Mode::kFast), "fast");
  EXPECT_EQ(fnvlp::config::enum_from_name<Mode>("slow", "mode"), Mode::kSlow);
  const auto msg = error_of([] { fnvlp::config::enum_from_name<Mode>("medium", "mode"); });
  EXPECT_NE(msg.find("(expected fast | slow)"), std::string::npos) << msg;
}
