#pragma once
// SHA-256 (OpenSSL) of buffers and files, as lower-case hex: the checksums of shards and vocabs.
#include <cstddef>
#include <memory>
#include <string>

namespace fnvlp {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t size);
  std::string hex();  // finalises; the object cannot be updated afterwards

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

std::string sha256_hex(const void* data, size_t size);
// Streams the file; throws fnvlp::Error naming the path when it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace fnvlp
