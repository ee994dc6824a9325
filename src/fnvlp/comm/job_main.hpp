#pragma once
// The shared shape of every executable's main(): MPI up, logging up, one catch that logs the
// error and aborts the whole job with a non-zero code (so no rank waits on a dead peer).
#include <cxxopts.hpp>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "fnvlp/comm/comm.hpp"

namespace fnvlp {

// Exit code for bad command-line usage (cxxopts errors); other failures exit 1.
inline constexpr int kExitUsage = 2;

// Runs `body(comm, argc, argv)` on every rank and returns its exit code. Exceptions are logged
// with the rank and end the job through Comm::abort. Command-line errors (cxxopts exceptions)
// print once on rank 0 and return kExitUsage on every rank without aborting.
int job_main(int argc, char** argv, const char* program,
             const std::function<int(Comm&, int, char**)>& body);

// Adds -h/--help, parses argv and checks that every option in `required` was given (a usage error
// naming the missing ones). Returns nullopt once rank 0 has printed the help: the job exits 0.
std::optional<cxxopts::ParseResult> parse_cli(cxxopts::Options& cli, int argc, char** argv,
                                              const Comm& comm,
                                              const std::vector<std::string>& required = {});

}  // namespace fnvlp
