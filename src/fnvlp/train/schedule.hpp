#pragma once
// Learning-rate schedule: linear warm-up then cosine decay to min_lr (ALBEF's cosine scheduler
// with warm-up; OpenCLIP's cosine_lr), as a pure function of the progress so a resumed run needs
// no scheduler state beyond it.
//
// The progress is counted in samples, not in this run's steps: `step` is the samples seen divided
// by the global batch of the run's first launch (an integer until a resume on another rank count
// changes the global batch, then fractional), so the schedule is continuous across rank counts.
// For integral arguments the arithmetic is that of the step-counting schedule, bit for bit.
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace fnvlp::train {

// lr(step) = base * (step + 1) / warmup                                    for step < warmup
//          = min + (base - min) * 0.5 * (1 + cos(pi * (step - warmup) / (total - warmup)))
inline double lr_at(double step, double total_steps, int64_t warmup_steps, double base_lr,
                    double min_lr) {
  const auto warmup = static_cast<double>(warmup_steps);
  if (warmup_steps > 0 && step < warmup) return base_lr * (step + 1.0) / warmup;
  const double span = total_steps - warmup;
  if (span <= 0) return base_lr;
  const double progress = std::min(1.0, (step - warmup) / span);
  return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

// The schedule's step after `samples` samples at the first launch's global batch.
inline double schedule_step(int64_t samples, int64_t schedule_global_batch) {
  return static_cast<double>(samples) / static_cast<double>(schedule_global_batch);
}

}  // namespace fnvlp::train
