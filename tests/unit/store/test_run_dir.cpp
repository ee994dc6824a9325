// The run directory: its layout, config.yaml and summary.json, metrics.jsonl truncation on resume
// and the newest epoch embeddings.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/store/run_dir.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace fnvlp::store;

namespace {

std::string fresh_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/fnvlp_rundir_" + name;
  fs::remove_all(dir);
  return dir;
}

std::vector<json> read_jsonl(const std::string& path) {
  std::vector<json> out;
  std::istringstream in(read_file(path));
  std::string line;
  while (std::getline(in, line)) out.push_back(json::parse(line));
  return out;
}

// --- run directory ------------------------------------------------------------------------------

TEST(RunDir, CreatesTheLayoutAndWritesConfigAndSummary) {
  fnvlp::Comm comm;
  const std::string path = fresh_dir("run");
  RunDir run(path + "/", comm);
  EXPECT_EQ(run.path(), path);
  for (const auto& d : {run.logs_dir(), run.checkpoints_dir(), run.embeddings_dir()})
    EXPECT_TRUE(fs::is_directory(d)) << d;
  EXPECT_EQ(run.embeddings_path(3), path + "/embeddings/epoch-003.h5");

  run.write_config("model: tiny\nbatch_size: 8\n");
  EXPECT_EQ(read_file(run.config_path()), "model: tiny\nbatch_size: 8\n");
  EXPECT_FALSE(fs::exists(run.config_path() + ".tmp"));

  RunSummary s;
  s.status = RunStatus::kPreempted;
  s.exit_code = 3;  // the requeue code (train/signals.hpp)
  s.steps = 120;
  s.samples = 960;
  s.seconds = 4.0;
  s.skipped_steps = 2;
  s.final_metrics = {{"itc", 1.25}};
  s.extra = {{"resumed_from", 100}};
  run.write_summary(s);
  const json j = json::parse(read_file(run.summary_path()));
  EXPECT_EQ(j["status"], "preempted");
  EXPECT_EQ(j["exit_code"], 3);
  EXPECT_EQ(j["steps"], 120);
  EXPECT_DOUBLE_EQ(j["samples_per_second"].get<double>(), 240.0);
  EXPECT_EQ(j["skipped_steps"], 2);
  EXPECT_EQ(j["final_metrics"]["itc"], 1.25);
  EXPECT_EQ(j["resumed_from"], 100);
  EXPECT_EQ(j["world_size"], comm.size());
  EXPECT_FALSE(j.contains("error"));

  s.status = RunStatus::kFailed;
  s.error = "boom";
  run.write_summary(s);
  EXPECT_EQ(json::parse(read_file(run.summary_path()))["error"], "boom");
}

TEST(RunDir, UncreatableDirectoryIsACollectiveError) {
  fnvlp::Comm comm;
  const std::string file = fresh_dir("blocker");
  std::ofstream(file) << "a file where the run directory should go";
  EXPECT_THROW(RunDir(file + "/run", comm), fnvlp::CollectiveError);
}

TEST(MetricsWriter, NewRunStartsEmptyAndFlushesEachLine) {
  fnvlp::Comm comm;
  const std::string path = fresh_dir("metrics_new") + ".jsonl";
  std::ofstream(path) << R"({"step": 1, "old": true})"
                      << "\n";
  MetricsWriter w(path, comm);
  EXPECT_EQ(read_file(path), "");
  w.write({{"step", 1}, {"loss", 2.5}});
  // Visible before close: a killed job keeps every completed line.
  const auto lines = read_jsonl(path);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["loss"], 2.5);
  EXPECT_THROW(w.write({{"loss", 1.0}}), fnvlp::Error);  // no step
  w.close();
}

TEST(MetricsWriter, ResumeDropsLaterStepsAndTornLines) {
  fnvlp::Comm comm;
  const std::string path = fresh_dir("metrics_resume") + ".jsonl";
  {
    MetricsWriter w(path, comm);
    for (int s = 10; s <= 50; s += 10) w.write({{"step", s}, {"loss", 1.0 / s}});
  }
  std::ofstream(path, std::ios::app) << R"({"step": 60, "lo)";  // killed mid-line
  {
    MetricsWriter w(path, comm, /*resume_step=*/30);
    EXPECT_EQ(w.dropped_on_resume(), 3);  // 40, 50 and the torn 60
    w.write({{"step", 40}, {"loss", 0.0}});
  }
  const auto lines = read_jsonl(path);
  ASSERT_EQ(lines.size(), 4u);
  std::vector<int> steps;
  for (const auto& l : lines) steps.push_back(l["step"].get<int>());
  EXPECT_EQ(steps, (std::vector<int>{10, 20, 30, 40}));
  EXPECT_EQ(lines[3]["loss"], 0.0);
  // Resuming where no file exists yet starts one.
  const std::string fresh = fresh_dir("metrics_none") + ".jsonl";
  MetricsWriter w(fresh, comm, 5);
  EXPECT_TRUE(fs::exists(fresh));
}

TEST(RunDir, NewestEpochEmbeddingsIgnoresStepExports) {
  fnvlp::Comm comm;
  const std::string path = fresh_dir("newest");
  EXPECT_EQ(newest_epoch_embeddings(path), "");  // no run directory at all
  RunDir run(path, comm);
  EXPECT_EQ(newest_epoch_embeddings(path), "");
  for (const int64_t epoch : {2, 10, 9}) write_file(run.embeddings_path(epoch), "");
  write_file(run.embeddings_dir() + "/step-0000999.h5", "");
  write_file(run.embeddings_dir() + "/epoch-011.h5.tmp", "");
  EXPECT_EQ(newest_epoch_embeddings(path), run.embeddings_path(10));
}

}  // namespace
