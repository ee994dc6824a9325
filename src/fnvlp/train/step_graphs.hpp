#pragma once
// CUDA graphs of the training step (train.cuda_graphs): the static step's device work (forward,
// backward, gradient average, optimizer) captured once per input shape and replayed, so that a
// step costs the host one graph launch instead of thousands of operator dispatches and kernel
// launches. The captured function must read its inputs from, and write its results to, tensors at
// fixed addresses (refilled before each call) and must not read the device from the host: the
// static step (static_step.cpp) is built that way.
//
// Per key (the step's shapes): the first call runs eagerly (a warm-up: cuBLAS handles, lazy
// initialisations, the optimizer's state, allocator blocks), the second captures the function on
// a side stream (CUDA's thread-local capture mode, so the loader thread's copies go on) and
// replays it once to do that step's work, every later call replays. All graphs share one memory
// pool: a step's intermediates die with it, and steps never run concurrently. Random draws (the
// default CUDA generator: dropout, the ITM draws) are replayed with the seed and offset the
// generator holds at each replay, the draws an eager step with the same seed makes.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace fnvlp::train {

class StepGraphs {
 public:
  // enabled: capture and replay (CUDA builds; a CPU build refuses); otherwise run() just calls.
  // what: the captured work, for the log ("the step").
  explicit StepGraphs(bool enabled, std::string what = "the step");
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  // Runs `step` for shapes `key`: eagerly the first time, captured and replayed the second,
  // replayed after. A failed capture throws fnvlp::Error naming the key and the cause.
  void run(int64_t key, const std::function<void()>& step);

  bool enabled() const { return enabled_; }
  int64_t graphs() const;   // captured so far
  int64_t replays() const;  // graph launches so far
  int64_t eager() const;    // calls run eagerly so far

 private:
  struct Impl;
  bool enabled_;
  std::string what_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fnvlp::train
