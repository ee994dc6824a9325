#pragma once
// The run's training methods and the sampler that composes its batches, from negatives.*,
// sampler.* and loss.soft_targets (train/methods.hpp builds them): a method's sampler (GRIT,
// FALCON) or the uniform one, and the steps of an epoch every rank agrees on.
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/data/sampler.hpp"
#include "fnvlp/model/albef.hpp"
#include "fnvlp/negatives/grouped_sampler.hpp"
#include "fnvlp/negatives/method.hpp"
#include "fnvlp/train/pretrain_config.hpp"
#include "fnvlp/train/trainer.hpp"
#include "fnvlp/train/training_data.hpp"

namespace fnvlp::train {

class MethodSet {
 public:
  using List = std::vector<std::unique_ptr<negatives::Method>>;

  // Collective (the agreed step counts; negatives.method=oracle reads every rank's labels). The
  // methods see `model` for the run's lifetime. --init-from's momentum weights go to a momentum
  // method's copy of the model.
  MethodSet(const Comm& comm, const PretrainConfig& cfg, const PretrainOptions& opt,
            model::Albef& model, const TrainingData& data, torch::Device device);

  // In the order the step calls them (train/methods.hpp).
  List::iterator begin() { return list_.begin(); }
  List::iterator end() { return list_.end(); }
  List::const_iterator begin() const { return list_.begin(); }
  List::const_iterator end() const { return list_.end(); }
  size_t size() const { return list_.size(); }
  negatives::Method& operator[](size_t i) const { return *list_[i]; }
  // Whether any method answers yes (e.g. &Method::wants_second_view).
  bool any(bool (negatives::Method::*asks)() const) const {
    for (const auto& m : list_)
      if (((*m).*asks)()) return true;
    return false;
  }
  bool wants_epoch_embeddings() const { return any(&negatives::Method::wants_epoch_embeddings); }

  negatives::MethodEnv env;                       // what the methods were built with
  std::unique_ptr<data::UniformSampler> uniform;  // the sampler when no method composes batches
  data::Sampler* sampler = nullptr;
  negatives::GroupedSampler* grouped = nullptr;  // sampler when it groups (grit, falcon)
  int64_t uniform_steps = 0;                     // steps of a uniform epoch (epoch 0 always)
  int64_t grouped_steps = 0;  // steps of a grouped epoch (GRIT / FALCON, from epoch 1)

 private:
  List list_;
};

}  // namespace fnvlp::train
