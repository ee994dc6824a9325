#pragma once
// bf16 autocast of CUDA forward passes (train.precision bf16): matmuls and attention in bf16,
// softmax, log-softmax and losses in fp32 by autocast's own rules. Here, below train/, so that
// methods that repeat a forward pass of the step (FALCON's reward) run it in the step's precision.

namespace fnvlp::model {

// Turns CUDA bf16 autocast on and returns whether it was on before; fails without the CUDA build.
bool begin_bf16_autocast();
// Restores the state begin_bf16_autocast found (the cast-weight cache is freed with the outermost).
void end_bf16_autocast(bool previous);

// A scope of bf16 autocast; a no-op when not enabled.
class Bf16Autocast {
 public:
  explicit Bf16Autocast(bool enabled) : enabled_(enabled) {
    if (enabled_) previous_ = begin_bf16_autocast();
  }
  ~Bf16Autocast() {
    if (enabled_) end_bf16_autocast(previous_);
  }
  Bf16Autocast(const Bf16Autocast&) = delete;
  Bf16Autocast& operator=(const Bf16Autocast&) = delete;

 private:
  bool enabled_;
  bool previous_ = false;
};

}  // namespace fnvlp::model
