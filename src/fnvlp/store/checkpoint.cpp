#include "fnvlp/store/checkpoint.hpp"

#include <spdlog/spdlog.h>
#include <sys/statvfs.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <exception>
#include <filesystem>
#include <mutex>
#include <regex>
#include <sstream>
#include <unordered_set>

#include "fnvlp/core/sha256.hpp"
#include "fnvlp/core/timer.hpp"
#include "fnvlp/data/h5.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace fnvlp::store {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string join_path(const std::string& dir, const std::string& name) {
  return (fs::path(dir) / name).string();
}

// Parses "step-NNNNNNN" (7 or more digits); -1 for anything else (.tmp, .abandoned, latest ...).
int64_t parse_step_dir(const std::string& name) {
  static const std::regex re("^step-([0-9]{7,18})$");
  std::smatch m;
  if (!std::regex_match(name, m, re)) return -1;
  return std::stoll(m[1].str());
}

// A name from a COMMITTED marker is read (hashed, loaded) only if it stays in its checkpoint: a
// relative path without '.', '..' or empty components.
bool inside_checkpoint(const std::string& name) {
  if (name.empty() || name[0] == '/' || name.find('\0') != std::string::npos) return false;
  for (size_t a = 0, b; a <= name.size(); a = b + 1) {
    b = std::min(name.find('/', a), name.size());
    const std::string part = name.substr(a, b - a);
    if (part.empty() || part == "." || part == "..") return false;
  }
  return true;
}

uint64_t free_bytes(const std::string& dir) {
  struct statvfs st {};
  FNVLP_CHECK(::statvfs(dir.c_str(), &st) == 0,
              "statvfs('" << dir << "') failed: " << std::strerror(errno));
  return static_cast<uint64_t>(st.f_bavail) * static_cast<uint64_t>(st.f_frsize);
}

// Regular files under `dir`, as sorted relative paths.
std::vector<std::string> list_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_directory()) continue;
    FNVLP_CHECK(e.is_regular_file(),
                "checkpoint: '" << e.path().string() << "' is not a regular file");
    out.push_back(fs::relative(e.path(), dir).string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Every directory on the way to each file, deepest first (their entries must be durable too).
std::vector<std::string> parent_dirs(const std::string& root,
                                     const std::vector<std::string>& files) {
  std::vector<std::string> dirs;
  for (const auto& f : files)
    for (fs::path p = fs::path(f).parent_path(); !p.empty(); p = p.parent_path())
      dirs.push_back(join_path(root, p.string()));
  std::sort(dirs.begin(), dirs.end(),
            [](const auto& a, const auto& b) { return a.size() > b.size(); });
  dirs.erase(std::unique(dirs.begin(), dirs.end()), dirs.end());
  dirs.push_back(root);
  return dirs;
}

// The rank that checksums and fsyncs file i of a save: a per-rank file's own writer, else
// round-robin.
int file_owner(const std::string& file, size_t index, int size) {
  static const std::regex re("^rank-([0-9]{1,9})\\..*");
  std::smatch m;
  if (std::regex_match(file, m, re)) {
    const int r = std::stoi(m[1].str());
    if (r < size) return r;
  }
  return static_cast<int>(index % static_cast<size_t>(size));
}

void remove_all_quietly(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) spdlog::warn("checkpoint: cannot remove '{}': {}", path, ec.message());
}

// torch archives are streamed through this sink: an error is recorded (and later thrown with the
// path and errno) rather than thrown through torch's zip writer, which cannot unwind safely.
class ArchiveSink {
 public:
  explicit ArchiveSink(const std::string& path) : file_(path) {}
  size_t operator()(const void* data, size_t size) {
    if (!error_) {
      try {
        file_.write(data, size);
      } catch (...) {
        error_ = std::current_exception();
      }
    }
    return size;
  }
  void finish() {
    if (error_) std::rethrow_exception(error_);
    file_.close();
  }

 private:
  CheckedFile file_;
  std::exception_ptr error_;
};

