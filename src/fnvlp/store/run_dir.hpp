#pragma once
// The run directory (ARCHITECTURE.md §9):
//
//   RUN/config.yaml         resolved config (rank 0, temp + rename)
//   RUN/metrics.jsonl       one JSON object per logged step (rank 0, flushed per line)
//   RUN/logs/rank-R.log     per-rank logs (fnvlp::log::init(rank, size, logs_dir()))
//   RUN/checkpoints/        step-NNNNNNN/ + latest (see checkpoint.hpp)
//   RUN/embeddings/         epoch-EEE.h5
//   RUN/summary.json        exit status, steps, samples/s, skipped steps, final metrics
//
// Also the checked file primitives the checkpoint code shares: every write, fsync and close is
// checked, so a full disk surfaces as an exception naming the path and "No space left on device".
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include "fnvlp/comm/comm.hpp"

namespace fnvlp::store {

// --- checked files ------------------------------------------------------------------------------

// A file written through a raw descriptor: write() loops over short writes and EINTR, and any
// failure throws fnvlp::Error with the path and strerror(errno).
class CheckedFile {
 public:
  // Creates or truncates `path` (mode 0644).
  explicit CheckedFile(const std::string& path);
  ~CheckedFile();  // closes silently if close() was not called (an error path is already unwinding)
  CheckedFile(const CheckedFile&) = delete;
  CheckedFile& operator=(const CheckedFile&) = delete;

  void write(const void* data, size_t size);
  void write(std::string_view text) { write(text.data(), text.size()); }
  void sync();   // fsync
  void close();  // checked close; a failed close of a written file means lost data
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

// Marks this thread as saving the checkpoint of `step` for its lifetime: CheckedFile writes
// inside it are the fault-injection sites checkpoint.write and checkpoint.kill (core/fault.hpp),
// with the step as the event number.
class SavingCheckpoint {
 public:
  explicit SavingCheckpoint(int64_t step);
  ~SavingCheckpoint();
  SavingCheckpoint(const SavingCheckpoint&) = delete;
  SavingCheckpoint& operator=(const SavingCheckpoint&) = delete;
  static int64_t step();  // -1 outside a save

 private:
  int64_t saved_;
};

// Writes `data` to `path` (no fsync: the checkpoint commit fsyncs every file it checksums).
void write_file(const std::string& path, std::string_view data);
// Writes `path` + `tmp_suffix`, fsyncs it, renames it over `path`, fsyncs the directory: readers
// see either the old or the new content, never a partial file, even after a crash. Processes
// that may write the same path at once pass distinct suffixes.
void write_file_atomic(const std::string& path, std::string_view data,
                       const std::string& tmp_suffix = ".tmp");
// fsync of a file or a directory (a directory fsync makes renames and new entries durable).
void fsync_path(const std::string& path);
std::string read_file(const std::string& path);

// --- run directory ------------------------------------------------------------------------------

enum class RunStatus { kCompleted, kPreempted, kFailed };
const char* to_string(RunStatus status);

struct RunSummary {
  RunStatus status = RunStatus::kCompleted;
  int exit_code = 0;
  int64_t steps = 0;          // optimizer steps completed (including before a resume)
  int64_t samples = 0;        // samples processed by this process's run (all ranks)
  double seconds = 0;         // wall time of this process's run
  int64_t skipped_steps = 0;  // steps skipped for a non-finite loss
  std::string error;          // message when status is kFailed
  nlohmann::json final_metrics = nlohmann::json::object();
  nlohmann::json extra = nlohmann::json::object();  // merged at the top level (caller's keys)
};

class RunDir {
 public:
  // Collective: rank 0 creates RUN/ and its logs/, checkpoints/ and embeddings/ folders; a failure
  // throws CollectiveError on every rank.
  RunDir(const std::string& path, const Comm& comm);

  const std::string& path() const { return path_; }
  std::string logs_dir() const { return path_ + "/logs"; }
  std::string checkpoints_dir() const { return path_ + "/checkpoints"; }
  std::string embeddings_dir() const { return path_ + "/embeddings"; }
  std::string config_path() const { return path_ + "/config.yaml"; }
  std::string metrics_path() const { return path_ + "/metrics.jsonl"; }
  std::string summary_path() const { return path_ + "/summary.json"; }
  // RUN/embeddings/epoch-EEE.h5
  std::string embeddings_path(int64_t epoch) const;
  // RUN/embeddings/cached-EEE.h5: what the grouped samplers composed epoch EEE + 1 from under
  // sampler.embeddings=cached (the training passes' embeddings; the resume reads them back).
  std::string cached_embeddings_path(int64_t epoch) const;

  // Collective: rank 0 writes the resolved config text atomically.
  void write_config(const std::string& resolved_yaml) const;
  // Not collective (it runs on error paths where peers may be gone): rank 0 writes summary.json
  // atomically, other ranks return at once (with `this_rank`, the calling rank writes it: a
  // failure only that rank knows, recorded as its `failed_rank`). Throws if the write fails.
  void write_summary(const RunSummary& summary, bool this_rank = false) const;

 private:
  std::string path_;
  const Comm& comm_;
};

// RunDir::write_summary for a run directory whose RunDir object is gone or was never made (a
// failure while the trainer is being built): not collective, nothing written when `run_dir` is
// not a directory (returns false).
bool write_summary_at(const std::string& run_dir, const Comm& comm, const RunSummary& summary,
                      bool this_rank);

// Local: the newest RUN/embeddings/epoch-EEE.h5 of a run directory, "" when there is none (the
// on-demand step-SSSSSSS.h5 exports are not epochs). What fnvlp-report and fnvlp-simstat
// --lambda-from read.
std::string newest_epoch_embeddings(const std::string& run_dir);

// metrics.jsonl writer. Only rank 0 touches the file; on other ranks every call is a no-op.
class MetricsWriter {
 public:
  // Constructed on every rank (the truncation on resume is agreed collectively).
  // `resume_step` empty: a new run, any existing file is replaced by an empty one.
  // `resume_step` = S: the run resumes from the checkpoint of step S, so the records it will log
  // again (step > S) and a torn last line are dropped, and the file is reopened for append.
  MetricsWriter(const std::string& path, const Comm& comm,
                std::optional<int64_t> resume_step = std::nullopt);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  // Appends one line; `record` must be an object with an integer "step". Flushed per line, so a
  // killed job loses at most the line being written (which a resume then drops).
  void write(const nlohmann::json& record);
  void close();
  int64_t dropped_on_resume() const { return dropped_; }

 private:
  std::string path_;
  bool active_ = false;
  std::FILE* file_ = nullptr;
  int64_t dropped_ = 0;
};

}  // namespace fnvlp::store
