#include "driftcheck/fuzz/sha256.hpp"

#include <stdexcept>

#include <fmt/format.h>
#include <openssl/evp.h>

namespace driftcheck::fuzz {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr || EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("OpenSSL: cannot initialise SHA-256");
}

Sha256::~Sha256() {
  EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_));
}

void Sha256::update(std::string_view bytes) {
  if (EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), bytes.data(), bytes.size()) != 1)
    throw std::runtime_error("OpenSSL: SHA-256 update failed");
}

std::string Sha256::hex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), digest, &n) != 1)
    throw std::runtime_error("OpenSSL: SHA-256 final failed");
  std::string out;
  for (unsigned int i = 0; i < n; ++i) out += fmt::format("{:02x}", digest[i]);
  return out;
}

std::string sha256_hex(std::string_view bytes) {
  Sha256 h;
  h.update(bytes);
  return h.hex();
}

}  // namespace driftcheck::fuzz
