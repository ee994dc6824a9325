#include "fnvlp/negatives/method.hpp"

namespace fnvlp::negatives {

torch::Generator step_generator(uint64_t seed, int64_t step, int rank, uint64_t stream) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>();
  gen.set_current_seed(
      data::hash_key({seed, static_cast<uint64_t>(step), static_cast<uint64_t>(rank), stream}));
  return gen;
}

void seed_dropout(uint64_t seed, int64_t step, int rank, uint64_t stream) {
  torch::manual_seed(
      data::hash_key({seed, static_cast<uint64_t>(step), static_cast<uint64_t>(rank), stream}));
}

}  // namespace fnvlp::negatives
