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

// One step's cast cache: autocast keeps the bf16 copy of each fp32 weight it casts until the
// outermost autocast scope ends. A step has several bf16 regions (the encoders, ITM, MLM) with
// fp32 stretches between them (ITC, the methods' thresholds); under this scope the regions nest in
// it, so a weight used in several of them (the text encoder and the fusion layers run twice) is
// cast once per step, and one cast node carries its gradient back. Autocast itself stays off
// outside the regions. A no-op when not enabled.
class AutocastCache {
 public:
  explicit AutocastCache(bool enabled);
  ~AutocastCache();
  AutocastCache(const AutocastCache&) = delete;
  AutocastCache& operator=(const AutocastCache&) = delete;

 private:
  bool enabled_;
};

}  // namespace fnvlp::model
