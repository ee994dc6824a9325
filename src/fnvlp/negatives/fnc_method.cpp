#include "fnvlp/negatives/fnc_method.hpp"

#include "fnvlp/negatives/glofnd.hpp"

namespace fnvlp::negatives {

std::pair<torch::Tensor, torch::Tensor> FncMethod::exclude(const StepContext& s,
                                                           const loss::ItcInputs& in) {
  const loss::ItcCosine cos = loss::itc_cosine(in);
  return {fnc_filter(cos.i2t, s.negative, alpha_), fnc_filter(cos.t2i, s.negative, alpha_)};
}

}  // namespace fnvlp::negatives
