#include "fnvlp/core/log.hpp"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <filesystem>
#include <vector>

#include "fnvlp/core/error.hpp"

namespace fnvlp::log {

void init(int rank, int size, const std::string& log_dir, const std::string& level) {
  auto lvl = spdlog::level::from_str(level);
  FNVLP_CHECK(lvl != spdlog::level::off || level == "off", "unknown log level '" << level << "'");
  std::vector<spdlog::sink_ptr> sinks;
  auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  // Only rank 0 narrates; other ranks speak on the console only when something is wrong.
  console->set_level(rank == 0 ? lvl : spdlog::level::warn);
  console->set_pattern(size > 1 ? "[%H:%M:%S] [%^%l%$] [rank " + std::to_string(rank) + "] %v"
                                : "[%H:%M:%S] [%^%l%$] %v");
  sinks.push_back(console);
  if (!log_dir.empty()) {
    std::filesystem::create_directories(log_dir);
    auto path = std::filesystem::path(log_dir) / ("rank-" + std::to_string(rank) + ".log");
    auto file =
        std::make_shared<spdlog::sinks::basic_file_sink_mt>(path.string(), /*truncate=*/false);
    file->set_level(lvl);
    file->set_pattern("%Y-%m-%dT%H:%M:%S.%e [%l] %v");
    sinks.push_back(file);
  }
  auto logger = std::make_shared<spdlog::logger>("fnvlp", sinks.begin(), sinks.end());
  logger->set_level(lvl);
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(logger);
}

}  // namespace fnvlp::log
