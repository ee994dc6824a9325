#include "fnvlp/negatives/epoch_filter.hpp"

#include <tuple>

namespace fnvlp::negatives {

void EpochFilterMethod::adjust_itc(StepContext& s, loss::ItcInputs& in) {
  if (s.static_step ? !staged_active_ : s.epoch < start_epoch_) return;
  torch::NoGradGuard no_grad;
  std::tie(in.exclude_i2t, in.exclude_t2i) = exclude(s, in);
  fn_.record(in.exclude_i2t, in.exclude_t2i, s.negative, s.batch.label, s.label_all);
}

}  // namespace fnvlp::negatives
