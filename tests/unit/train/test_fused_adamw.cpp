// The one-pass AdamW step (train/fused_adamw.hpp) against libtorch's AdamW::step: same
// parameters and optimizer state over several steps with two parameter groups, learning-rate
// changes and a parameter without gradient; state written by either loads into the other.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <torch/version.h>
#include <sstream>

#include "fnvlp/train/fused_adamw.hpp"

namespace {

using torch::optim::AdamW;
using torch::optim::AdamWOptions;
using torch::optim::AdamWParamState;

struct Opt {
  std::vector<torch::Tensor> params;
  std::unique_ptr<AdamW> opt;
};

// Two groups as the trainer builds them: weight decay on matrices, none on vectors.
Opt make(uint64_t seed) {
  auto g = at::make_generator<at::CPUGeneratorImpl>(seed);
  Opt s;
  s.params = {torch::randn({64, 33}, g).requires_grad_(), torch::randn({33}, g).requires_grad_(),
              torch::randn({7, 5}, g).requires_grad_()};
  const auto opts = [](double wd) {
    return AdamWOptions(1e-2).betas({0.9, 0.98}).eps(1e-8).weight_decay(wd);
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{s.params[0], s.params[2]},
                      std::make_unique<AdamWOptions>(opts(0.05)));
  groups.emplace_back(std::vector<torch::Tensor>{s.params[1]},
                      std::make_unique<AdamWOptions>(opts(0.0)));
  s.opt = std::make_unique<AdamW>(std::move(groups), opts(0.05));
  return s;
}

void set_grads(Opt& s, int step) {
  auto g = at::make_generator<at::CPUGeneratorImpl>(1000 + step);
  for (size_t i = 0; i < s.params.size(); ++i) {
    // Parameter 2 gets no gradient on odd steps: both implementations must skip it.
    if (i == 2 && step % 2 == 1)
      s.params[i].mutable_grad() = torch::Tensor();
    else
      s.params[i].mutable_grad() = torch::randn(s.params[i].sizes(), g) * (0.1 + step);
  }
}

void set_lr(Opt& s, double lr) {
  for (auto& group : s.opt->param_groups()) group.options().set_lr(lr);
}

const AdamWParamState& state_of(const Opt& s, size_t i) {
  const auto& st = s.opt->state().at(fnvlp::train::optimizer_state_key(*s.opt, s.params[i]));
  return static_cast<const AdamWParamState&>(*st);
}

void expect_same(const Opt& a, const Opt& b) {
  for (size_t i = 0; i < a.params.size(); ++i) {
    EXPECT_TRUE(torch::allclose(a.params[i], b.params[i], 1e-5, 1e-6)) << "param " << i;
    const auto &sa = state_of(a, i), &sb = state_of(b, i);
    EXPECT_EQ(sa.step(), sb.step()) << "param " << i;
    EXPECT_TRUE(torch::allclose(sa.exp_avg(), sb.exp_avg(), 1e-5, 1e-7)) << "param " << i;
    EXPECT_TRUE(torch::allclose(sa.exp_avg_sq(), sb.exp_avg_sq(), 1e-5, 1e-9)) << "param " << i;
  }
}

TEST(FusedAdamW, MatchesLibtorchStepByStep) {
  Opt ref = make(1), fused = make(1);
  for (int step = 0; step < 6; ++step) {
    const double lr = 1e-2 * (1.0 + step) / 6.0;  // a warm-up ramp
    set_lr(ref, lr);
    set_lr(fused, lr);
    set_grads(ref, step);
    set_grads(fused, step);
    ref.opt->step();
    const bool took = fnvlp::train::adamw_step_cpu(*fused.opt);
    // The first step creates the state through libtorch; every later one is the fused pass.
    EXPECT_EQ(took, step > 0) << "step " << step;
    expect_same(ref, fused);
  }
  // The parameter without gradient on odd steps took 3 steps, not 6.
  EXPECT_EQ(state_of(fused, 2).step(), 3);
  EXPECT_EQ(state_of(fused, 0).step(), 6);
  // And the update did something: parameters moved away from their initial values.
  EXPECT_FALSE(torch::allclose(fused.params[0], make(1).params[0]));
}

// grad_scale (clipping's factor applied in the pass) is the same as scaling the gradients in
// place first, as clip_grad_norm_ does: bitwise, on the libtorch first step and the fused ones.
TEST(FusedAdamW, GradScaleEqualsScalingTheGradientsFirst) {
  Opt scaled_first = make(2), on_the_fly = make(2);
  for (int step = 0; step < 4; ++step) {
    const float scale = 0.25f + 0.2f * static_cast<float>(step);
    set_grads(scaled_first, step);
    set_grads(on_the_fly, step);
    for (auto& p : scaled_first.params)
      if (p.grad().defined()) p.mutable_grad().mul_(scale);
    fnvlp::train::adamw_step_cpu(*scaled_first.opt);
    fnvlp::train::adamw_step_cpu(*on_the_fly.opt, scale);
    for (size_t i = 0; i < on_the_fly.params.size(); ++i) {
      EXPECT_TRUE(torch::equal(on_the_fly.params[i], scaled_first.params[i]))
          << "param " << i << ", step " << step;
      EXPECT_TRUE(torch::equal(state_of(on_the_fly, i).exp_avg_sq(),
                               state_of(scaled_first, i).exp_avg_sq()))
          << "param " << i << ", step " << step;
    }
  }
}

TEST(FusedAdamW, StateRoundTripsThroughLibtorchSerialization) {
  Opt a = make(2);
  for (int step = 0; step < 3; ++step) {
    set_grads(a, step);
    fnvlp::train::adamw_step_cpu(*a.opt);
  }
  std::stringstream buf;
  {
    torch::serialize::OutputArchive out;
    a.opt->save(out);
    out.save_to(buf);
  }
  Opt b = make(2);
  for (size_t i = 0; i < b.params.size(); ++i) b.params[i].detach().copy_(a.params[i].detach());
  {
    torch::serialize::InputArchive in;
    in.load_from(buf);
    b.opt->load(in);
  }
  // Both continue: a with libtorch, b with the fused step, which finds the loaded state.
  set_grads(a, 3);
  set_grads(b, 3);
  a.opt->step();
  EXPECT_TRUE(fnvlp::train::adamw_step_cpu(*b.opt));
  expect_same(a, b);
}

// ATen's multi-tensor kernel (the CUDA step's path) against the one-pass CPU step, run here on
// CPU tensors (libtorch >= 2.4 has both kernels): same parameters and state within float
// rounding, with a gradient divisor read from a tensor as the CUDA step's clipping passes it.
TEST(FusedAdamW, MultiTensorKernelMatchesOnePassStep) {
  if (!fnvlp::train::multi_tensor_adamw_available())
    GTEST_SKIP() << "this libtorch (" << TORCH_VERSION << ") has no at::_fused_adamw_";
  Opt one_pass = make(3), multi = make(3);
  for (int step = 0; step < 6; ++step) {
    const double lr = 1e-2 * (1.0 + step) / 6.0;
    const float divisor = step % 3 == 0 ? 1.0f : 1.5f + 0.5f * static_cast<float>(step);
    set_lr(one_pass, lr);
    set_lr(multi, lr);
    set_grads(one_pass, 2 * step);  // even: every parameter has its gradient
    set_grads(multi, 2 * step);
    fnvlp::train::adamw_step_cpu(*one_pass.opt, 1.0f / divisor);
    const torch::Tensor grad0 = multi.params[0].grad().clone();
    const bool took = fnvlp::train::adamw_step_cuda(*multi.opt, torch::tensor(divisor));
    // Either path leaves the gradients divided (the kernel stores them back).
    EXPECT_TRUE(torch::allclose(multi.params[0].grad(), grad0 / divisor)) << "step " << step;
    EXPECT_EQ(took, step > 0) << "step " << step;  // the first step creates the state
    // Different formulas (ATen's kernel lerps the first moment), so not allclose element by
    // element where a moment cancels to ~0: within float rounding of each tensor's scale.
    for (size_t i = 0; i < multi.params.size(); ++i) {
      const auto &sa = state_of(one_pass, i), &sb = state_of(multi, i);
      EXPECT_EQ(sa.step(), sb.step());
      const std::pair<torch::Tensor, torch::Tensor> pairs[] = {
          {one_pass.params[i], multi.params[i]},
          {sa.exp_avg(), sb.exp_avg()},
          {sa.exp_avg_sq(), sb.exp_avg_sq()}};
      for (const auto& [a, b] : pairs) {
        const double scale = a.abs().max().item<double>();
        EXPECT_LE((a - b).abs().max().item<double>(), 1e-6 * scale)
            << "param " << i << ", step " << step;
      }
    }
  }
  EXPECT_EQ(state_of(multi, 0).step(), 6);
  EXPECT_FALSE(torch::allclose(multi.params[0], make(3).params[0]));
}

// A group whose parameters are at different step counts (one had no gradient for a step) cannot
// share the kernel's one step value: libtorch's step takes it, and it still matches.
TEST(FusedAdamW, MultiTensorFallsBackOnUnequalSteps) {
  if (!fnvlp::train::multi_tensor_adamw_available())
    GTEST_SKIP() << "this libtorch (" << TORCH_VERSION << ") has no at::_fused_adamw_";
  Opt ref = make(4), multi = make(4);
  for (int step = 0; step < 4; ++step) {
    set_grads(ref, step);  // parameter 2 without gradient on odd steps
    set_grads(multi, step);
    ref.opt->step();
    const bool took = fnvlp::train::adamw_step_cuda(*multi.opt, torch::Tensor());
    // Step 0 creates the state and step 2 finds parameter 2 one step behind parameter 0 (same
    // group): libtorch's. On 1 and 3 parameter 2 has no gradient and is skipped, as libtorch
    // skips it: the kernel's.
    EXPECT_EQ(took, step % 2 == 1) << "step " << step;
    expect_same(ref, multi);
  }
}

// clip_divisor is clip_scale's reciprocal, computed without leaving the tensor.
TEST(FusedAdamW, ClipDivisorIsTheFactorsReciprocal) {
  Opt s = make(5);
  fnvlp::FlatGradients grads(s.params);
  auto g = at::make_generator<at::CPUGeneratorImpl>(9);
  for (auto& p : s.params) p.mutable_grad().copy_(torch::randn(p.sizes(), g));
  for (double max_norm : {0.5, 2.0, 1e6}) {
    const float factor = grads.clip_scale(max_norm);
    const torch::Tensor divisor = grads.clip_divisor(max_norm);
    EXPECT_EQ(divisor.dim(), 0);
    EXPECT_NEAR(divisor.item<double>() * factor, 1.0, 1e-6) << "max_norm " << max_norm;
  }
  EXPECT_EQ(grads.clip_divisor(1e6).item<float>(), 1.0f);  // no clipping below the bound
}

// FlaggedAdamW: a step flagged 0 changes nothing (parameters, moments, step counts), a step
// flagged 1 is adamw_step's, on the host path and on the device kernel (run on CPU tensors where
// this libtorch has it), with the learning rate read from a tensor and clipping on.
void flagged_sequence(bool device_kernel) {
  Opt ref = make(6), flagged = make(6);
  fnvlp::FlatGradients ref_grads(ref.params), grads(flagged.params);
  auto fill = [](Opt& s, int step) {
    auto g = at::make_generator<at::CPUGeneratorImpl>(2000 + step);
    for (auto& p : s.params) p.mutable_grad().copy_(torch::randn(p.sizes(), g) * 3.0);
  };
  // The first step creates the state on both (what the static step's first step does).
  fill(ref, 0);
  fill(flagged, 0);
  fnvlp::train::adamw_step(*ref.opt, ref_grads, 1.0);
  fnvlp::train::adamw_step(*flagged.opt, grads, 1.0);
  ASSERT_TRUE(fnvlp::train::FlaggedAdamW::ready(*flagged.opt));
  fnvlp::train::FlaggedAdamW opt(*flagged.opt, grads, 1.0, device_kernel);
  const int flags[] = {1, 0, 1, 1, 0, 0, 1};
  for (int step = 1; step <= 7; ++step) {
    const double lr = 1e-2 / step;
    const bool taken = flags[step - 1] == 1;
    fill(ref, step);
    fill(flagged, step);
    const auto before = flagged.params[0].detach().clone();
    if (taken) {
      set_lr(ref, lr);
      fnvlp::train::adamw_step(*ref.opt, ref_grads, 1.0);
    }
    opt.step(torch::tensor(lr, torch::kFloat), torch::tensor(taken ? 1.0f : 0.0f));
    if (!taken) EXPECT_TRUE(torch::equal(flagged.params[0], before)) << "step " << step;
  }
  opt.sync_host_steps();
  for (size_t i = 0; i < ref.params.size(); ++i) {
    const auto &sa = state_of(ref, i), &sb = state_of(flagged, i);
    EXPECT_EQ(sb.step(), 5) << "param " << i;  // 1 + the four steps taken
    EXPECT_EQ(sa.step(), sb.step()) << "param " << i;
    const std::pair<torch::Tensor, torch::Tensor> pairs[] = {{ref.params[i], flagged.params[i]},
                                                             {sa.exp_avg(), sb.exp_avg()},
                                                             {sa.exp_avg_sq(), sb.exp_avg_sq()}};
    for (const auto& [a, b] : pairs) {
      const double scale = a.abs().max().item<double>();
      EXPECT_LE((a - b).abs().max().item<double>(), 1e-6 * scale) << "param " << i;
    }
  }
}

TEST(FlaggedAdamW, HostPathTakesOrSkipsOnTheFlag) { flagged_sequence(false); }

TEST(FlaggedAdamW, DeviceKernelTakesOrSkipsOnTheFlag) {
  if (!fnvlp::train::multi_tensor_adamw_available())
    GTEST_SKIP() << "this libtorch (" << TORCH_VERSION << ") has no at::_fused_adamw_";
  flagged_sequence(true);
}

TEST(FlaggedAdamW, RefusesAnOptimizerWithoutState) {
  Opt s = make(7);
  fnvlp::FlatGradients grads(s.params);
  EXPECT_FALSE(fnvlp::train::FlaggedAdamW::ready(*s.opt));
  EXPECT_THROW(fnvlp::train::FlaggedAdamW(*s.opt, grads, 1.0), std::exception);
}

}  // namespace
