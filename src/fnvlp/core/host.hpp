#pragma once
// The node's name, as errors and lock files name where something ran.
#include <unistd.h>

#include <string>

namespace fnvlp {

inline std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "unknown-host";
  return name;
}

}  // namespace fnvlp
