// The content checksum of output shards: independent of how the bytes arrive, and sensitive
// to any single changed, added or removed byte.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <vector>

#include "core/hash.h"

namespace {

std::vector<unsigned char> random_bytes(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

uint64_t hash_in_chunks(const std::vector<unsigned char>& v, size_t chunk) {
  e3::ContentHash h;
  for (size_t i = 0; i < v.size(); i += chunk) h.update(v.data() + i, std::min(chunk, v.size() - i));
  return h.digest();
}

TEST(ContentHash, DigestDoesNotDependOnChunking) {
  const auto v = random_bytes(100003, 1);
  const uint64_t whole = hash_in_chunks(v, v.size());
  for (size_t chunk : {1u, 7u, 31u, 32u, 33u, 4096u}) EXPECT_EQ(hash_in_chunks(v, chunk), whole) << chunk;
}

TEST(ContentHash, EverySingleByteChangeChangesTheDigest) {
  const auto v = random_bytes(257, 2);
  const uint64_t base = hash_in_chunks(v, v.size());
  std::set<uint64_t> seen{base};
  for (size_t i = 0; i < v.size(); ++i) {
    auto w = v;
    w[i] ^= 0x01;
    EXPECT_TRUE(seen.insert(hash_in_chunks(w, w.size())).second) << "byte " << i;
  }
}

TEST(ContentHash, LengthMatters) {
  std::vector<unsigned char> zeros(64, 0);
  std::set<uint64_t> seen;
  for (size_t n = 0; n <= zeros.size(); ++n) {
    e3::ContentHash h;
    h.update(zeros.data(), n);
    EXPECT_TRUE(seen.insert(h.digest()).second) << n << " zero bytes";
  }
}

}  // namespace
