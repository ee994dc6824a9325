#pragma once
// Helpers shared by the libFuzzer targets: the parsers under test read files, so an input is
// written to a per-process temporary file first (tmpfs-backed /tmp keeps this cheap).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace fnvlp::fuzz {

inline std::string temp_path(const char* suffix) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/fnvlp_fuzz_" + std::to_string(::getpid()) +
         suffix;
}

inline const std::string& write_temp(const uint8_t* data, size_t size, const char* suffix) {
  static std::string path;
  path = temp_path(suffix);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

}  // namespace fnvlp::fuzz
