#include "fnvlp/store/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

#include "fnvlp/core/error.hpp"

namespace fnvlp::store {

namespace {

// Closes on scope exit.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

void pread_all(int fd, void* dst, uint64_t n, uint64_t offset, const std::string& file) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, static_cast<size_t>(std::min<uint64_t>(n, 1u << 30)),
                                static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    FNVLP_CHECK(got > 0, file << ": read failed at byte " << offset << ": "
                              << (got < 0 ? std::strerror(errno) : "unexpected end of file"));
    p += got;
    n -= static_cast<uint64_t>(got);
    offset += static_cast<uint64_t>(got);
  }
}

void write_all(int fd, const void* src, size_t n, const std::string& file) {
  const auto* p = static_cast<const char*>(src);
  while (n > 0) {
    const ssize_t put = ::write(fd, p, std::min<size_t>(n, 1u << 30));
    if (put < 0 && errno == EINTR) continue;
    FNVLP_CHECK(put > 0, file << ": write failed: " << std::strerror(errno));
    p += put;
    n -= static_cast<size_t>(put);
  }
}

uint64_t le64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

}  // namespace

int safetensors_dtype_size(const std::string& dtype) {
  static const std::map<std::string, int> sizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2},
      {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"U16", 2},  {"U32", 4}, {"U64", 8}};
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

