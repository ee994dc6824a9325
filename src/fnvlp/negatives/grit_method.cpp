#include "fnvlp/negatives/grit_method.hpp"

namespace fnvlp::negatives {

void GroupedMethod::on_batch(const nlohmann::json& sampler_state) {
  const ValueStats q = GroupedSampler::q_stats_from_state(sampler_state);
  if (q.n == 0) return;
  q_window_[0] += q.mean;
  q_window_[1] += q.p5;
  q_window_[2] += q.p95;
  q_window_[3] += 1;
}

void GroupedMethod::telemetry(nlohmann::json& m) {
  std::vector<double> q = q_window_;
  env_.comm.allreduce_sum(q);
  std::fill(q_window_.begin(), q_window_.end(), 0.0);
  if (q[3] <= 0) return;
  m["q_mean"] = q[0] / q[3];
  m["q_p5"] = q[1] / q[3];
  m["q_p95"] = q[2] / q[3];
}

GritMethod::GritMethod(const MethodEnv& env, int64_t search_space, const GritConfig& cfg)
    : GroupedMethod(env) {
  GroupedConfig g;
  g.search_space = search_space;
  g.schedule = cfg.schedule;
  g.q = cfg.q;
  const bool hard = g.schedule == QSchedule::kHardening;
  g.q_start = cfg.q_start >= 0 ? cfg.q_start : (hard ? 0.0 : 1.0);
  g.q_end = cfg.q_end >= 0 ? cfg.q_end : (hard ? 1.0 : 0.0);
  g.epochs = env.epochs;
  g.validate(env.batch_size);
  sampler_ =
      std::make_unique<GroupedSampler>(env.partition, env.batch_size, env.seed, env.comm.rank(), g);
}

}  // namespace fnvlp::negatives
