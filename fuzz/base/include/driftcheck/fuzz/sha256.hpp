// SHA-256 (OpenSSL's libcrypto) of bytes in memory: content addresses of corpus entries, checksums of golden
// tensors, the identity of a gate config.
#pragma once

#include <string>
#include <string_view>

namespace driftcheck::fuzz {

// Lower-case hex, 64 characters.
std::string sha256_hex(std::string_view bytes);

// Incremental form, for content that comes in pieces.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(std::string_view bytes);
  std::string hex();  // finishes the digest; update() may not be called after it

 private:
  void* ctx_;  // EVP_MD_CTX
};

}  // namespace driftcheck::fuzz
