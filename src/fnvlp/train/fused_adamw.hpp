#pragma once
// One AdamW step (Loshchilov & Hutter 2019, Alg. 2) over a torch::optim::AdamW's parameters in a
// single pass per element, on the optimizer's own state:
//   θ ← θ (1 − lr λ);  m ← β1 m + (1 − β1) g;  v ← β2 v + (1 − β2) g²;
//   θ ← θ − (lr / (1 − β1^t)) · m / (sqrt(v) / sqrt(1 − β2^t) + ε)
// libtorch's AdamW::step runs this as seven separate tensor passes (mul_, mul_, add_, mul_,
// addcmul_, sqrt/div/add_, addcdiv_): ~40 ms per step for the tiny preset's 5M parameters on one
// core, most of it memory traffic. Same formulas, same state objects (AdamWParamState in the
// optimizer's state map), so checkpoints written with either load into the other.
#include <torch/torch.h>

#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "fnvlp/comm/flat_gradients.hpp"
#include "fnvlp/comm/tensors.hpp"

namespace fnvlp::train {

// Steps `opt` like opt.step(). Returns false when it handed the step to libtorch instead: a
// parameter without state yet (the first step creates it exactly as libtorch does), amsgrad, or
// a parameter that is not a dense float32 CPU tensor.
// grad_scale: every gradient enters the update multiplied by it, as if scaled in place first
// (FlatGradients::clip_scale): gradient clipping without its own pass over the gradients. The
// gradients themselves are left unscaled on the fused path.
bool adamw_step_cpu(torch::optim::AdamW& opt, float grad_scale = 1.0f);

// Whether this libtorch has ATen's multi-tensor AdamW kernel (at::_fused_adamw_, the kernel of
// torch.optim.AdamW(fused=True); CUDA from 2.0, CPU from 2.4).
bool multi_tensor_adamw_available();

// The same step through at::_fused_adamw_: one kernel launch per parameter group and chunk of
// tensors instead of libtorch's ~8 launches per parameter (93 parameters for `tiny`), so on CUDA
// the step costs the GPU's time, not the host's. The update is the formula above in float.
// grad_divisor: undefined, or a 0-dim float tensor on the parameters' device that every gradient
// is divided by before it enters the update (FlatGradients::clip_divisor); read by the kernel, so
// clipping needs no host read of the gradient norm. Unlike adamw_step_cpu's, the gradients are
// left divided (the kernel stores them back). Falls back to libtorch's step (the gradients
// divided first) on the first step (no state yet), amsgrad, a parameter that is not float32 or
// has a sparse gradient, or a group whose parameters are at different step counts; returns false
// then.
bool adamw_step_cuda(torch::optim::AdamW& opt, const torch::Tensor& grad_divisor);

// The training step's AdamW, chosen in this one place: adamw_step_cuda for CUDA parameters
// (where this libtorch has it), adamw_step_cpu otherwise; clip > 0 clips by the global norm of
// `grads`'s buffer inside the step. Returns whether a fused path took it.
bool adamw_step(torch::optim::AdamW& opt, FlatGradients& grads, double clip);

// AdamW for a step that decides on the device whether it is taken (train.static_step and CUDA
// graphs): nothing is read back to the host. The learning rate comes from a 0-dim tensor, each
// parameter's step count lives in a device tensor (the optimizer state's host counts are refreshed
// by sync_host_steps), and a step whose `finite` flag is 0 changes nothing: parameters, moments and
// counts. device_kernel (CUDA parameters by default): one at::_fused_adamw_ per group with
// found_inf = 1 - finite and clipping as its grad_scale (libtorch >= 2.0); otherwise the flag and
// the learning rate are read on the host (CPU tensors: no wait) and adamw_step runs or not.
class FlaggedAdamW {
 public:
  // Needs the optimizer's state (taken after its first step, or a resume): call ready() first.
  FlaggedAdamW(torch::optim::AdamW& opt, FlatGradients& grads, double clip,
               bool device_kernel = false);
  // Whether every parameter with a gradient has its AdamW state.
  static bool ready(const torch::optim::AdamW& opt);
  // lr, finite: 0-dim float tensors on the parameters' device (finite: 1 taken, 0 skipped).
  void step(const torch::Tensor& lr, const torch::Tensor& finite);
  // The device step counts into the optimizer state (before it is saved or read).
  void sync_host_steps();
  bool device_kernel() const { return device_kernel_; }

 private:
  struct Group {
    std::vector<torch::Tensor> p, g, m, v, steps;
    std::vector<torch::optim::AdamWParamState*> st;
    const torch::optim::AdamWOptions* options = nullptr;
  };
  torch::optim::AdamW& opt_;
  FlatGradients& grads_;
  double clip_;
  bool device_kernel_;
  std::vector<Group> groups_;
  torch::Tensor steps_;  // float [parameters], every group's counts (device_kernel)
};

// A parameter's key in libtorch's optimizer state map: its TensorImpl's address, printed
// (libtorch 1.x, std::string keys) or as the pointer itself (2.x, void* keys).
// (A template so that only the branch of this libtorch's key type is instantiated.)
template <class Optimizer>
auto optimizer_state_key(const Optimizer& opt, const torch::Tensor& p) {
  using Key = typename std::decay_t<decltype(opt.state())>::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream os;
    os << p.unsafeGetTensorImpl();
    return os.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

}  // namespace fnvlp::train