template <typename SaveFn>
void save_archive(const std::string& path, SaveFn&& fill) {
  ArchiveSink sink(path);
  try {
    torch::serialize::OutputArchive archive;
    fill(archive);
    archive.save_to([&sink](const void* d, size_t n) { return sink(d, n); });
  } catch (const c10::Error& e) {
    FNVLP_FAIL("cannot serialize '" << path << "': " << e.what_without_backtrace());
  }
  sink.finish();
}

template <typename LoadFn>
void load_archive(const std::string& path, LoadFn&& use) {
  FNVLP_CHECK(fs::exists(path), "checkpoint file '" << path << "' is missing");
  try {
    torch::serialize::InputArchive archive;
    // Onto the host whatever device wrote it: a GPU run's checkpoint loads on CPU-only nodes
    // (evaluation, simstat); the trainer moves what it loads to its own device.
    archive.load_from(path, torch::Device(torch::kCPU));
    use(archive);
  } catch (const c10::Error& e) {
    FNVLP_FAIL("cannot load '" << path << "': " << e.what_without_backtrace());
  }
}

}  // namespace

// --- names and verification ---------------------------------------------------------------------

std::string step_dir_name(int64_t step) {
  FNVLP_CHECK(step >= 0, "checkpoint step must be >= 0, got " << step);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step-%07lld", static_cast<long long>(step));
  return buf;
}

std::string rank_file(const std::string& name, int rank) {
  return "rank-" + std::to_string(rank) + "." + name;
}

std::string verify_checkpoint(const std::string& dir, bool checksums, CheckpointInfo* info) {
  try {
    if (!fs::is_directory(dir)) return "not a directory";
    const std::string marker_path = join_path(dir, kCommittedMarker);
    if (!fs::exists(marker_path)) return "no COMMITTED marker (the save did not finish)";
    const json marker = json::parse(read_file(marker_path), nullptr, false);
    if (!marker.is_object() || !marker.contains("fnvlp_checkpoint") || !marker.contains("step") ||
        !marker.contains("world_size") || !marker.contains("files") || !marker["files"].is_object())
      return "COMMITTED marker is not a valid checkpoint marker";
    if (marker["fnvlp_checkpoint"] != kCheckpointFormat)
      return "unsupported checkpoint format " + marker["fnvlp_checkpoint"].dump();
    const int64_t step = marker["step"].get<int64_t>();
    const int64_t named = parse_step_dir(fs::path(dir).filename().string());
    if (named >= 0 && named != step)
      return "COMMITTED marker says step " + std::to_string(step) + " in directory of step " +
             std::to_string(named);
    for (const auto& [file, entry] : marker["files"].items()) {
      if (!inside_checkpoint(file))
        return "COMMITTED marker names '" + file + "', a path outside the checkpoint directory";
      const std::string path = join_path(dir, file);
      if (!fs::is_regular_file(path)) return "file '" + file + "' is missing";
      const auto bytes = static_cast<int64_t>(fs::file_size(path));
      if (bytes != entry.at("bytes").get<int64_t>())
        return "file '" + file + "' has " + std::to_string(bytes) + " bytes, marker says " +
               entry.at("bytes").dump();
      if (checksums && sha256_file(path) != entry.at("sha256").get<std::string>())
        return "file '" + file + "' does not match its sha256 (corrupt)";
    }
    if (info) {
      info->step = step;
      info->dir = dir;
      info->world_size = marker["world_size"].get<int>();
      info->marker = marker;
    }
    return "";
  } catch (const std::exception& e) {
    return std::string("unreadable: ") + e.what();
  }
}

// --- manager ------------------------------------------------------------------------------------

CheckpointManager::CheckpointManager(const std::string& checkpoints_dir, const Comm& comm,
                                     CheckpointConfig cfg)
    : dir_(checkpoints_dir), comm_(comm), cfg_(cfg) {
  FNVLP_CHECK(cfg_.keep_last >= 1, "checkpoint.keep_last must be >= 1, got " << cfg_.keep_last);
  comm_.collective([&] {
    if (!comm_.is_root()) return;
    std::error_code ec;
    fs::create_directories(dir_, ec);
    FNVLP_CHECK(!ec && fs::is_directory(dir_),
                "cannot create checkpoint directory '" << dir_ << "': " << ec.message());
  });
}

