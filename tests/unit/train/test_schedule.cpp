#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

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

// The step-counting schedule the samples-based one replaces, verbatim: a run that never changes its
// rank count must see the same learning rates, bit for bit (the golden references depend on it).
static double lr_by_steps(int64_t step, int64_t total_steps, int64_t warmup_steps, double base_lr,
                          double min_lr) {
  if (warmup_steps > 0 && step < warmup_steps)
    return base_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  const int64_t span = total_steps - warmup_steps;
  if (span <= 0) return base_lr;
  const double progress =
      std::min(1.0, static_cast<double>(step - warmup_steps) / static_cast<double>(span));
  return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

TEST(Schedule, SamplesAtTheFirstGlobalBatchGiveTheStepScheduleBitwise) {
  using fnvlp::train::schedule_step;
  const int64_t global = 3 * 48;  // 3 ranks x 48
  for (int64_t warmup : {0, 7, 1000})
    for (int64_t total : {5, 997, 100000})
      for (int64_t step = 0; step <= total + 3; step += 1 + step / 50) {
        const double a = lr_at(schedule_step(step * global, global), static_cast<double>(total),
                               warmup, 3e-4, 1e-6);
        EXPECT_EQ(a, lr_by_steps(step, total, warmup, 3e-4, 1e-6))
            << "step " << step << " of " << total << ", warm-up " << warmup;
      }
}

// After a resume from 2 to 3 ranks (global batch 32 -> 48) the schedule goes on from the samples
// seen: each step is 1.5 steps of the first launch's schedule, strictly between its neighbours.
TEST(Schedule, AnotherGlobalBatchContinuesTheSameCurve) {
  using fnvlp::train::schedule_step;
  const double base = 1e-3, min = 1e-5;
  int64_t samples = 40 * 32;
  for (int k = 0; k < 20; ++k, samples += 48) {
    const double s = schedule_step(samples, 32);
    const double lr = lr_at(s, 100, 10, base, min);
    const auto lo = static_cast<int64_t>(std::floor(s));
    if (s == std::floor(s)) {
      EXPECT_EQ(lr, lr_by_steps(lo, 100, 10, base, min));
    } else {
      EXPECT_LT(lr, lr_by_steps(lo, 100, 10, base, min));
      EXPECT_GT(lr, lr_by_steps(lo + 1, 100, 10, base, min));
    }
  }
}
