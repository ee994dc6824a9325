#pragma once
// Learning-rate schedule: linear warm-up then cosine decay to min_lr (ALBEF's cosine scheduler
// with warm-up; OpenCLIP's cosine_lr), as a pure function of the step so a resumed run needs no
// scheduler state beyond the step.
#include <cmath>
#include <cstdint>

namespace fnvlp::train {

// lr(step) = base * (step + 1) / warmup                                    for step < warmup
//          = min + (base - min) * 0.5 * (1 + cos(pi * (step - warmup) / (total - warmup)))
inline double lr_at(int64_t step, int64_t total_steps, int64_t warmup_steps, double base_lr,
                    double min_lr) {
  if (warmup_steps > 0 && step < warmup_steps)
    return base_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  const int64_t span = total_steps - warmup_steps;
  if (span <= 0) return base_lr;
  const double progress =
      std::min(1.0, static_cast<double>(step - warmup_steps) / static_cast<double>(span));
  return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace fnvlp::train