CheckpointManager::CheckpointManager(const RunDir& run, const Comm& comm, CheckpointConfig cfg)
    : CheckpointManager(run.checkpoints_dir(), comm, cfg) {}

void CheckpointManager::check_free_space(uint64_t bytes_per_checkpoint) {
  comm_.collective([&] {
    if (!comm_.is_root()) return;
    const uint64_t avail = free_bytes(dir_);
    const double need = 2.0 * static_cast<double>(bytes_per_checkpoint);
    FNVLP_CHECK(static_cast<double>(avail) >= need,
                "not enough free disk space for checkpoints in '"
                    << dir_ << "': " << avail / kGiB << " GiB available, need 2 x "
                    << bytes_per_checkpoint / kGiB
                    << " GiB (room for two checkpoints, estimated from the model and optimizer "
                       "size); free space or point --out elsewhere");
  });
  expected_bytes_ = bytes_per_checkpoint;
}

std::vector<int64_t> CheckpointManager::committed_steps() const {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const int64_t step = parse_step_dir(e.path().filename().string());
    if (step < 0 || !e.is_directory()) continue;
    if (verify_checkpoint(e.path().string(), /*checksums=*/false).empty()) steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

namespace {

// Step 1 of a save (rank 0): 1 when an intact copy of this step is committed already (nothing to
// do); else unusable copies and unfinished saves are removed, the free space checked and the
// temporary directory created.
int32_t prepare_save(const Comm& comm, const std::string& dir, int64_t step,
                     uint64_t expected_bytes, const std::string& final_dir,
                     const std::string& tmp_dir) {
  int32_t already = 0;
  comm.collective([&] {
    if (!comm.is_root()) return;
    if (fs::exists(final_dir)) {
      const std::string why = verify_checkpoint(final_dir, /*checksums=*/true);
      if (why.empty()) {
        already = 1;
        return;
      }
      spdlog::warn("checkpoint: replacing unusable {} ({})", final_dir, why);
      fs::remove_all(final_dir);
    }
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string n = e.path().filename().string();
      if (e.is_directory() && !e.is_symlink() && n.size() > 4 &&
          n.compare(n.size() - 4, 4, ".tmp") == 0) {
        spdlog::info("checkpoint: removing the unfinished save {}", e.path().string());
        fs::remove_all(e.path());
      }
    }
    if (expected_bytes > 0) {
      const uint64_t avail = free_bytes(dir);
      FNVLP_CHECK(avail >= expected_bytes, "not enough free disk space for the checkpoint of step "
                                               << step << " in '" << dir << "': " << avail / kGiB
                                               << " GiB available, about " << expected_bytes / kGiB
                                               << " GiB needed");
    }
    // The save goes into a directory created here and now, so nothing planted can be in it; a
    // symlink in its place (skipped by the loop above) is removed, not followed.
    std::error_code ec;
    if (fs::is_symlink(fs::symlink_status(tmp_dir))) {
      spdlog::warn("checkpoint: removing the symlink {} in the way of the save", tmp_dir);
      fs::remove(tmp_dir);
    }
    const bool created = fs::create_directory(tmp_dir, ec);
    FNVLP_CHECK(created && !ec,
                "cannot create '" << tmp_dir << "': " << (ec ? ec.message() : "it already exists"));
  });
  comm.bcast(&already, 1);
  return already;
}

// Step 2: the content, from every rank. A collective helper's error is already the same on every
// rank: passed on as it is rather than repeated once per rank.
void write_content(const Comm& comm, int64_t step, const std::string& tmp_dir,
                   const CheckpointManager::WriteFn& write) {
  std::string agreed;
  comm.collective([&] {
    try {
      const SavingCheckpoint saving(step);
      write(tmp_dir);
    } catch (const CollectiveError& e) {
      agreed = e.what();
    }
  });
  for (const std::string& m : comm.allgather_strings(agreed))
    if (!m.empty()) throw CollectiveError(m);
}

// The files of a save and what every rank found for its share of them: "index bytes sha256\n".
struct Digests {
  std::vector<std::string> files;
  std::vector<std::string> parts;  // per rank
};

// Step 3: fsync + sha256, file i on rank i % size (the slow part of a commit, shared out).
Digests checksum_files(const Comm& comm, const std::string& tmp_dir) {
  Digests d;
  std::string listing;
  comm.collective([&] {
    if (!comm.is_root()) return;
    for (const auto& f : list_files(tmp_dir)) listing += f + '\n';
  });
  comm.bcast(listing);
  for (size_t a = 0, b; a < listing.size(); a = b + 1) {
    b = listing.find('\n', a);
    d.files.push_back(listing.substr(a, b - a));
  }
  std::string mine;
  comm.collective([&] {
    for (size_t i = 0; i < d.files.size(); ++i) {
      if (file_owner(d.files[i], i, comm.size()) != comm.rank()) continue;
      const std::string path = join_path(tmp_dir, d.files[i]);
      // Reading first makes a shared file system hand over another client's dirty pages; the
      // fsync then makes them durable.
      const std::string sha = sha256_file(path);
      fsync_path(path);
      mine += std::to_string(i) + ' ' + std::to_string(fs::file_size(path)) + ' ' + sha + '\n';
    }
  });
  d.parts = comm.allgather_strings(mine);
  return d;
}

// Step 4 (rank 0): the COMMITTED marker last, then the renames of the directory and of `latest`.
// Returns the checkpoint's bytes.
uint64_t commit_save(const std::string& dir, int64_t step, int world_size,
                     const std::string& tmp_dir, const std::string& final_dir, const Digests& d) {
  uint64_t total_bytes = 0;
  json entries = json::object();
  for (const std::string& part : d.parts) {
    std::istringstream in(part);
    size_t index = 0;
    uint64_t bytes = 0;
    std::string sha;
    while (in >> index >> bytes >> sha) {
      entries[d.files.at(index)] = {{"bytes", bytes}, {"sha256", sha}};
      total_bytes += bytes;
    }
  }
  FNVLP_CHECK(entries.size() == d.files.size(), "checkpoint: checksums missing for some files");
  for (const auto& p : parent_dirs(tmp_dir, d.files)) fsync_path(p);
  const json marker = {{"fnvlp_checkpoint", kCheckpointFormat},
                       {"step", step},
                       {"world_size", world_size},
                       {"time", utc_now_iso8601()},
                       {"unix_time", static_cast<int64_t>(std::time(nullptr))},
                       {"files", entries}};
  write_file_atomic(join_path(tmp_dir, kCommittedMarker), marker.dump(2) + "\n");
  FNVLP_CHECK(
      std::rename(tmp_dir.c_str(), final_dir.c_str()) == 0,
      "cannot rename '" << tmp_dir << "' to '" << final_dir << "': " << std::strerror(errno));
  fsync_path(dir);
  const std::string name = fs::path(final_dir).filename().string();
  const std::string link = join_path(dir, "latest"), link_tmp = link + ".tmp";
  ::unlink(link_tmp.c_str());
  FNVLP_CHECK(::symlink(name.c_str(), link_tmp.c_str()) == 0,
              "cannot create symlink '" << link_tmp << "': " << std::strerror(errno));
  FNVLP_CHECK(std::rename(link_tmp.c_str(), link.c_str()) == 0,
              "cannot rename '" << link_tmp << "' over '" << link << "': " << std::strerror(errno));
  fsync_path(dir);
  return total_bytes;
}

}  // namespace

