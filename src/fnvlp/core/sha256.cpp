#include "fnvlp/core/sha256.hpp"

#include <openssl/evp.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "fnvlp/core/error.hpp"

namespace fnvlp {

struct Sha256::Impl {
  EVP_MD_CTX* ctx = nullptr;
  bool done = false;
};

Sha256::Sha256() : impl_(std::make_unique<Impl>()) {
  impl_->ctx = EVP_MD_CTX_new();
  FNVLP_CHECK(impl_->ctx && EVP_DigestInit_ex(impl_->ctx, EVP_sha256(), nullptr) == 1,
              "OpenSSL SHA-256 initialisation failed");
}

Sha256::~Sha256() { EVP_MD_CTX_free(impl_->ctx); }

void Sha256::update(const void* data, size_t size) {
  FNVLP_CHECK(!impl_->done, "Sha256::update after hex()");
  FNVLP_CHECK(EVP_DigestUpdate(impl_->ctx, data, size) == 1, "OpenSSL SHA-256 update failed");
}

std::string Sha256::hex() {
  FNVLP_CHECK(!impl_->done, "Sha256::hex called twice");
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  FNVLP_CHECK(EVP_DigestFinal_ex(impl_->ctx, digest, &len) == 1, "OpenSSL SHA-256 final failed");
  impl_->done = true;
  static const char* kHex = "0123456789abcdef";
  std::string out(2 * len, '0');
  for (unsigned i = 0; i < len; ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 15];
  }
  return out;
}

std::string sha256_hex(const void* data, size_t size) {
  Sha256 h;
  h.update(data, size);
  return h.hex();
}

std::string sha256_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  FNVLP_CHECK(f, "cannot open '" << path << "' for checksumming: " << std::strerror(errno));
  Sha256 h;
  std::vector<unsigned char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) h.update(buf.data(), n);
  const bool failed = std::ferror(f);
  std::fclose(f);
  FNVLP_CHECK(!failed, "read error while checksumming '" << path << "'");
  return h.hex();
}

}  // namespace fnvlp
