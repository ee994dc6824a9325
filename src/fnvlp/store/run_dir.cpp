#include "fnvlp/store/run_dir.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "fnvlp/core/error.hpp"
#include "fnvlp/core/fault.hpp"
#include "fnvlp/core/timer.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace fnvlp::store {

// --- checked files ------------------------------------------------------------------------------

CheckedFile::CheckedFile(const std::string& path) : path_(path) {
  // O_NOFOLLOW: a symlink planted at the name is an error, never a write somewhere else.
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  FNVLP_CHECK(fd_ >= 0, "cannot create '" << path << "': "
                                          << (errno == ELOOP ? "it is a symbolic link, not followed"
                                                             : std::strerror(errno)));
}

CheckedFile::~CheckedFile() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {
thread_local int64_t t_saving_step = -1;
}  // namespace

SavingCheckpoint::SavingCheckpoint(int64_t step) : saved_(t_saving_step) { t_saving_step = step; }
SavingCheckpoint::~SavingCheckpoint() { t_saving_step = saved_; }
int64_t SavingCheckpoint::step() { return t_saving_step; }

void CheckedFile::write(const void* data, size_t size) {
  FNVLP_CHECK(fd_ >= 0, "write to closed file '" << path_ << "'");
  const bool saving = t_saving_step >= 0;
  if (saving) fault::point("checkpoint.write", t_saving_step, path_);
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0 && errno == EINTR) continue;
    FNVLP_CHECK(n > 0, "cannot write '"
                           << path_ << "': " << (n < 0 ? std::strerror(errno) : "wrote 0 bytes"));
    p += n;
    size -= static_cast<size_t>(n);
  }
  // After the bytes: a process killed here leaves a partly written checkpoint file behind.
  if (saving) fault::point("checkpoint.kill", t_saving_step, path_);
}

void CheckedFile::sync() {
  FNVLP_CHECK(fd_ >= 0, "fsync of closed file '" << path_ << "'");
  FNVLP_CHECK(::fsync(fd_) == 0, "cannot fsync '" << path_ << "': " << std::strerror(errno));
}

void CheckedFile::close() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  FNVLP_CHECK(::close(fd) == 0, "cannot close '" << path_ << "': " << std::strerror(errno));
}

void write_file(const std::string& path, std::string_view data) {
  CheckedFile f(path);
  f.write(data);
  f.close();
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  FNVLP_CHECK(fd >= 0, "cannot open '" << path << "' to fsync: " << std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  FNVLP_CHECK(rc == 0, "cannot fsync '" << path << "': " << std::strerror(err));
}

void write_file_atomic(const std::string& path, std::string_view data,
                       const std::string& tmp_suffix) {
  const std::string tmp = path + tmp_suffix;
  ::unlink(tmp.c_str());  // a leftover of a crash, or a planted link: replaced, never followed
  try {
    CheckedFile f(tmp);
    f.write(data);
    f.sync();
    f.close();
  } catch (...) {
    ::unlink(tmp.c_str());  // a partial temp file would only hold disk space
    throw;
  }
  FNVLP_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0,
              "cannot rename '" << tmp << "' to '" << path << "': " << std::strerror(errno));
  const fs::path parent = fs::path(path).parent_path();
  fsync_path(parent.empty() ? "." : parent.string());
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  FNVLP_CHECK(in.good(), "cannot open '" << path << "': " << std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  FNVLP_CHECK(!in.bad(), "cannot read '" << path << "'");
  return ss.str();
}

// --- run directory ------------------------------------------------------------------------------

const char* to_string(RunStatus status) {
  switch (status) {
    case RunStatus::kCompleted:
      return "completed";
    case RunStatus::kPreempted:
      return "preempted";
    case RunStatus::kFailed:
      return "failed";
  }
  return "unknown";
}

RunDir::RunDir(const std::string& path, const Comm& comm) : path_(path), comm_(comm) {
  FNVLP_CHECK(!path.empty(), "run directory: empty path");
  while (path_.size() > 1 && path_.back() == '/') path_.pop_back();
  comm.collective([&] {
    if (!comm.is_root()) return;
    for (const std::string& dir : {path_, logs_dir(), checkpoints_dir(), embeddings_dir()}) {
      std::error_code ec;
      fs::create_directories(dir, ec);
      FNVLP_CHECK(!ec && fs::is_directory(dir),
                  "cannot create run directory '" << dir << "': " << ec.message());
    }
  });
}

std::string RunDir::embeddings_path(int64_t epoch) const {
  char name[32];
  std::snprintf(name, sizeof(name), "epoch-%03lld.h5", static_cast<long long>(epoch));
  return embeddings_dir() + "/" + name;
}

std::string RunDir::cached_embeddings_path(int64_t epoch) const {
  char name[32];
  std::snprintf(name, sizeof(name), "cached-%03lld.h5", static_cast<long long>(epoch));
  return embeddings_dir() + "/" + name;
}

std::string newest_epoch_embeddings(const std::string& run_dir) {
  const fs::path dir = fs::path(run_dir) / "embeddings";
  std::string newest;
  if (!fs::is_directory(dir)) return newest;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    // epoch-EEE.h5 is zero-padded, so the lexicographic maximum is the newest epoch.
    if (name.rfind("epoch-", 0) == 0 && e.path().extension() == ".h5" && e.path().string() > newest)
      newest = e.path().string();
  }
  return newest;
}

