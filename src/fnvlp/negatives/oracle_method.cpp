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

std::pair<torch::Tensor, torch::Tensor> OracleMethod::exclude(const StepContext& s,
                                                              const loss::ItcInputs&) {
  // An image anchor and a text anchor of one pair share its label: one mask for both directions.
  const torch::Tensor mask = oracle_filter(s.negative, s.batch.label, s.label_all);
  return {mask, mask};
}

}  // namespace fnvlp::negatives
