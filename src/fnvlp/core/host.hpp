#pragma once
// The node's name, as errors and lock files name where something ran; the CPUs this process may
// run on.
#include <sched.h>
#include <unistd.h>

#include <string>

namespace fnvlp {

inline std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "unknown-host";
  return name;
}

// CPUs in this process's affinity mask (what a launcher's binding leaves it: mpirun binds each
// rank to one core by default at np <= 2); 0 when the mask cannot be read.
inline int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
  return CPU_COUNT(&set);
}

}  // namespace fnvlp
