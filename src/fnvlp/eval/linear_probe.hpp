#pragma once
// Linear probe: multinomial logistic regression on frozen features, the classification view of a
// representation that GloFND reports. Full-batch L-BFGS in double precision: the same inputs and
// thread count give the same weights and accuracy bit for bit.
//
// Features are standardised with the training set's mean and standard deviation; the objective is
//   mean_i CE(W x_i + b, y_i) + weight_decay / 2 * ||W||^2.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "fnvlp/core/config_fields.hpp"

namespace fnvlp::eval {

struct ProbeConfig {
  // clang-format off
  FNVLP_CONFIG_FIELDS(
      (double, weight_decay, 1e-3, config::at_least(0)),
      // L-BFGS iterations (strong-Wolfe line search)
      (int64_t, max_iter, 300, config::at_least(1)),
      // Without a separate training set, images (not pairs: captions of one image must not straddle
      // the split) with mix64(image_id) % test_modulus == 0 form the test split.
      (int64_t, test_modulus, 5, config::at_least(2)))
  // clang-format on
};

struct ProbeResult {
  double train_accuracy = 0, test_accuracy = 0;  // percent
  double chance = 0;  // percent: accuracy of always predicting the most frequent training class
  int64_t classes = 0, train_size = 0, test_size = 0, dim = 0;
  nlohmann::json to_json() const;  // keys probe_accuracy, probe_train_accuracy, probe_chance ...
};

// x: row-major [n, dim] floats; y: class ids >= 0 (any integers: remapped to 0..C-1 by value).
// Test rows whose class is absent from the training set count as errors.
ProbeResult linear_probe(const std::vector<float>& train_x, const std::vector<int64_t>& train_y,
                         const std::vector<float>& test_x, const std::vector<int64_t>& test_y,
                         int64_t dim, const ProbeConfig& cfg);

}  // namespace fnvlp::eval
