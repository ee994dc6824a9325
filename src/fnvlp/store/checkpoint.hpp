#pragma once
// Checkpoints (ARCHITECTURE.md §9): RUN/checkpoints/step-NNNNNNN/, committed by a COMMITTED marker
// written last, with RUN/checkpoints/latest a symlink to the newest committed one.
//
// Save protocol (CheckpointManager::save, collective):
//   1. rank 0 removes stale step-*.tmp directories (saves killed midway) and creates
//      step-NNNNNNN.tmp/;
//   2. every rank runs the caller's writer into it: rank-R files (rank_file()) for per-rank state,
//      shared files from rank 0 only, per-pair state collectively (save_per_pair);
//   3. every rank checksums and fsyncs its share of the files (its own rank-R files, the others
//      round-robin);
//   4. rank 0 writes COMMITTED (JSON: format, step, world_size, time, bytes and sha256 of every
//      file) through COMMITTED.tmp + fsync + rename, renames step-N.tmp to step-N, then replaces
//      `latest` atomically (symlink latest.tmp, rename over latest), fsyncing the directory;
//   5. rank 0 deletes committed checkpoints beyond keep_last (only now that the new one is
//      committed) and moves committed checkpoints of steps after N aside (step-M.abandoned): they
//      belong to a trajectory this run abandoned by resuming from an older step.
// A failure anywhere (an exception from the writer, ENOSPC from any write, a failed fsync) throws
// the same CollectiveError on every rank; the .tmp directory is removed and `latest` and the
// previous checkpoints are untouched. A process killed at any point leaves at worst a .tmp
// directory, which loading ignores.
//
// Loading: latest_committed() considers only step-N directories whose COMMITTED marker parses and
// whose files all match their recorded size and sha256; a corrupt newest one is skipped (logged)
// in favour of the previous one. Per-pair state is stored by global pair_id, so a checkpoint
// written by R ranks loads on any other number of ranks.
//
// The checkpoint directory must be one file system seen by every rank (the run directory on a
// shared file system).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/core/config_fields.hpp"
#include "fnvlp/store/run_dir.hpp"

// Declared here so that users of the manager alone do not compile torch's headers.
namespace torch {
namespace nn {
class Module;
template <typename Contained>
class ModuleHolder;
}  // namespace nn
namespace optim {
class Optimizer;
}
}  // namespace torch

namespace fnvlp::store {

inline constexpr const char* kCommittedMarker = "COMMITTED";
inline constexpr int kCheckpointFormat = 1;  // "fnvlp_checkpoint" in the marker

struct CheckpointConfig {
  // clang-format off
  FNVLP_CONFIG_FIELDS(
      // the trainer saves every N steps (0: only on stop and at the end)
      (int64_t, every_steps, 1000, config::at_least(0)),
      // committed checkpoints kept; older ones go after a new commit
      (int64_t, keep_last, 2, config::at_least(1)),
      (bool, verify_on_load, true),  // sha256 of every file before a checkpoint is used
      (double, save_timeout_s, 3600))  // watchdog limit while a save runs (Watchdog::long_phase)
  // clang-format on
};

struct CheckpointInfo {
  int64_t step = -1;
  std::string dir;     // .../checkpoints/step-NNNNNNN
  int world_size = 0;  // ranks of the run that wrote it
  nlohmann::json marker;
};

// "step-0000042" (7 digits, more once a step needs them).
std::string step_dir_name(int64_t step);
// Name of rank R's copy of a per-rank file: "rank-R.NAME" (e.g. rank-3.sampler.json).
std::string rank_file(const std::string& name, int rank);

// Local check of one checkpoint directory: "" when it is committed and intact, else the reason.
// `checksums` false checks the marker, the file list and sizes only.
std::string verify_checkpoint(const std::string& dir, bool checksums,
                              CheckpointInfo* info = nullptr);

class CheckpointManager {
 public:
  using WriteFn = std::function<void(const std::string& dir)>;

  // Collective. `checkpoints_dir` is created (rank 0) if missing.
  CheckpointManager(const std::string& checkpoints_dir, const Comm& comm,
                    CheckpointConfig cfg = {});
  CheckpointManager(const RunDir& run, const Comm& comm, CheckpointConfig cfg = {});

  // Collective: fails early (CollectiveError on every rank) unless the file system has room for
  // two checkpoints of `bytes_per_checkpoint` (the caller's estimate: see module_bytes()). Call
  // it before the first save; later saves check room for one more, from the last real size.
  void check_free_space(uint64_t bytes_per_checkpoint);

