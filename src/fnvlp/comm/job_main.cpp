#include "fnvlp/comm/job_main.hpp"

#include <cxxopts.hpp>
#include <iostream>

#include "fnvlp/core/blas.hpp"
#include "fnvlp/core/fault.hpp"
#include "fnvlp/core/log.hpp"
#include "fnvlp/kernels/malloc_tuning.hpp"
#include "fnvlp/version.hpp"

namespace fnvlp {

int job_main(int argc, char** argv, const char* program,
             const std::function<int(Comm&, int, char**)>& body) {
  use_best_blas_kernels(argv);  // may restart the program: before anything else; see blas.hpp
  keep_freed_memory();          // before the first large allocation; see malloc_tuning.hpp
  MpiRuntime mpi(&argc, &argv);
  int code = 0;
  {
    Comm comm;
    log::init(comm.rank(), comm.size());
    fault::set_rank(comm.rank());
    if (comm.is_root())  // a restart onto other kernels is worth a line at the default level
      spdlog::log(blas_core_was_replaced() ? spdlog::level::info : spdlog::level::debug,
                  "{}: BLAS {}", program, blas_description());
    try {
      code = body(comm, argc, argv);
    } catch (const cxxopts::exceptions::exception& e) {
      // Every rank parses the same argv, so every rank lands here: no abort needed.
      if (comm.is_root()) spdlog::error("{}: {} (see --help)", program, e.what());
      code = kExitUsage;
    } catch (const UsageError& e) {
      if (comm.is_root()) spdlog::error("{}: {}", program, e.what());
      code = kExitUsage;
    } catch (const CollectiveError& e) {
      // Every rank holds the same message: say it once, exit cleanly everywhere.
      if (comm.is_root()) spdlog::error("{} failed: {}", program, e.what());
      code = 1;
    } catch (const std::exception& e) {
      spdlog::critical("{} failed on rank {}/{}: {}", program, comm.rank(), comm.size(), e.what());
      spdlog::default_logger()->flush();
      comm.abort(1);
    }
    spdlog::default_logger()->flush();
  }
  return code;
}

std::string agree_on_error(const Comm& comm, const std::string& local_error) {
  const std::vector<std::string> errors = comm.allgather_strings(local_error);
  std::string all;
  bool same_everywhere = true;
  for (size_t r = 0; r < errors.size(); ++r) {
    same_everywhere = same_everywhere && errors[r] == errors[0];
    if (!errors[r].empty())
      all += (all.empty() ? "" : "\n") + ("rank " + std::to_string(r) + ": " + errors[r]);
  }
  return same_everywhere ? errors[0] : all;
}

std::optional<cxxopts::ParseResult> parse_cli(cxxopts::Options& cli, int argc, char** argv,
                                              const Comm& comm,
                                              const std::vector<std::string>& required) {
  cli.add_options()("h,help", "show this help");
  auto args = cli.parse(argc, argv);
  if (args.count("help")) {
    if (comm.is_root()) std::cout << cli.help() << "\n";
    return std::nullopt;
  }
  std::string missing;
  for (const auto& name : required)
    if (!args.count(name)) missing += (missing.empty() ? "--" : ", --") + name;
  if (!missing.empty()) throw cxxopts::exceptions::exception("missing required option " + missing);
  return args;
}

}  // namespace fnvlp
