#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "fnvlp/core/error.hpp"
#include "fnvlp/core/log.hpp"

namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Log, EveryRankWritesItsOwnFile) {
  const std::string dir = ::testing::TempDir() + "/fnvlp_log_test";
  std::filesystem::remove_all(dir);
  fnvlp::log::init(3, 4, dir, "debug");
  spdlog::debug("debug line from rank three");
  spdlog::info("info line");
  spdlog::default_logger()->flush();
  const std::string text = read_all(dir + "/rank-3.log");
  EXPECT_NE(text.find("debug line from rank three"), std::string::npos) << text;
  EXPECT_NE(text.find("[info] info line"), std::string::npos) << text;
  EXPECT_FALSE(std::filesystem::exists(dir + "/rank-0.log"));
  fnvlp::log::init(0, 1);  // back to the console-only logger for the other tests
}

TEST(Log, UnknownLevelIsAnError) { EXPECT_THROW(fnvlp::log::init(0, 1, "", "loud"), fnvlp::Error); }

}  // namespace
