#pragma once
// The shared shape of every executable's main(): MPI up, logging up, one catch that logs the
// error and aborts the whole job with a non-zero code (so no rank waits on a dead peer).
#include <cxxopts.hpp>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/core/config.hpp"

namespace fnvlp {

// Exit code for bad command-line usage (cxxopts errors); other failures exit 1.
inline constexpr int kExitUsage = 2;

// A command-line or config error that every rank agrees on: job_main reports it once and every
// rank exits with kExitUsage (no abort).
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

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

// Collective: empty when `local_error` is empty on every rank; the error once when every rank
// has the same one (the usual case: same argv, same files); else each failing rank's error,
// prefixed with its rank.
std::string agree_on_error(const Comm& comm, const std::string& local_error);

// Loads the job's typed config on every rank (files layered, then --set overrides; unknown keys,
// wrong types and values outside a field's range are errors: core/config.hpp) and agrees on the
// outcome, so a bad file, key or value on any rank is a UsageError on all of them.
template <class T>
T load_job_config(const Comm& comm, const std::vector<std::string>& paths,
                  const std::vector<std::string>& overrides,
                  std::vector<std::string>* notes = nullptr) {
  T cfg;
  std::string error;
  try {
    cfg = config::load_typed<T>(paths, overrides, notes);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (const std::string agreed = agree_on_error(comm, error); !agreed.empty())
    throw UsageError(agreed);
  return cfg;
}

}  // namespace fnvlp