CheckpointInfo CheckpointManager::save(int64_t step, const WriteFn& write) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string final_dir = join_path(dir_, step_dir_name(step));
  const std::string tmp_dir = final_dir + ".tmp";
  if (prepare_save(comm_, dir_, step, expected_bytes_, final_dir, tmp_dir)) {
    CheckpointInfo out = open(final_dir);
    if (comm_.is_root())
      spdlog::info("checkpoint: step {} is already committed; not saved again", step);
    return out;
  }
  try {
    write_content(comm_, step, tmp_dir, write);
    const Digests digests = checksum_files(comm_, tmp_dir);
    uint64_t total_bytes = 0;
    comm_.collective([&] {
      if (!comm_.is_root()) return;
      total_bytes = commit_save(dir_, step, comm_.size(), tmp_dir, final_dir, digests);
      // Step 5: only now may older checkpoints go; a failure here loses nothing.
      try {
        prune_after_commit(step);
      } catch (const std::exception& e) {
        spdlog::warn("checkpoint: pruning old checkpoints failed: {}", e.what());
      }
    });
    comm_.bcast(&total_bytes, 1);
    if (total_bytes > 0) expected_bytes_ = total_bytes;
  } catch (const CollectiveError& e) {
    std::string previous = "none";
    if (comm_.is_root()) {
      remove_all_quietly(tmp_dir);
      std::error_code ec;
      const fs::path target = fs::read_symlink(join_path(dir_, "latest"), ec);
      if (!ec) previous = target.string();
    }
    comm_.bcast(previous);
    throw CollectiveError("checkpoint of step " + std::to_string(step) + " in '" + dir_ +
                          "' failed; 'latest' still points to " + previous +
                          " and earlier checkpoints are intact:\n" + e.what());
  }

  CheckpointInfo info;
  info.step = step;
  info.dir = final_dir;
  info.world_size = comm_.size();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (comm_.is_root())
    spdlog::info("checkpoint: step {} committed to {} ({:.1f} MiB, {:.2f} s)", step, final_dir,
                 expected_bytes_ / (1024.0 * 1024.0), secs);
  return info;
}