  // Collective: writes and commits the checkpoint of `step` (protocol above); `write(dir)` runs on
  // every rank with the .tmp directory. Returns the committed checkpoint, identical on all ranks.
  // Saving a step that is already committed and intact writes nothing and returns it.
  // Inside `write`, call the collective helpers (save_per_pair) first, on every rank
  // unconditionally, and the local writes after them: a rank that failed locally must not skip a
  // collective its peers are in. The helpers agree on their own failures, so this order needs no
  // further care.
  CheckpointInfo save(int64_t step, const WriteFn& write);

  // Collective: the newest intact committed checkpoint (the same on every rank), or none.
  std::optional<CheckpointInfo> latest_committed() const;
  // Collective: an explicitly named checkpoint directory (--resume PATH), verified; throws
  // CollectiveError saying what is wrong with it.
  CheckpointInfo open(const std::string& dir) const;

  // Local: steps with a parseable COMMITTED marker, ascending (no checksums).
  std::vector<int64_t> committed_steps() const;
  const std::string& dir() const { return dir_; }
  const CheckpointConfig& config() const { return cfg_; }

 private:
  void prune_after_commit(int64_t step) const;

  std::string dir_;
  const Comm& comm_;
  CheckpointConfig cfg_;
  uint64_t expected_bytes_ = 0;  // size of the next checkpoint (estimate, then the last real one)
};

// --- content helpers -----------------------------------------------------------------------------
// Files are DIR/NAME.pt, DIR/NAME.json, DIR/NAME.h5. Every write is checked (a full disk throws
// naming the file). A replicated object (model, optimizer, trainer state) is written by rank 0
// only; per-rank objects under rank_file(name, rank).

// Parameters AND buffers (BatchNorm running statistics ...), recursively, as torch's archive.
void save_module(const std::string& dir, const std::string& name, const torch::nn::Module& module);
// Loads into an existing module of the same structure (missing keys throw).
void load_module(const std::string& dir, const std::string& name, torch::nn::Module& module);
// Optimizer state (AdamW moments and step counts) and its parameter-group options (current lr).
void save_optimizer(const std::string& dir, const std::string& name,
                    const torch::optim::Optimizer& optimizer);
// Loads into an optimizer of the same type built over the same parameters in the same order;
// restores the moments, step counts and each group's options (lr included).
void load_optimizer(const std::string& dir, const std::string& name,
                    torch::optim::Optimizer& optimizer);
// Bytes of a module's parameters and buffers, and of an optimizer's current state tensors (0
// before its first step: AdamW then grows to two moments per parameter, so estimate a checkpoint
// as 3 x module_bytes before training).
uint64_t module_bytes(const torch::nn::Module& module);
uint64_t optimizer_state_bytes(const torch::optim::Optimizer& optimizer);
// The same for module holders (torch::nn::Linear, TORCH_MODULE(...) types).
template <typename M>
void save_module(const std::string& dir, const std::string& name,
                 const torch::nn::ModuleHolder<M>& module) {
  save_module(dir, name, *module);
}
template <typename M>
void load_module(const std::string& dir, const std::string& name,
                 torch::nn::ModuleHolder<M>& module) {
  load_module(dir, name, *module);
}
template <typename M>
uint64_t module_bytes(const torch::nn::ModuleHolder<M>& module) {
  return module_bytes(*module);
}

// Trainer state (step, epoch, sampler cursor and permutation, schedule ...).
void save_json(const std::string& dir, const std::string& name, const nlohmann::json& value);
nlohmann::json load_json(const std::string& dir, const std::string& name);

// Per-sample state keyed by GLOBAL pair_id, collective. Each rank passes the rows it owns
// (`values` is row-major, `cols` floats per pair_id) into one HDF5 file NAME.h5: `values` float32
// [num_pairs_total, cols] and `valid` uint8 [num_pairs_total] (1 where some rank supplied the
// row). Rank 0 creates the file, then each rank writes its own rows in turn: no rank holds more
// than its rows (O(N/R) for a block). A pair_id supplied twice or outside [0, num_pairs_total)
// is an error.
void save_per_pair(const std::string& dir, const std::string& name, const Comm& comm,
                   const std::vector<int64_t>& pair_ids, const std::vector<float>& values,
                   int64_t cols, int64_t num_pairs_total);

struct PerPairRows {
  int64_t cols = 0;
  int64_t num_pairs_total = 0;
  std::vector<float> values;   // [pair_ids.size(), cols], in the order asked
  std::vector<uint8_t> valid;  // [pair_ids.size()]; 0: no rank saved this pair (values are 0)
};
// Collective: every rank asks for any pair_ids (its new block, in any order) and reads them from
// the file itself, so a resume with a different ownership (rank count) works and no rank holds
// more than its rows and one bounded piece of the file.
PerPairRows load_per_pair(const std::string& dir, const std::string& name, const Comm& comm,
                          const std::vector<int64_t>& pair_ids);

}  // namespace fnvlp::store
