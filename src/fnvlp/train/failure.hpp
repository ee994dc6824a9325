#pragma once
// What a failed training run reports beyond the exception's text: the phase it failed in and, for
// running out of memory (CUDA's caching allocator, or std::bad_alloc and libtorch's CPU allocator
// on the host), the batch size, the memory in use and in total, and what to change.
#include <cstdint>
#include <exception>
#include <nlohmann/json.hpp>
#include <string>

#include "fnvlp/comm/watchdog.hpp"
#include "fnvlp/train/device.hpp"

namespace fnvlp::train {

struct FailureReport {
  std::string error;  // summary.json "error": the diagnosis first for an out-of-memory error
  // Merged into summary.json: "phase", and for an out-of-memory error "out_of_memory" with the
  // device ("cuda:N" or "host"), rank, step, batch_size, memory_in_use_bytes,
  // memory_peak_bytes, memory_total_bytes and hint.
  nlohmann::json extra = nlohmann::json::object();
};

// Describes `e` on this rank (the phase and step from the watchdog); an out-of-memory error is
// also logged here, with its diagnosis.
FailureReport describe_failure(const std::exception& e, int rank, const Watchdog& dog,
                               int64_t batch_size, Precision precision);

// Host memory of this process: resident now, its peak, and the most it may use (the smaller of
// the machine's memory and its cgroup's limit, where SLURM puts --mem). 0 where unknown.
struct HostMemory {
  int64_t in_use = 0, peak = 0, total = 0;
};
HostMemory host_memory();

}  // namespace fnvlp::train
