#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "core/hash.h"
#include "model/weight_fingerprint.h"

namespace {

using e3::model::WeightFingerprint;

std::vector<uint8_t> bytes_of(size_t n, uint64_t seed) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(e3::splitmix64(seed + i));
  return b;
}

// Ranks, each reading ranges [begin, end) of tensors: what each rank's fingerprint adds up to.
using Reads = std::vector<std::vector<std::pair<size_t, std::pair<uint64_t, uint64_t>>>>;

std::string digest_of(const std::vector<std::vector<uint8_t>>& tensors, const Reads& ranks) {
  std::vector<uint64_t> sizes;
  for (const auto& t : tensors) sizes.push_back(t.size());
  std::vector<uint64_t> summed;
  WeightFingerprint any(sizes);
  for (const auto& reads : ranks) {
    WeightFingerprint fp(sizes);
    for (const auto& [t, range] : reads)
      fp.add(t, range.first, tensors[t].data() + range.first, range.second - range.first);
    const auto part = fp.partial_sums();
    if (summed.empty()) summed.assign(part.size(), 0);
    for (size_t i = 0; i < part.size(); ++i) summed[i] += part[i];
  }
  return any.digest(summed);
}

TEST(WeightFingerprint, SumDoesNotDependOnHowTheBytesAreCut) {
  const auto b = bytes_of(1000, 7);
  const uint64_t whole = WeightFingerprint::positional_sum(3, 0, b.data(), b.size());
  for (size_t cut : {1u, 5u, 8u, 13u, 999u}) {
    const uint64_t a = WeightFingerprint::positional_sum(3, 0, b.data(), cut);
    const uint64_t c = WeightFingerprint::positional_sum(3, cut, b.data() + cut, b.size() - cut);
    EXPECT_EQ((a + c) % WeightFingerprint::kPrime, whole) << "cut at " << cut;
  }
}

// The values the first implementation (four Horner lanes, 2026-12-02) gave: manifests written
// since hold fingerprints made of them, so any faster evaluation must give exactly these.
TEST(WeightFingerprint, SumsAreThoseOfTheManifestsWrittenBefore) {
  std::vector<unsigned char> b(1 << 20);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<unsigned char>((i * 2654435761u) >> 13);
  EXPECT_EQ(WeightFingerprint::positional_sum(3, 0, b.data(), 1000003), 0x138bf169447aeff3ull);
  EXPECT_EQ(WeightFingerprint::positional_sum(7, 5, b.data() + 5, 777777), 0x0fa5dcdf46596c87ull);
  EXPECT_EQ(WeightFingerprint::positional_sum(0, 64, b.data(), 31), 0x18ec712787e4d9d5ull);
  EXPECT_EQ(WeightFingerprint::positional_sum(12345, 3, b.data(), 200), 0x0b385dc0c6550245ull);
}

TEST(WeightFingerprint, SameWeightsSameDigestWhateverTheLayout) {
  const std::vector<std::vector<uint8_t>> w{bytes_of(4096, 1), bytes_of(250, 2), bytes_of(1026, 3)};
  // One rank reads everything in one piece each.
  const std::string one = digest_of(w, {{{0, {0, 4096}}, {1, {0, 250}}, {2, {0, 1026}}}});
  // TP 2: tensor 0 split in halves, tensor 1 replicated, tensor 2 split at an odd byte and read
  // in small pieces.
  const std::string tp2 = digest_of(w, {{{0, {0, 2048}}, {1, {0, 250}}, {2, {0, 3}}, {2, {3, 513}}},
                                        {{0, {2048, 4096}}, {1, {0, 250}}, {2, {513, 1026}}}});
  // DP 2 x TP 1: every rank reads everything.
  const std::string dp2 = digest_of(w, {{{0, {0, 4096}}, {1, {0, 250}}, {2, {0, 1026}}},
                                        {{2, {0, 1026}}, {1, {0, 250}}, {0, {1000, 4096}}, {0, {0, 1000}}}});
  EXPECT_EQ(one, tp2);
  EXPECT_EQ(one, dp2);
}

TEST(WeightFingerprint, OneChangedBitChangesTheDigest) {
  std::vector<std::vector<uint8_t>> w{bytes_of(4096, 1), bytes_of(250, 2)};
  const Reads all{{{0, {0, 4096}}, {1, {0, 250}}}};
  const std::string before = digest_of(w, all);
  w[0][1234] ^= 1;
  EXPECT_NE(digest_of(w, all), before);
  w[0][1234] ^= 1;
  EXPECT_EQ(digest_of(w, all), before);
  // The same bytes under each other's names differ.
  std::vector<std::vector<uint8_t>> swapped{bytes_of(250, 2), bytes_of(4096, 1)};
  EXPECT_NE(digest_of(swapped, {{{0, {0, 250}}, {1, {0, 4096}}}}), before);
}

}  // namespace
