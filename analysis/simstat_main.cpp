// fnvlp-simstat: exact per-anchor false-negative thresholds, quantile profiles and FN
// precision/recall of GloFND's lambda, the exact threshold and simulated FNC (ARCHITECTURE.md §11).
#include <spdlog/spdlog.h>

#include <cstring>
#include <cxxopts.hpp>
#include <iostream>

#include "fnvlp/comm/job_main.hpp"
#include "fnvlp/comm/watchdog.hpp"
#include "fnvlp/core/error.hpp"
#include "fnvlp/similarity/simstat.hpp"
#include "fnvlp/similarity/spaces.hpp"

int main(int argc, char** argv) {
  // Asked by the SLURM scripts where a job is planned (a login node: maybe no MPI launcher, no
  // device): where this build's kernels run, which decides whether the stage asks for GPUs.
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--kokkos-space") == 0) {
      std::cout << fnvlp::similarity::ExecSpace::name() << "\n";
      return 0;
    }
  return fnvlp::job_main(argc, argv, "fnvlp-simstat", [](fnvlp::Comm& comm, int argc, char** argv) {
    fnvlp::similarity::JobOptions o;
    auto& p = o.params;
    double watchdog_s = 1800;
    std::string path = "auto";
    cxxopts::Options cli("fnvlp-simstat",
                         "Global similarity statistics of an embeddings file (run under mpirun)");
    // clang-format off
    cli.add_options()
      ("embeddings", "RUN/embeddings/epoch-EEE.h5", cxxopts::value(o.embeddings))
      ("out", "STATS.h5 to write", cxxopts::value(o.out))
      ("alpha", "false-negative fraction: threshold = ceil(alpha * n_neg)-th largest",
       cxxopts::value(p.alpha)->default_value("0.01"))
      ("quantiles", "quantiles per anchor (m >= 2, min to max)",
       cxxopts::value(p.quantiles)->default_value("100"))
      ("lambda-from", "GloFND lambda: a run directory (newest embeddings) or an embeddings file",
       cxxopts::value(o.lambda_from))
      ("json", "summary JSON to write", cxxopts::value(o.json))
      ("bins", "histogram bins over [-1, 1] (quantile error < 2/bins)",
       cxxopts::value(p.bins)->default_value("4096"))
      ("tile", "candidate columns per GEMM tile", cxxopts::value(p.tile)->default_value("4096"))
      ("row-block", "most anchors per block", cxxopts::value(p.row_block)->default_value("4096"))
      ("memory-mb", "memory budget per rank for one block's state",
       cxxopts::value(p.memory_mb)->default_value("1024"))
      ("fnc-batch", "batch size of the FNC simulation (0: off)",
       cxxopts::value(p.fnc_batch)->default_value("256"))
      ("fnc-seed", "seed of the FNC batches", cxxopts::value(p.fnc_seed)->default_value("0"))
      ("device-tile", "candidate columns per GEMM tile on a GPU (the device path)",
       cxxopts::value(p.device_tile)->default_value("32768"))
      ("device-memory-mb", "device memory per rank for one block's buffers on a GPU, besides "
       "the resident candidates (N x (4 dim + 12) bytes)",
       cxxopts::value(p.device_memory_mb)->default_value("8192"))
      ("start-sample", "candidates sampled for the starting thresholds (-1: N/64, at most 8192; "
       "0: none; results never change)", cxxopts::value(p.start_sample)->default_value("-1"))
      ("path", "auto (a GPU where the build's Kokkos runs on one, else the host), host (the BLAS "
       "GEMM), generic (the exact double sums on the host, which a GPU's results equal bit for "
       "bit) or device (a GPU's algorithm; on the host with stand-ins for its GEMMs)",
       cxxopts::value(path)->default_value("auto"))
      ("threads", "Kokkos threads per rank where its host backend is threaded (OpenMP); the "
       "GEMM runs on one BLAS thread", cxxopts::value(o.threads)->default_value("1"))
      ("kokkos-space", "print the Kokkos execution space the kernels run on (Cuda: a GPU; Serial, "
       "OpenMP: the host) and exit, without MPI or a device")
      ("watchdog-s", "abort the job (exit 4) when a rank reports no progress for this many "
       "seconds (<= 0: off)", cxxopts::value(watchdog_s)->default_value("1800"));
    // clang-format on
    const auto parsed = fnvlp::parse_cli(cli, argc, argv, comm, {"embeddings", "out"});
    if (!parsed) return 0;
    FNVLP_CHECK(path == "auto" || path == "host" || path == "generic" || path == "device",
                "--path must be auto, host, generic or device, got '" << path << "'");
    p.host = path == "host" || path == "generic";
    p.generic_path = path == "generic";
    p.device_path = path == "device";
    const fnvlp::ToolWatchdog dog(comm, watchdog_s);
    fnvlp::similarity::KokkosRuntime kokkos(o.threads);  // after MPI, finalised before MPI_Finalize
    const auto s = fnvlp::similarity::run_simstat(comm, o);
    if (comm.is_root()) {
      for (const char* m : {"image", "text"}) {
        const auto& j = s[m];
        spdlog::info(
            "fnvlp-simstat: {} anchors: mean threshold {:.4f}; exact P/R {:.3f}/{:.3f}; "
            "FNC P/R {:.3f}/{:.3f} (|err| {:.4f})",
            m, j["mean_threshold"].get<double>(), j["exact"]["precision"].get<double>(),
            j["exact"]["recall"].get<double>(), j["fnc"]["precision"].get<double>(),
            j["fnc"]["recall"].get<double>(), j["fnc"]["mean_abs_error"].get<double>());
      }
      spdlog::info("fnvlp-simstat: {:.2f} s on {} ranks -> {}", s["seconds"].get<double>(),
                   comm.size(), o.out);
    }
    return 0;
  });
}
