// SHA-256 (FIPS 180-4), for cache keys and cache-file checksums. Not constant-time; not for secrets.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace bnb::jit {

class Sha256 {
 public:
  Sha256();
  // Appends bytes to the message; may be called any number of times before Digest().
  void Update(const void* data, size_t n);
  void Update(absl::string_view s) { Update(s.data(), s.size()); }
  // The 32-byte digest of everything appended. The object must not be updated afterwards.
  std::array<uint8_t, 32> Digest();
  // Digest() as 64 lowercase hex digits.
  std::string HexDigest();

 private:
  void Block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

// One-shot helpers.
std::array<uint8_t, 32> Sha256Digest(absl::string_view data);
std::string Sha256Hex(absl::string_view data);
std::string ToHex(const uint8_t* p, size_t n);

}  // namespace bnb::jit
