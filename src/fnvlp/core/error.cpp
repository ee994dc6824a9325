#include "fnvlp/core/error.hpp"

#include <hdf5.h>

#include <cstring>
#include <vector>

namespace fnvlp {

namespace {
std::string basename_of(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}
}  // namespace

Error::Error(const std::string& message, const char* file, int line)
    : std::runtime_error(message + " (" + basename_of(file) + ":" + std::to_string(line) + ")"),
      message_(message),
      file_(file),
      line_(line) {}

namespace detail {

void throw_error(const char* file, int line, const std::string& message) {
  throw Error(message, file, line);
}

namespace {
herr_t collect_h5_frame(unsigned n, const H5E_error2_t* err, void* data) {
  auto* frames = static_cast<std::vector<std::string>*>(data);
  if (err->desc && *err->desc) frames->push_back(err->desc);
  return 0;
}
}  // namespace

std::string h5_error_stack() {
  std::vector<std::string> frames;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_h5_frame, &frames);
  H5Eclear2(H5E_DEFAULT);
  std::string out;
  for (const auto& f : frames) out += (out.empty() ? " (hdf5: " : "; ") + f;
  if (!out.empty()) out += ")";
  return out;
}

}  // namespace detail
}  // namespace fnvlp
