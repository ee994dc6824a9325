#pragma once
// TCL (loss/tcl.hpp) as a plug-in (method.hpp): intra-modal contrast of two augmented views (IMC)
// and global-local mutual information (LMI) added to the step's loss with their weights.
#include "fnvlp/data/augment.hpp"
#include "fnvlp/negatives/method.hpp"
#include "fnvlp/negatives/method_config.hpp"

namespace fnvlp::negatives {

class TclMethod : public Method {
 public:
  TclMethod(const MethodEnv& env, TclConfig cfg) : env_(env), cfg_(cfg) {}
  std::string name() const override { return "tcl"; }
  void extra_losses(StepContext& s, std::vector<NamedLoss>& out) override;
  bool wants_second_view() const override { return true; }
  std::vector<std::string> extra_loss_names() const override { return {"imc", "lmi"}; }

 private:
  MethodEnv env_;
  TclConfig cfg_;
};

}  // namespace fnvlp::negatives
