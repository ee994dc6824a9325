// Import time and memory of store::import_weights (tests/bench/bench_weights.sh): builds the
// model of MODEL_YAML, then imports FILE into it and prints one line of JSON: seconds, the
// resident set before (the model alone) and the peak during the import, in MiB.
#include <chrono>
#include <cstdio>
#include <fstream>

#include "fnvlp/core/config.hpp"
#include "fnvlp/model/albef.hpp"
#include "fnvlp/store/weights_io.hpp"
#include "proc_status.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: bench_weights_import MODEL_YAML FILE\n");
    return 2;
  }
  fnvlp::model::ModelConfig mc;
  fnvlp::config::from_yaml(fnvlp::config::load(argv[1]), mc);
  fnvlp::model::Albef model(mc);
  // The peak so far (building the model) is forgotten: VmHWM restarts from the current RSS.
  std::ofstream("/proc/self/clear_refs") << "5";
  const double before = fnvlp::bench::status_mib("VmRSS:");
  const auto t0 = std::chrono::steady_clock::now();
  const auto report = fnvlp::store::import_weights({argv[2]}, *model);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("{\"seconds\": %.3f, \"rss_model_mib\": %.0f, \"peak_mib\": %.0f, \"loaded\": %zu}\n",
              s, before, fnvlp::bench::status_mib("VmHWM:"), report.loaded.size());
  return report.left_at_init.empty() ? 0 : 1;
}
