#pragma once
// The memory benchmarks' reading of this process's resident set (Linux /proc/self/status).
#include <cstdlib>
#include <fstream>
#include <string>

namespace fnvlp::bench {

// A "Vm...:" line of /proc/self/status (VmRSS, VmHWM, ...) in MiB; -1 when absent.
inline double status_mib(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) return std::strtod(line.c_str() + 6, nullptr) / 1024.0;
  return -1;
}

}  // namespace fnvlp::bench