void CheckpointManager::prune_after_commit(int64_t step) const {
  std::vector<int64_t> steps = committed_steps();
  int64_t kept = 1;  // the new one
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const std::string path = join_path(dir_, step_dir_name(*it));
    if (*it > step) {
      const std::string aside = path + ".abandoned";
      spdlog::warn(
          "checkpoint: moving {} aside to {}: this run resumed from an earlier step and "
          "has now committed step {}",
          path, aside, step);
      fs::remove_all(aside);
      fs::rename(path, aside);
    } else if (*it < step && ++kept > cfg_.keep_last) {
      spdlog::info("checkpoint: removing {} (keep_last = {})", path, cfg_.keep_last);
      fs::remove_all(path);
    }
  }
}

std::optional<CheckpointInfo> CheckpointManager::latest_committed() const {
  std::string found;  // the chosen checkpoint's marker JSON + dir, "" when none
  comm_.collective([&] {
    if (!comm_.is_root()) return;
    std::vector<std::pair<int64_t, std::string>> candidates;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir_, ec)) {
      const int64_t s = parse_step_dir(e.path().filename().string());
      if (s >= 0 && e.is_directory()) candidates.emplace_back(s, e.path().string());
    }
    std::sort(candidates.rbegin(), candidates.rend());
    for (const auto& [s, path] : candidates) {
      CheckpointInfo info;
      const std::string why = verify_checkpoint(path, cfg_.verify_on_load, &info);
      if (!why.empty()) {
        spdlog::warn("checkpoint: skipping {}: {}; trying the previous one", path, why);
        continue;
      }
      std::error_code lec;
      const fs::path latest = fs::read_symlink(join_path(dir_, "latest"), lec);
      if (lec || latest.filename() != fs::path(path).filename())
        spdlog::warn("checkpoint: 'latest' does not point at {}, the newest intact checkpoint",
                     path);
      found = json{{"dir", path}, {"marker", info.marker}}.dump();
      return;
    }
  });
  comm_.bcast(found);
  if (found.empty()) return std::nullopt;
  const json j = json::parse(found);
  CheckpointInfo info;
  info.dir = j["dir"].get<std::string>();
  info.marker = j["marker"];
  info.step = info.marker["step"].get<int64_t>();
  info.world_size = info.marker["world_size"].get<int>();
  return info;
}

