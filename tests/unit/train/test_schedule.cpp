#include <gtest/gtest.h>

#include "fnvlp/train/schedule.hpp"

using fnvlp::train::lr_at;

TEST(Schedule, WarmupIsLinearThenCosineToMin) {
  const double base = 1e-3, min = 1e-5;
  EXPECT_DOUBLE_EQ(lr_at(0, 100, 10, base, min), base / 10);
  EXPECT_DOUBLE_EQ(lr_at(9, 100, 10, base, min), base);
  EXPECT_DOUBLE_EQ(lr_at(10, 100, 10, base, min), base);                // cosine starts at the peak
  EXPECT_NEAR(lr_at(55, 100, 10, base, min), (base + min) / 2, 1e-12);  // halfway down
  EXPECT_DOUBLE_EQ(lr_at(100, 100, 10, base, min), min);
  EXPECT_DOUBLE_EQ(lr_at(150, 100, 10, base, min), min);  // past the end: stays at min
  for (int64_t s = 11; s < 100; ++s)
    EXPECT_LT(lr_at(s, 100, 10, base, min), lr_at(s - 1, 100, 10, base, min));
}

TEST(Schedule, NoWarmup) { EXPECT_DOUBLE_EQ(lr_at(0, 50, 0, 2.0, 0.0), 2.0); }
