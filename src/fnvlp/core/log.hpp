#pragma once
// Logging: rank 0 prints to the console; other ranks print only warnings and errors there.
// With a log directory, every rank also writes everything to DIR/rank-R.log.
#include <spdlog/spdlog.h>

#include <string>

namespace fnvlp::log {

// Installs the default spdlog logger for this process; safe to call again (replaces it).
// `level` is one of spdlog's names: trace, debug, info, warn, error, critical, off.
void init(int rank, int size, const std::string& log_dir = "", const std::string& level = "info");

}  // namespace fnvlp::log