CheckpointInfo CheckpointManager::open(const std::string& dir) const {
  std::string marker;
  comm_.collective([&] {
    if (!comm_.is_root()) return;
    CheckpointInfo info;
    const std::string why = verify_checkpoint(dir, cfg_.verify_on_load, &info);
    FNVLP_CHECK(why.empty(), "checkpoint '" << dir << "' cannot be used: " << why);
    marker = info.marker.dump();
  });
  comm_.bcast(marker);
  CheckpointInfo info;
  info.dir = dir;
  info.marker = json::parse(marker);
  info.step = info.marker["step"].get<int64_t>();
  info.world_size = info.marker["world_size"].get<int>();
  return info;
}

// --- torch state --------------------------------------------------------------------------------

void save_module(const std::string& dir, const std::string& name, const torch::nn::Module& module) {
  save_archive(join_path(dir, name + ".pt"),
               [&](torch::serialize::OutputArchive& a) { module.save(a); });
}

void load_module(const std::string& dir, const std::string& name, torch::nn::Module& module) {
  load_archive(join_path(dir, name + ".pt"), [&](torch::serialize::InputArchive& a) {
    torch::NoGradGuard no_grad;
    module.load(a);
  });
}

void save_optimizer(const std::string& dir, const std::string& name,
                    const torch::optim::Optimizer& optimizer) {
  save_archive(join_path(dir, name + ".pt"),
               [&](torch::serialize::OutputArchive& a) { optimizer.save(a); });
}

void load_optimizer(const std::string& dir, const std::string& name,
                    torch::optim::Optimizer& optimizer) {
  load_archive(join_path(dir, name + ".pt"), [&](torch::serialize::InputArchive& a) {
    optimizer.load(a);
    // libtorch 1.13 restores the moments but not the groups' options (lr, betas, weight decay):
    // read them back through the options' own (virtual) deserialiser.
    torch::serialize::InputArchive groups;
    a.read("param_groups", groups);
    torch::Tensor n;
    groups.read("param_groups/size", n);
    FNVLP_CHECK(n.item<int64_t>() == static_cast<int64_t>(optimizer.param_groups().size()),
                dir << "/" << name << ".pt: " << n.item<int64_t>()
                    << " parameter groups, the optimizer has " << optimizer.param_groups().size());
    for (size_t i = 0; i < optimizer.param_groups().size(); ++i) {
      torch::serialize::InputArchive group, options;
      groups.read("param_groups/" + std::to_string(i), group);
      group.read("options", options);
      optimizer.param_groups()[i].options().serialize(options);
    }
  });
}

uint64_t module_bytes(const torch::nn::Module& module) {
  uint64_t n = 0;
  for (const auto& p : module.parameters()) n += p.nbytes();
  for (const auto& b : module.buffers()) n += b.nbytes();
  return n;
}

uint64_t optimizer_state_bytes(const torch::optim::Optimizer& optimizer) {
  // The serialised size is exact whatever the optimizer type; counting costs one pass in memory.
  uint64_t n = 0;
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  archive.save_to([&n](const void*, size_t size) {
    n += size;
    return size;
  });
  return n;
}

void save_json(const std::string& dir, const std::string& name, const json& value) {
  write_file(join_path(dir, name + ".json"), value.dump(2) + "\n");
}

json load_json(const std::string& dir, const std::string& name) {
  const std::string path = join_path(dir, name + ".json");
  const json j = json::parse(read_file(path), nullptr, false);
  FNVLP_CHECK(!j.is_discarded(), "'" << path << "' is not valid JSON");
  return j;
}

// --- per-pair state -----------------------------------------------------------------------------

namespace {

// Rows of a per-pair file moved per HDF5 call: bounds the buffers whatever the block size.
hsize_t piece_rows(int64_t cols) {
  return std::max<hsize_t>(1, (hsize_t{1} << 20) / static_cast<hsize_t>(cols));
}

// Positions of `ids` in increasing id order.
std::vector<size_t> id_order(const std::vector<int64_t>& ids) {
  std::vector<size_t> order(ids.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ids[a] < ids[b]; });
  return order;
}

}  // namespace

