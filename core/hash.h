// Stable 64-bit hashes (not for security): FNV-1a for configs and run settings, and a fast
// content checksum for output files.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "core/host_device.h"

namespace e3 {

// splitmix64: a well-mixed 64-bit value of x, the counter-based generator behind the
// benchmark's random weights (no state, so every element is computed independently).
E3_HOST_DEVICE inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

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

// A checksum of file contents that runs at memory speed: four independent lanes over 8-byte
// words (multiply, rotate, multiply), then mixed with the tail bytes and the length. The
// digest does not depend on how the data is cut into update() calls. Words are read in the
// host's byte order (little-endian on every machine this program targets).
class ContentHash {
 public:
  ContentHash& update(const void* data, size_t n) {
    auto* p = static_cast<const unsigned char*>(data);
    total_ += n;
    if (fill_ > 0) {
      const size_t take = n < kBlock - fill_ ? n : kBlock - fill_;
      std::memcpy(pending_ + fill_, p, take);
      fill_ += take;
      p += take;
      n -= take;
      if (fill_ < kBlock) return *this;
      block(pending_);
      fill_ = 0;
    }
    for (; n >= kBlock; p += kBlock, n -= kBlock) block(p);
    std::memcpy(pending_, p, n);
    fill_ = n;
    return *this;
  }
  uint64_t digest() const {
    uint64_t h = total_ * kPrime3;
    for (uint64_t lane : lanes_) h = (h ^ round(0, lane)) * kPrime1 + kPrime4;
    for (size_t i = 0; i < fill_; ++i) h = (h ^ pending_[i]) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= kPrime2;
    h ^= h >> 29;
    h *= kPrime3;
    h ^= h >> 32;
    return h;
  }
  std::string hex() const { return fmt::format("{:016x}", digest()); }

 private:
  static constexpr size_t kBlock = 32;
  static constexpr uint64_t kPrime1 = 0x9e3779b185ebca87ull, kPrime2 = 0xc2b2ae3d27d4eb4full,
                            kPrime3 = 0x165667b19e3779f9ull, kPrime4 = 0x85ebca77c2b2ae63ull;
  static uint64_t round(uint64_t acc, uint64_t word) {
    acc += word * kPrime2;
    acc = (acc << 31) | (acc >> 33);
    return acc * kPrime1;
  }
  void block(const unsigned char* p) {
    for (int i = 0; i < 4; ++i) {
      uint64_t w;
      std::memcpy(&w, p + 8 * i, 8);
      lanes_[i] = round(lanes_[i], w);
    }
  }
  uint64_t lanes_[4] = {kPrime1 + kPrime2, kPrime2, 0, 0 - kPrime1};
  unsigned char pending_[kBlock] = {};
  size_t fill_ = 0;
  uint64_t total_ = 0;
};

}  // namespace e3
