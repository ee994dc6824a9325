// fnvlp-eval: zero-shot image-text retrieval of a checkpoint (ITC, then ITM re-ranking of the top
// k_test, as ALBEF evaluates) and an optional linear probe; rows split over MPI ranks.
#include <cxxopts.hpp>
#include <iostream>

#include "fnvlp/comm/job_main.hpp"
#include "fnvlp/comm/watchdog.hpp"
#include "fnvlp/eval/eval_job.hpp"
#include "fnvlp/store/run_lock.hpp"

int main(int argc, char** argv) {
  return fnvlp::job_main(argc, argv, "fnvlp-eval", [](fnvlp::Comm& comm, int argc, char** argv) {
    fnvlp::eval::EvalOptions opt;
    double watchdog_s = 1800;
    cxxopts::Options cli("fnvlp-eval", "zero-shot retrieval evaluation (run under srun/mpirun)");
    // clang-format off
    cli.add_options()
      ("checkpoint", "checkpoint directory (RUN/checkpoints/step-N or .../latest)",
       cxxopts::value(opt.checkpoint))
      ("data", "sharded dataset to evaluate (fnvlp-shard)", cxxopts::value(opt.data_dir))
      ("out", "result JSON", cxxopts::value(opt.out))
      ("k-test", "candidates re-ranked by ITM per query",
       cxxopts::value(opt.retrieval.k_test)->default_value("128"))
      ("batch-size", "encoding chunk", cxxopts::value(opt.retrieval.batch_size)->default_value("64"))
      ("threads", "libtorch threads per rank", cxxopts::value(opt.threads)->default_value("1"))
      ("probe", "also a linear probe on frozen image features (needs labels)",
       cxxopts::value(opt.probe))
      ("probe-train", "probe training shards (default: a split of --data by image)",
       cxxopts::value(opt.probe_train_dir))
      ("probe-weight-decay", "L2 penalty of the probe",
       cxxopts::value(opt.probe_cfg.weight_decay)->default_value("0.001"))
      ("ranks-out", "write every query's rank to this JSON file", cxxopts::value(opt.ranks_out))
      ("verify", "full: each shard's sha256 against its manifest before it is opened; size: sizes",
       cxxopts::value<std::string>()->default_value("full"))
      ("watchdog-s", "abort the job (exit 4) when a rank reports no progress for this many "
       "seconds (<= 0: off)", cxxopts::value(watchdog_s)->default_value("1800"));
    // clang-format on
    const auto parsed = fnvlp::parse_cli(cli, argc, argv, comm);
    if (!parsed) return 0;
    const fnvlp::ToolWatchdog dog(comm, watchdog_s);
    const auto verify = (*parsed)["verify"].as<std::string>();
    if (verify != "full" && verify != "size")
      throw cxxopts::exceptions::exception("--verify takes full or size, not '" + verify + "'");
    opt.verify_checksums = verify == "full";
    // One job writes a result (OUT.lock beside it): another live owner is a usage error (exit 2).
    std::unique_ptr<fnvlp::store::OwnerLock> owner;
    if (!opt.out.empty()) owner = fnvlp::store::own_output_file(comm, opt.out);
    fnvlp::eval::run_evaluation(comm, opt);
    return 0;
  });
}
