// FNV-1a, 64 bit: a stable fingerprint of configs and run settings (not for security).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace e3 {

class Fnv1a {
 public:
  Fnv1a& update(const void* data, size_t n) {
    auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) {
      state_ ^= p[i];
      state_ *= 0x100000001b3ull;
    }
    return *this;
  }
  Fnv1a& update(std::string_view s) { return update(s.data(), s.size()); }
  uint64_t digest() const { return state_; }
  std::string hex() const { return fmt::format("{:016x}", state_); }

 private:
  uint64_t state_ = 0xcbf29ce484222325ull;
};

}  // namespace e3