void save_per_pair(const std::string& dir, const std::string& name, const Comm& comm,
                   const std::vector<int64_t>& pair_ids, const std::vector<float>& values,
                   int64_t cols, int64_t num_pairs_total) {
  const std::string path = join_path(dir, name + ".h5");
  // Shape arguments must agree everywhere before any data moves.
  const std::vector<int64_t> mine = {cols, num_pairs_total, -cols, -num_pairs_total};
  std::vector<int64_t> agreed = mine;
  comm.allreduce_max(agreed);
  std::vector<size_t> order;
  comm.collective([&] {
    FNVLP_CHECK(agreed[0] == cols && -agreed[2] == cols && agreed[1] == num_pairs_total &&
                    -agreed[3] == num_pairs_total,
                path << ": ranks disagree on cols or num_pairs_total");
    FNVLP_CHECK(cols >= 1 && num_pairs_total >= 0,
                path << ": bad shape cols=" << cols << " num_pairs_total=" << num_pairs_total);
    FNVLP_CHECK(values.size() == pair_ids.size() * static_cast<size_t>(cols),
                path << ": " << values.size() << " values for " << pair_ids.size() << " pairs x "
                     << cols << " cols");
    for (int64_t id : pair_ids)
      FNVLP_CHECK(id >= 0 && id < num_pairs_total,
                  path << ": pair_id " << id << " outside [0, " << num_pairs_total << ")");
    order = id_order(pair_ids);
    for (size_t k = 1; k < order.size(); ++k)
      FNVLP_CHECK(pair_ids[order[k]] != pair_ids[order[k - 1]],
                  path << ": pair_id " << pair_ids[order[k]] << " supplied by more than one row");
  });
  const auto n = static_cast<hsize_t>(num_pairs_total), c = static_cast<hsize_t>(cols);
  // Rank 0 creates the file with every chunk allocated and zero (valid 0: no rank's row yet).
  comm.collective([&] {
    if (!comm.is_root()) return;
    // HDF5 is not thread-safe here: the data prefetch thread may be reading shards.
    std::lock_guard<std::mutex> lock(h5::global_mutex());
    h5::Handle file = h5::create_file(path);
    h5::write_attr_int(file, "fnvlp_schema", 1);
    h5::write_attr_int(file, "num_pairs", num_pairs_total);
    h5::write_attr_int(file, "cols", cols);
    const hsize_t chunk_rows = std::max<hsize_t>(1, std::min<hsize_t>(n, 65536 / c));
    h5::DatasetSpec vspec{{n, c}, {chunk_rows, c}};
    vspec.early_alloc = true;
    h5::create_dataset(file, "values", H5T_NATIVE_FLOAT, vspec, path).close(path + ":/values");
    h5::DatasetSpec mspec{{n}, {std::max<hsize_t>(1, std::min<hsize_t>(n, 65536))}};
    mspec.early_alloc = true;
    h5::create_dataset(file, "valid", H5T_NATIVE_UINT8, mspec, path).close(path + ":/valid");
    file.close(path);
  });
  // Then each rank writes its runs of consecutive pair_ids, one rank after another (a rank's
  // block is one run): no rank holds more than its own rows.
  for (int r = 0; r < comm.size(); ++r)
    comm.collective([&] {
      if (comm.rank() != r || order.empty()) return;
      std::lock_guard<std::mutex> lock(h5::global_mutex());
      h5::Handle file = h5::open_file(path, true);
      h5::Handle vals = h5::open_dataset(file, "values", path);
      h5::Handle valid = h5::open_dataset(file, "valid", path);
      const hsize_t piece = piece_rows(cols);
      std::vector<float> buf;
      std::vector<uint8_t> seen;
      for (size_t k = 0; k < order.size();) {
        const int64_t first = pair_ids[order[k]];
        size_t end = k + 1;
        while (end < order.size() && end - k < piece &&
               pair_ids[order[end]] == first + static_cast<int64_t>(end - k))
          ++end;
        const hsize_t rows = end - k;
        seen.resize(rows);
        h5::read_rows(valid, H5T_NATIVE_UINT8, seen.data(), first, rows, path + ":/valid");
        for (hsize_t i = 0; i < rows; ++i)
          FNVLP_CHECK(!seen[i], path << ": pair_id " << first + static_cast<int64_t>(i)
                                     << " supplied by more than one row");
        buf.resize(rows * c);
        for (hsize_t i = 0; i < rows; ++i)
          std::copy_n(values.begin() + static_cast<std::ptrdiff_t>(order[k + i] * c), c,
                      buf.begin() + static_cast<std::ptrdiff_t>(i * c));
        h5::write_rows(vals, H5T_NATIVE_FLOAT, buf.data(), first, rows, false, path + ":/values");
        std::fill(seen.begin(), seen.end(), uint8_t{1});
        h5::write_rows(valid, H5T_NATIVE_UINT8, seen.data(), first, rows, false, path + ":/valid");
        k = end;
      }
      vals.close(path + ":/values");
      valid.close(path + ":/valid");
      file.close(path);
    });
}

