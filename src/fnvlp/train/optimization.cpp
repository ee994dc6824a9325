#include "fnvlp/train/optimization.hpp"

#include <spdlog/spdlog.h>

#include <string>
#include <utility>

#include "fnvlp/train/fused_adamw.hpp"
#include "fnvlp/train/grad_buckets.hpp"

namespace fnvlp::train {

namespace {

std::unique_ptr<torch::optim::AdamW> make_adamw(const OptimConfig& o,
                                                const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> decay, no_decay;  // weight decay on >= 2-d parameters only
  for (auto& p : params) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  auto options = [&](double wd) {
    return torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(wd);
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(options(o.weight_decay)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(options(0.0)));
  return std::make_unique<torch::optim::AdamW>(std::move(groups), options(o.weight_decay));
}

}  // namespace

Optimization::Optimization(const Comm& comm, std::vector<torch::Tensor> parameters,
                           const OptimConfig& optim, const CommConfig& cfg, const NcclComm* nccl)
    : params(std::move(parameters)), grads(std::make_unique<FlatGradients>(params)) {
  const double bucket_mb = cfg.bucket_mb >= 0 ? cfg.bucket_mb : (nccl ? 25.0 : 0.0);
  if (bucket_mb > 0 && GradBuckets::applies(comm, grads->buffer(), nccl))
    buckets = std::make_unique<GradBuckets>(comm, *grads, params, bucket_mb, cfg.timeout_s, nccl);
  if (comm.is_root() && comm.size() > 1)
    spdlog::info("pretrain: gradient all-reduce {}",
                 buckets ? fmt::format("in {} buckets of ~{} MiB during the backward",
                                       buckets->ranges().size(), bucket_mb)
                         : std::string("after the backward (one all-reduce)"));
  adamw = make_adamw(optim, params);
}

Optimization::~Optimization() = default;

}  // namespace fnvlp::train
