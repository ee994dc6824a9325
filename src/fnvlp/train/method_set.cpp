#include "fnvlp/train/method_set.hpp"

#include <filesystem>

#include "fnvlp/core/error.hpp"
#include "fnvlp/negatives/momentum_method.hpp"
#include "fnvlp/train/methods.hpp"

namespace fnvlp::train {

MethodSet::MethodSet(const Comm& comm, const PretrainConfig& cfg, const PretrainOptions& opt,
                     model::Albef& model, const TrainingData& data, torch::Device device)
    : env{comm,
          model,
          cfg.model,
          data.partition,
          data.augment,
          data.train.num_pairs(),
          cfg.train.batch_size,
          cfg.train.epochs,
          static_cast<uint64_t>(cfg.train.seed),
          device,
          cfg.train.precision == Precision::kBf16} {
  if (cfg.negatives.method == negatives::NegativesKind::kOracle)
    require_labels(comm, data.train, data.block());
  list_ = make_methods(cfg, env);
  if (!opt.init_from.empty())  // ALBEF checkpoints carry the momentum model's own weights too
    for (auto& m : list_)
      if (auto* mm = dynamic_cast<negatives::MomentumMethod*>(m.get()))
        mm->init_from(opt.init_from,
                      (std::filesystem::path(opt.run_dir) / "init_weights_momentum.json").string());
  for (auto& m : list_)
    if (m->sampler()) sampler = m->sampler();
  if (!sampler) {
    uniform = std::make_unique<data::UniformSampler>(
        data.partition, cfg.train.batch_size, static_cast<uint64_t>(cfg.train.seed), comm.rank());
    sampler = uniform.get();
  }
  grouped = dynamic_cast<negatives::GroupedSampler*>(sampler);
  // Every rank must run the same number of steps: blocks differ in size by at most one pair.
  uniform_steps = comm.allreduce_min(grouped ? grouped->uniform_batches_per_epoch()
                                             : sampler->batches_per_epoch());
  grouped_steps =
      grouped ? comm.allreduce_min(grouped->grouped_batches_per_epoch()) : uniform_steps;
  FNVLP_CHECK(uniform_steps > 0 && grouped_steps > 0,
              data.dir << ": " << data.train.num_pairs() << " pairs over " << comm.size()
                       << " ranks give no full batch of " << cfg.train.batch_size
                       << " (search spaces of " << cfg.sampler.search_space << ")");
}

}  // namespace fnvlp::train
