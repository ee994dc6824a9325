#include <gtest/gtest.h>

#include <cmath>

#include "fnvlp/core/error.hpp"
#include "fnvlp/eval/linear_probe.hpp"

using fnvlp::eval::linear_probe;
using fnvlp::eval::ProbeConfig;

namespace {

// Deterministic pseudo-normal draws (sum of uniforms), independent of any global generator.
struct Lcg {
  uint64_t x;
  double uniform() {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(x >> 11) / 9007199254740992.0;
  }
  double normal() {
    double s = 0;
    for (int i = 0; i < 12; ++i) s += uniform();
    return s - 6;
  }
};

// n points per class in `dim` dims around class means c * spread along axis c % dim.
void blobs(int64_t classes, int64_t n, int64_t dim, double spread, Lcg& g, std::vector<float>& x,
           std::vector<int64_t>& y, int64_t label_offset = 10) {
  for (int64_t c = 0; c < classes; ++c)
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t d = 0; d < dim; ++d)
        x.push_back(static_cast<float>(g.normal() + (d == c % dim ? spread : 0.0)));
      y.push_back(label_offset + 3 * c);  // arbitrary class ids
    }
}

}  // namespace

TEST(LinearProbe, SeparatesWellSeparatedClassesDeterministically) {
  Lcg g{7};
  std::vector<float> xtr, xte;
  std::vector<int64_t> ytr, yte;
  blobs(3, 60, 6, 8.0, g, xtr, ytr);
  blobs(3, 20, 6, 8.0, g, xte, yte);
  const auto a = linear_probe(xtr, ytr, xte, yte, 6, ProbeConfig{});
  EXPECT_EQ(a.classes, 3);
  EXPECT_EQ(a.train_size, 180);
  EXPECT_EQ(a.test_size, 60);
  EXPECT_DOUBLE_EQ(a.train_accuracy, 100.0);
  EXPECT_DOUBLE_EQ(a.test_accuracy, 100.0);
  EXPECT_NEAR(a.chance, 100.0 / 3, 1e-9);  // balanced classes
  const auto b = linear_probe(xtr, ytr, xte, yte, 6, ProbeConfig{});
  EXPECT_EQ(a.to_json().dump(), b.to_json().dump());
}

TEST(LinearProbe, RandomLabelsStayNearChance) {
  Lcg g{11};
  std::vector<float> xtr, xte;
  std::vector<int64_t> ytr, yte;
  blobs(1, 300, 8, 0.0, g, xtr, ytr);
  blobs(1, 400, 8, 0.0, g, xte, yte);
  for (auto& y : ytr) y = g.uniform() < 0.5;  // labels carry no information
  for (auto& y : yte) y = g.uniform() < 0.5;
  const auto r = linear_probe(xtr, ytr, xte, yte, 8, ProbeConfig{});
  EXPECT_EQ(r.classes, 2);
  EXPECT_GT(r.test_accuracy, 35.0);
  EXPECT_LT(r.test_accuracy, 65.0);
}

TEST(LinearProbe, RejectsOneClassAndMismatchedShapes) {
  const std::vector<float> x = {0, 1, 2, 3};
  EXPECT_THROW(linear_probe(x, {4, 4}, x, {4, 4}, 2, ProbeConfig{}), fnvlp::Error);
  EXPECT_THROW(linear_probe(x, {1, 2}, x, {1, 2}, 3, ProbeConfig{}), fnvlp::Error);
}
