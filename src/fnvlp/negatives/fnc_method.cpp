#include "fnvlp/negatives/fnc_method.hpp"

#include "fnvlp/negatives/glofnd.hpp"

namespace fnvlp::negatives {

FncMethod::FncMethod(const MethodEnv& env, double alpha, int64_t start_epoch)
    : env_(env), alpha_(alpha), start_epoch_(start_epoch) {}

void FncMethod::adjust_itc(StepContext& s, loss::ItcInputs& in) {
  if (s.static_step ? !staged_active_ : s.epoch < start_epoch_) return;
  torch::NoGradGuard no_grad;
  const loss::ItcCosine cos = loss::itc_cosine(in);
  in.exclude_i2t = fnc_filter(cos.i2t, s.negative, alpha_);
  in.exclude_t2i = fnc_filter(cos.t2i, s.negative, alpha_);
  fn_.record(in.exclude_i2t, in.exclude_t2i, s.negative, s.batch.label, s.label_all);
}

}  // namespace fnvlp::negatives
