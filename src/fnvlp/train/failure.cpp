#include "fnvlp/train/failure.hpp"

#include <c10/util/Exception.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <new>
#include <sstream>

#if FNVLP_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace fnvlp::train {

namespace {

using json = nlohmann::json;

// Bytes from a "Key:   123 kB" line of a /proc file; 0 when absent.
int64_t proc_kb(const std::string& file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line))
    if (line.compare(0, key.size() + 1, key + ":") == 0)
      return 1024 * std::strtoll(line.c_str() + key.size() + 1, nullptr, 10);
  return 0;
}

int64_t number_in(const std::string& file) {
  std::ifstream in(file);
  std::string text;
  in >> text;
  return text.empty() || text == "max" ? 0 : std::strtoll(text.c_str(), nullptr, 10);
}

// The memory limit of this process's cgroup (v2 memory.max, v1 memory.limit_in_bytes); 0: none.
int64_t cgroup_limit() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  int64_t limit = 0;
  while (std::getline(in, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    int64_t v = 0;
    if (controllers.empty())
      v = number_in("/sys/fs/cgroup" + path + "/memory.max");
    else if (controllers == "memory")
      v = number_in("/sys/fs/cgroup/memory" + path + "/memory.limit_in_bytes");
    if (v > 0) limit = limit > 0 ? std::min(limit, v) : v;
  }
  return limit;
}

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  return buf;
}

std::string short_text(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) return c10->what_without_backtrace();
  return e.what();
}

enum class Oom { kNone, kCuda, kHost };

// Also by text: an error that crossed a collective (CollectiveError) keeps only its message.
Oom out_of_memory_kind(const std::exception& e) {
  const std::string text = e.what();
  if (text.find("CUDA out of memory") != std::string::npos) return Oom::kCuda;
  if (dynamic_cast<const std::bad_alloc*>(&e) || dynamic_cast<const c10::OutOfMemoryError*>(&e) ||
      text.find("std::bad_alloc") != std::string::npos ||
      text.find("DefaultCPUAllocator: not enough memory") != std::string::npos)
    return Oom::kHost;
  return Oom::kNone;
}

// The device's memory: in use (every process's, cudaMemGetInfo), PyTorch's peak allocation and
// reservation on it, and its total. False without a CUDA build or a visible device (a CUDA build
// on a CPU node, where asking would throw inside the failure report).
bool cuda_memory(json& oom, std::string& detail) {
#if FNVLP_WITH_CUDA
  if (c10::cuda::device_count() == 0) return false;
  const c10::DeviceIndex dev = c10::cuda::current_device();
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) (void)cudaGetLastError();
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(dev);
  const int64_t peak = stats.allocated_bytes[0].peak, reserved = stats.reserved_bytes[0].current;
  oom["device"] = "cuda:" + std::to_string(dev);
  oom["memory_in_use_bytes"] = static_cast<int64_t>(total - free);
  oom["memory_peak_bytes"] = peak;
  oom["memory_reserved_bytes"] = reserved;
  oom["memory_total_bytes"] = static_cast<int64_t>(total);
  detail = "device memory " + gib(static_cast<int64_t>(total - free)) + " in use of " +
           gib(static_cast<int64_t>(total)) + " (PyTorch: " + gib(peak) +
           " allocated at the peak, " + gib(reserved) + " reserved)";
  return true;
#else
  return false;
#endif
}

std::string hint(Oom kind, int64_t batch_size, Precision precision) {
  const std::string smaller = "a smaller train.batch_size (now " + std::to_string(batch_size) +
                              " per rank; --resume auto continues with another one)";
  if (kind == Oom::kHost)
    return smaller + ", fewer ranks per node, or more memory per rank (sbatch --mem)";
  return smaller + (precision == Precision::kBf16
                        ? " (train.precision is bf16 already)"
                        : ", or train.precision=bf16 (half the activation memory)");
}

}  // namespace

HostMemory host_memory() {
  HostMemory m;
  m.in_use = proc_kb("/proc/self/status", "VmRSS");
  m.peak = proc_kb("/proc/self/status", "VmHWM");
  m.total = proc_kb("/proc/meminfo", "MemTotal");
  const int64_t limit = cgroup_limit();
  if (limit > 0 && (m.total == 0 || limit < m.total)) m.total = limit;
  return m;
}

FailureReport describe_failure(const std::exception& e, int rank, const Watchdog& dog,
                               int64_t batch_size, Precision precision) {
  FailureReport r;
  const std::string phase = dog.failure_phase();
  const int64_t step = std::max<int64_t>(dog.last_step(), 0);
  r.error = e.what();
  r.extra["phase"] = phase;
  Oom kind = out_of_memory_kind(e);
  if (kind == Oom::kNone) return r;
  json oom = {{"rank", rank}, {"step", step}, {"batch_size", batch_size}};
  std::string memory;
  if (kind == Oom::kCuda && !cuda_memory(oom, memory)) kind = Oom::kHost;
  if (kind == Oom::kHost) {
    const HostMemory m = host_memory();
    oom.update({{"device", "host"},
                {"memory_in_use_bytes", m.in_use},
                {"memory_peak_bytes", m.peak},
                {"memory_total_bytes", m.total}});
    memory =
        "host memory " + gib(m.in_use) + " in use (peak " + gib(m.peak) + ") of " + gib(m.total);
  }
  oom["hint"] = "try " + hint(kind, batch_size, precision);
  std::ostringstream os;
  os << (kind == Oom::kCuda ? "CUDA out of memory" : "out of memory") << " on rank " << rank << " ("
     << oom["device"].get<std::string>() << ") in phase '" << phase << "' at step " << step
     << " with train.batch_size " << batch_size << ": " << memory << "; "
     << oom["hint"].get<std::string>() << ". The error: " << short_text(e);
  r.error = os.str();
  r.extra["out_of_memory"] = oom;
  spdlog::critical("{}", r.error);
  return r;
}

}  // namespace fnvlp::train