void RunDir::write_config(const std::string& resolved_yaml) const {
  comm_.collective([&] {
    if (comm_.is_root()) write_file_atomic(config_path(), resolved_yaml);
  });
}

void RunDir::write_summary(const RunSummary& s, bool this_rank) const {
  write_summary_at(path_, comm_, s, this_rank);
}

bool write_summary_at(const std::string& run_dir, const Comm& comm, const RunSummary& s,
                      bool this_rank) {
  if (!this_rank && !comm.is_root()) return false;
  if (!fs::is_directory(run_dir)) return false;
  json j = {{"status", to_string(s.status)},
            {"exit_code", s.exit_code},
            {"steps", s.steps},
            {"samples", s.samples},
            {"seconds", s.seconds},
            {"samples_per_second", s.seconds > 0 ? s.samples / s.seconds : 0.0},
            {"skipped_steps", s.skipped_steps},
            {"world_size", comm.size()},
            {"finished_at", utc_now_iso8601()},
            {"final_metrics", s.final_metrics.is_null() ? json::object() : s.final_metrics}};
  if (!s.error.empty()) j["error"] = s.error;
  if (this_rank) j["failed_rank"] = comm.rank();
  if (s.extra.is_object())
    for (const auto& [k, v] : s.extra.items()) j[k] = v;
  // Failed ranks may write at the same moment (two watchdogs): the last rename wins, whole.
  write_file_atomic(run_dir + "/summary.json", j.dump(2) + "\n",
                    this_rank ? ".tmp.rank-" + std::to_string(comm.rank()) : ".tmp");
  return true;
}

// --- metrics.jsonl ------------------------------------------------------------------------------

MetricsWriter::MetricsWriter(const std::string& path, const Comm& comm,
                             std::optional<int64_t> resume_step)
    : path_(path), active_(comm.is_root()) {
  int64_t dropped = 0;
  comm.collective([&] {
    if (!active_) return;
    std::string kept;
    if (resume_step && fs::exists(path_)) {
      // Keep the records of steps the resumed run will not redo. A line that does not parse is
      // the torn last write of a killed job (or foreign text): dropped as well.
      std::istringstream in(read_file(path_));
      std::string line;
      while (std::getline(in, line)) {
        if (line.empty()) continue;
        const json rec = json::parse(line, nullptr, /*allow_exceptions=*/false);
        const bool keep = rec.is_object() && rec.contains("step") &&
                          rec["step"].is_number_integer() &&
                          rec["step"].get<int64_t>() <= *resume_step;
        if (keep) {
          kept += line;
          kept += '\n';
        } else {
          ++dropped;
        }
      }
    }
    // Rewritten whole (temp + rename): a crash here leaves either the old or the filtered file.
    write_file_atomic(path_, kept);
    file_ = std::fopen(path_.c_str(), "a");
    FNVLP_CHECK(file_, "cannot open '" << path_ << "' for append: " << std::strerror(errno));
  });
  dropped_ = dropped;
  if (active_ && resume_step && dropped > 0)
    spdlog::info("metrics: resuming at step {}: dropped {} record(s) of later steps from {}",
                 *resume_step, dropped, path_);
}

MetricsWriter::~MetricsWriter() {
  if (file_) std::fclose(file_);
}

void MetricsWriter::write(const json& record) {
  if (!active_) return;
  FNVLP_CHECK(file_, "metrics: write after close to '" << path_ << "'");
  FNVLP_CHECK(record.is_object() && record.contains("step") && record["step"].is_number_integer(),
              "metrics: a record needs an integer 'step': " << record.dump());
  const std::string line = record.dump() + "\n";
  const bool ok =
      std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0;
  FNVLP_CHECK(ok, "cannot write '" << path_ << "': " << std::strerror(errno));
}

void MetricsWriter::close() {
  if (!file_) return;
  std::FILE* f = file_;
  file_ = nullptr;
  FNVLP_CHECK(std::fclose(f) == 0, "cannot close '" << path_ << "': " << std::strerror(errno));
}

}  // namespace fnvlp::store
