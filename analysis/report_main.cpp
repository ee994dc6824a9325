// fnvlp-report: HTML + JSON report of a pretraining run, its simstat statistics and a campaign.
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <cxxopts.hpp>
#include <iostream>

#include "fnvlp/comm/job_main.hpp"
#include "fnvlp/report/report.hpp"
#include "fnvlp/train/failure.hpp"

int main(int argc, char** argv) {
  return fnvlp::job_main(argc, argv, "fnvlp-report", [](fnvlp::Comm& comm, int argc, char** argv) {
    fnvlp::report::Options o;
    const char* env_script = std::getenv("FNVLP_PLOTS_SCRIPT");
    o.plots_script = env_script ? env_script : FNVLP_PLOTS_SCRIPT;
    cxxopts::Options cli("fnvlp-report", "False-negative report of a run and/or a campaign");
    // clang-format off
    cli.add_options()
      ("run", "pretraining run directory", cxxopts::value(o.run_dir))
      ("stats", "STATS.h5 of fnvlp-simstat over the run's embeddings", cxxopts::value(o.stats))
      ("campaign", "campaign directory (tasks/<method>-s<seed>/)", cxxopts::value(o.campaign_dir))
      ("out", "report directory", cxxopts::value(o.out_dir))
      ("python", "python with matplotlib", cxxopts::value(o.python)->default_value("/usr/bin/python3"))
      ("plots-script", "plot script (default: analysis/plots.py or $FNVLP_PLOTS_SCRIPT)",
       cxxopts::value(o.plots_script))
      ("horizon", "long-horizon GloFND summary JSON (default: results/long_horizon.json beside "
       "the plot script; none: off)", cxxopts::value(o.horizon));
    // clang-format on
    const auto parsed = fnvlp::parse_cli(cli, argc, argv, comm, {"out"});
    if (!parsed) return 0;
    // The report is small: rank 0 builds it, the others wait for the outcome.
    comm.collective([&] {
      if (!comm.is_root()) return;
      const auto r = fnvlp::report::build_report(o);
      // Its own peak (the plot script's process not included): the report streams STATS.h5, so
      // this does not grow with the number of pairs (tests/integration/report_memory.sh).
      spdlog::info("fnvlp-report: {} plots, {} notes -> {}/report.html; peak memory {:.1f} MiB",
                   r["plots"].size(), r["notes"].size(), o.out_dir,
                   double(fnvlp::train::host_memory().peak) / (1 << 20));
    });
    return 0;
  });
}
