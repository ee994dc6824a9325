#include "fnvlp/eval/linear_probe.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <map>

#include "fnvlp/core/error.hpp"
#include "fnvlp/core/progress.hpp"

namespace fnvlp::eval {

nlohmann::json ProbeResult::to_json() const {
  return {{"probe_accuracy", test_accuracy},
          {"probe_train_accuracy", train_accuracy},
          {"probe_chance", chance},
          {"probe_classes", classes},
          {"probe_train_images", train_size},
          {"probe_test_images", test_size},
          {"probe_dim", dim}};
}

ProbeResult linear_probe(const std::vector<float>& train_x, const std::vector<int64_t>& train_y,
                         const std::vector<float>& test_x, const std::vector<int64_t>& test_y,
                         int64_t dim, const ProbeConfig& cfg) {
  const auto n = static_cast<int64_t>(train_y.size()), m = static_cast<int64_t>(test_y.size());
  FNVLP_CHECK(dim > 0 && static_cast<int64_t>(train_x.size()) == n * dim &&
                  static_cast<int64_t>(test_x.size()) == m * dim,
              "linear probe: features do not match " << n << " + " << m << " rows of " << dim);
  FNVLP_CHECK(n > 0 && m > 0,
              "linear probe: needs training and test rows, got " << n << " and " << m);
  FNVLP_CHECK(cfg.weight_decay >= 0 && cfg.max_iter > 0,
              "linear probe: weight_decay must be >= 0 and max_iter > 0");
  // Class ids -> 0..C-1 in ascending order of value.
  std::map<int64_t, int64_t> cls;
  for (int64_t y : train_y) cls.emplace(y, 0);
  int64_t next = 0;
  for (auto& [y, c] : cls) c = next++;
  const auto C = static_cast<int64_t>(cls.size());
  FNVLP_CHECK(C >= 2, "linear probe: the training set has " << C << " class(es), need 2 or more");
  std::vector<int64_t> ytr(static_cast<size_t>(n)), yte(static_cast<size_t>(m));
  for (int64_t i = 0; i < n; ++i) ytr[static_cast<size_t>(i)] = cls.at(train_y[i]);
  for (int64_t i = 0; i < m; ++i) {
    auto it = cls.find(test_y[static_cast<size_t>(i)]);
    yte[static_cast<size_t>(i)] = it == cls.end() ? -1 : it->second;
  }

  auto to_double = [&](const std::vector<float>& v, int64_t rows) {
    return torch::from_blob(const_cast<float*>(v.data()), {rows, dim}, torch::kFloat32)
        .to(torch::kFloat64);
  };
  torch::Tensor xtr = to_double(train_x, n), xte = to_double(test_x, m);
  const torch::Tensor mean = xtr.mean(0), sd = xtr.std(0, /*unbiased=*/false).clamp_min(1e-8);
  xtr = (xtr - mean) / sd;
  xte = (xte - mean) / sd;
  const torch::Tensor target = torch::tensor(ytr, torch::kInt64);

  torch::Tensor w = torch::zeros({dim, C}, torch::kFloat64).requires_grad_(true);
  torch::Tensor b = torch::zeros({C}, torch::kFloat64).requires_grad_(true);
  torch::optim::LBFGS opt({w, b}, torch::optim::LBFGSOptions(1.0)
                                      .max_iter(cfg.max_iter)
                                      .history_size(20)
                                      .tolerance_grad(1e-10)
                                      .tolerance_change(1e-12)
                                      .line_search_fn("strong_wolfe"));
  auto closure = [&] {
    progress("eval: linear probe");
    opt.zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy(torch::addmm(b, xtr, w), target) +
                         0.5 * cfg.weight_decay * w.pow(2).sum();
    loss.backward();
    return loss;
  };
  opt.step(closure);

  torch::NoGradGuard no_grad;
  auto accuracy = [&](const torch::Tensor& x, const std::vector<int64_t>& y) {
    const torch::Tensor pred = torch::addmm(b, x, w).argmax(1).contiguous();
    int64_t hits = 0;
    for (size_t i = 0; i < y.size(); ++i) hits += pred.data_ptr<int64_t>()[i] == y[i];
    return 100.0 * static_cast<double>(hits) / static_cast<double>(y.size());
  };
  ProbeResult r;
  r.train_accuracy = accuracy(xtr, ytr);
  r.test_accuracy = accuracy(xte, yte);
  std::vector<int64_t> freq(static_cast<size_t>(C));
  for (int64_t y : ytr) ++freq[static_cast<size_t>(y)];
  const int64_t majority = std::max_element(freq.begin(), freq.end()) - freq.begin();
  r.chance = 100.0 * static_cast<double>(std::count(yte.begin(), yte.end(), majority)) /
             static_cast<double>(m);
  r.classes = C;
  r.train_size = n;
  r.test_size = m;
  r.dim = dim;
  return r;
}

}  // namespace fnvlp::eval