PerPairRows load_per_pair(const std::string& dir, const std::string& name, const Comm& comm,
                          const std::vector<int64_t>& pair_ids) {
  const std::string path = join_path(dir, name + ".h5");
  PerPairRows out;
  // Every rank reads its own rows, a piece of the span between its smallest and largest pair_id
  // at a time, skipping the gaps: no rank holds more than its rows and one piece.
  comm.collective([&] {
    std::lock_guard<std::mutex> lock(h5::global_mutex());
    h5::Handle file = h5::open_file(path);
    const int64_t n = h5::read_attr_int(file, "num_pairs", path);
    const int64_t cols = h5::read_attr_int(file, "cols", path);
    h5::Handle vals = h5::open_dataset(file, "values", path);
    h5::Handle valid = h5::open_dataset(file, "valid", path);
    const std::vector<hsize_t> vshape = h5::dims(vals, path + ":/values");
    const std::vector<hsize_t> mshape = h5::dims(valid, path + ":/valid");
    FNVLP_CHECK(n >= 0 && cols >= 1 && vshape.size() == 2 && static_cast<int64_t>(vshape[0]) == n &&
                    static_cast<int64_t>(vshape[1]) == cols && mshape.size() == 1 &&
                    static_cast<int64_t>(mshape[0]) == n,
                path << ": dataset shapes do not match num_pairs/cols");
    for (int64_t id : pair_ids)
      FNVLP_CHECK(id >= 0 && id < n,
                  path << ": asked for pair_id " << id << " outside [0, " << n << ")");
    out.cols = cols;
    out.num_pairs_total = n;
    const auto c = static_cast<size_t>(cols);
    out.values.assign(pair_ids.size() * c, 0.0f);
    out.valid.assign(pair_ids.size(), 0);
    const std::vector<size_t> order = id_order(pair_ids);
    const auto piece = static_cast<int64_t>(piece_rows(cols));
    std::vector<float> buf;
    std::vector<uint8_t> seen;
    for (size_t k = 0; k < order.size();) {
      const int64_t first = pair_ids[order[k]];
      const int64_t end = std::min(n, first + piece);
      const auto rows = static_cast<size_t>(end - first);
      buf.resize(rows * c);
      seen.resize(rows);
      h5::read_rows(vals, H5T_NATIVE_FLOAT, buf.data(), static_cast<hsize_t>(first), rows,
                    path + ":/values");
      h5::read_rows(valid, H5T_NATIVE_UINT8, seen.data(), static_cast<hsize_t>(first), rows,
                    path + ":/valid");
      for (; k < order.size() && pair_ids[order[k]] < end; ++k) {
        const auto row = static_cast<size_t>(pair_ids[order[k]] - first);
        std::copy_n(buf.begin() + static_cast<std::ptrdiff_t>(row * c), c,
                    out.values.begin() + static_cast<std::ptrdiff_t>(order[k] * c));
        out.valid[order[k]] = seen[row];
      }
    }
  });
  return out;
}

}  // namespace fnvlp::store