uint64_t SafetensorsEntry::numel() const {
  uint64_t n = 1;
  for (const int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

const SafetensorsEntry* SafetensorsHeader::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

SafetensorsHeader parse_safetensors(const std::string& file, const std::string& prefix,
                                    uint64_t file_size) {
  FNVLP_CHECK(file_size >= 8 && prefix.size() >= 8,
              file << ": not a safetensors file (" << file_size
                   << " bytes, shorter than the 8-byte header length)");
  const uint64_t n = le64(prefix.data());
  FNVLP_CHECK(n <= kSafetensorsMaxHeader, file << ": safetensors header length " << n
                                               << " bytes exceeds the limit of "
                                               << kSafetensorsMaxHeader);
  FNVLP_CHECK(n <= file_size - 8, file << ": safetensors header length " << n
                                       << " bytes runs past the end of the file (" << file_size
                                       << " bytes)");
  FNVLP_CHECK(prefix.size() >= 8 + n, file << ": header truncated");
  SafetensorsHeader h;
  h.file = file;
  h.data_offset = 8 + n;
  h.file_size = file_size;
  const nlohmann::json j = nlohmann::json::parse(prefix.begin() + 8, prefix.begin() + 8 + n,
                                                 nullptr, /*allow_exceptions=*/false);
  FNVLP_CHECK(!j.is_discarded(), file << ": the safetensors header is not valid JSON");
  FNVLP_CHECK(j.is_object(), file << ": the safetensors header is not a JSON object");
  const uint64_t data_size = file_size - h.data_offset;
  for (const auto& [name, v] : j.items()) {
    if (name == "__metadata__") {
      FNVLP_CHECK(v.is_object(), file << ": __metadata__ is not an object");
      for (const auto& [k, s] : v.items()) {
        FNVLP_CHECK(s.is_string(), file << ": __metadata__." << k << " is not a string");
        h.metadata[k] = s.get<std::string>();
      }
      continue;
    }
    FNVLP_CHECK(
        v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"),
        file << ": tensor '" << name << "' lacks dtype, shape or data_offsets");
    SafetensorsEntry e;
    e.name = name;
    FNVLP_CHECK(v["dtype"].is_string(), file << ": tensor '" << name << "': dtype not a string");
    e.dtype = v["dtype"].get<std::string>();
    const int esize = safetensors_dtype_size(e.dtype);
    FNVLP_CHECK(esize > 0, file << ": tensor '" << name << "': unknown dtype '" << e.dtype << "'");
    FNVLP_CHECK(v["shape"].is_array(), file << ": tensor '" << name << "': shape not an array");
    uint64_t bytes = static_cast<uint64_t>(esize);
    bool zero = false;
    for (const auto& d : v["shape"]) {
      FNVLP_CHECK(d.is_number_unsigned() || (d.is_number_integer() && d.get<int64_t>() >= 0),
                  file << ": tensor '" << name << "': shape " << v["shape"].dump()
                       << " is not a list of non-negative integers");
      const uint64_t u = d.get<uint64_t>();
      FNVLP_CHECK(u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
                  file << ": tensor '" << name << "': dimension " << u << " too large");
      e.shape.push_back(static_cast<int64_t>(u));
      if (u == 0) zero = true;
      // Overflow-safe: the product is compared with the file's size before it can wrap.
      if (!zero) {
        FNVLP_CHECK(bytes <= data_size / u || u == 0,
                    file << ": tensor '" << name << "': shape " << v["shape"].dump() << " of "
                         << e.dtype << " needs more bytes than the file's data region ("
                         << data_size << ")");
        bytes *= u;
      }
    }
    if (zero) bytes = 0;
    const auto& off = v["data_offsets"];
    FNVLP_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() &&
                    off[1].is_number_unsigned(),
                file << ": tensor '" << name << "': data_offsets " << off.dump()
                     << " is not a pair of non-negative integers");
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    FNVLP_CHECK(e.begin <= e.end && e.end <= data_size,
                file << ": tensor '" << name << "': data_offsets [" << e.begin << ", " << e.end
                     << "] lie outside the data region of " << data_size << " bytes");
    FNVLP_CHECK(e.end - e.begin == bytes, file << ": tensor '" << name << "': " << e.end - e.begin
                                               << " bytes for shape " << v["shape"].dump() << " of "
                                               << e.dtype << " (" << bytes << " expected)");
    h.tensors.push_back(std::move(e));
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t at = 0;
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    const auto& t = h.tensors[i];
    FNVLP_CHECK(t.begin >= at, file << ": tensor '" << t.name << "' [" << t.begin << ", " << t.end
                                    << ") overlaps tensor '" << h.tensors[i - 1].name << "' ["
                                    << h.tensors[i - 1].begin << ", " << at << ")");
    FNVLP_CHECK(t.begin == at, file << ": bytes [" << at << ", " << t.begin
                                    << ") of the data region belong to no tensor (before '"
                                    << t.name << "')");
    at = t.end;
  }
  FNVLP_CHECK(at == data_size, file << ": the data region has " << data_size
                                    << " bytes but its tensors end at " << at);
  return h;
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  Fd f(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  FNVLP_CHECK(f.fd >= 0, path << ": cannot open: " << std::strerror(errno));
  struct stat st {};
  FNVLP_CHECK(::fstat(f.fd, &st) == 0 && S_ISREG(st.st_mode), path << ": not a regular file");
  const auto size = static_cast<uint64_t>(st.st_size);
  std::string prefix(std::min<uint64_t>(size, 8), '\0');
  if (!prefix.empty()) pread_all(f.fd, prefix.data(), prefix.size(), 0, path);
  if (size >= 8) {
    const uint64_t n = le64(prefix.data());
    if (n <= kSafetensorsMaxHeader && n <= size - 8) {
      prefix.resize(8 + n);
      pread_all(f.fd, prefix.data() + 8, n, 8, path);
    }
  }
  return parse_safetensors(path, prefix, size);
}

void read_safetensors_bytes(const SafetensorsHeader& h, const SafetensorsEntry& e, void* dst) {
  if (e.end == e.begin) return;
  Fd f(::open(h.file.c_str(), O_RDONLY | O_CLOEXEC));
  FNVLP_CHECK(f.fd >= 0, h.file << ": cannot open: " << std::strerror(errno));
  struct stat st {};
  FNVLP_CHECK(::fstat(f.fd, &st) == 0 && static_cast<uint64_t>(st.st_size) == h.file_size,
              h.file << ": changed size while being read (" << h.file_size << " bytes before)");
  pread_all(f.fd, dst, e.end - e.begin, h.data_offset + e.begin, h.file);
}

std::vector<char> read_safetensors_bytes(const SafetensorsHeader& h, const SafetensorsEntry& e) {
  std::vector<char> out(e.end - e.begin);
  read_safetensors_bytes(h, e, out.data());
  return out;
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsOut>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<const SafetensorsOut*> order;
  for (const auto& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->name < b->name; });
  nlohmann::json j = nlohmann::json::object();
  if (!metadata.empty()) j["__metadata__"] = metadata;
  std::vector<uint64_t> sizes;
  uint64_t at = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const auto& t = *order[i];
    FNVLP_CHECK(i == 0 || order[i - 1]->name != t.name,
                path << ": tensor '" << t.name << "' given twice");
    const int esize = safetensors_dtype_size(t.dtype);
    FNVLP_CHECK(esize > 0, path << ": tensor '" << t.name << "': unknown dtype " << t.dtype);
    uint64_t bytes = static_cast<uint64_t>(esize);
    for (const int64_t d : t.shape) {
      FNVLP_CHECK(d >= 0, path << ": tensor '" << t.name << "': negative dimension");
      bytes *= static_cast<uint64_t>(d);
    }
    j[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {at, at + bytes}}};
    sizes.push_back(bytes);
    at += bytes;
  }
  std::string header = j.dump();
  header.resize((header.size() + 7) / 8 * 8, ' ');
  char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  const std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  {
    Fd f(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    FNVLP_CHECK(f.fd >= 0, tmp << ": cannot create: " << std::strerror(errno));
    try {
      write_all(f.fd, len, 8, tmp);
      write_all(f.fd, header.data(), header.size(), tmp);
      for (size_t i = 0; i < order.size(); ++i)
        if (sizes[i] > 0) write_all(f.fd, order[i]->data, sizes[i], tmp);
      FNVLP_CHECK(::fsync(f.fd) == 0, tmp << ": fsync failed: " << std::strerror(errno));
    } catch (...) {
      ::unlink(tmp.c_str());
      throw;
    }
  }
  FNVLP_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0,
              "cannot rename '" << tmp << "' to '" << path << "': " << std::strerror(errno));
}

}  // namespace fnvlp::store
