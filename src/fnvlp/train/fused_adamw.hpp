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

namespace fnvlp::train {

// Steps `opt` like opt.step(). Returns false when it handed the step to libtorch instead: a
// parameter without state yet (the first step creates it exactly as libtorch does), amsgrad, or
// a parameter that is not a dense float32 CPU tensor.
// grad_scale: every gradient enters the update multiplied by it, as if scaled in place first
// (FlatGradients::clip_factor): gradient clipping without its own pass over the gradients. The
// gradients themselves are left unscaled on the fused path.
bool fused_adamw_step(torch::optim::AdamW& opt, float grad_scale = 1.0f);

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
