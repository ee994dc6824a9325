#include "fnvlp/negatives/oracle_method.hpp"

#include "fnvlp/core/error.hpp"

namespace fnvlp::negatives {

torch::Tensor oracle_filter(const torch::Tensor& negative, const torch::Tensor& label_row,
                            const torch::Tensor& label_all) {
  FNVLP_CHECK(negative.dim() == 2 && negative.scalar_type() == torch::kBool &&
                  label_row.dim() == 1 && label_all.dim() == 1 &&
                  label_row.size(0) == negative.size(0) && label_all.size(0) == negative.size(1),
              "oracle: expected negative bool [b, N], labels [b] and [N], got "
                  << negative.sizes() << ", " << label_row.sizes() << ", " << label_all.sizes());
  const auto r = label_row.to(negative.device(), torch::kLong).unsqueeze(1);
  const auto c = label_all.to(negative.device(), torch::kLong).unsqueeze(0);
  return negative & (r == c) & (r >= 0);
}

OracleMethod::OracleMethod(const MethodEnv& env, int64_t start_epoch)
    : env_(env), start_epoch_(start_epoch) {}

void OracleMethod::adjust_itc(StepContext& s, loss::ItcInputs& in) {
  if (s.static_step ? !staged_active_ : s.epoch < start_epoch_) return;
  torch::NoGradGuard no_grad;
  // An image anchor and a text anchor of one pair share its label: one mask for both directions.
  const torch::Tensor mask = oracle_filter(s.negative, s.batch.label, s.label_all);
  in.exclude_i2t = mask;
  in.exclude_t2i = mask;
  fn_.record(in.exclude_i2t, in.exclude_t2i, s.negative, s.batch.label, s.label_all);
}

}  // namespace fnvlp::negatives
