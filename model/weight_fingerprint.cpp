#include "model/weight_fingerprint.h"

#include <cstring>

#include "core/error.h"
#include "core/hash.h"

namespace e3::model {
namespace {

constexpr uint64_t kP = WeightFingerprint::kPrime;

uint64_t reduce(uint64_t x) {
  x = (x & kP) + (x >> 61);
  return x >= kP ? x - kP : x;
}

// a < P, b any 64-bit value: a * b mod P.
uint64_t mul_mod(uint64_t a, uint64_t b) {
  const unsigned __int128 p = static_cast<unsigned __int128>(a) * reduce(b);
  return reduce(static_cast<uint64_t>(p & kP) + static_cast<uint64_t>(p >> 61));
}

uint64_t add_mod(uint64_t a, uint64_t b) { return reduce(a + b); }

uint64_t pow_mod(uint64_t b, uint64_t e) {
  uint64_t r = 1;
  for (b = reduce(b); e; e >>= 1, b = mul_mod(b, b))
    if (e & 1) r = mul_mod(r, b);
  return r;
}

// The base of a tensor's powers: word j of tensor t is weighted by base(t)^j.
uint64_t base(size_t t) { return 2 + splitmix64(t) % (kP - 3); }

}  // namespace

WeightFingerprint::WeightFingerprint(std::vector<uint64_t> tensor_bytes)
    : tensor_bytes_(std::move(tensor_bytes)), sums_(tensor_bytes_.size(), 0), read_(tensor_bytes_.size(), 0) {}

uint64_t WeightFingerprint::positional_sum(size_t t, uint64_t begin, const void* data, size_t n) {
  auto* p = static_cast<const unsigned char*>(data);
  const uint64_t r = base(t);
  uint64_t sum = 0;
  // A word cut by the start or the end of the range adds only the bytes read: the bytes of
  // one word read by two pieces add up to the whole word (their bits do not overlap).
  auto partial = [&](uint64_t pos, size_t len) {
    uint64_t w = 0;
    std::memcpy(reinterpret_cast<unsigned char*>(&w) + pos % 8, p, len);
    sum = add_mod(sum, mul_mod(pow_mod(r, pos / 8), w));
    p += len;
  };
  uint64_t pos = begin;
  if (pos % 8 != 0 && n > 0) {
    const size_t len = std::min<size_t>(n, 8 - pos % 8);
    partial(pos, len);
    pos += len;
    n -= len;
  }
  // The whole words w_0 .. w_{m-1} from word j0 on: r^j0 * sum of w_i r^i, by Horner's rule in
  // eight lanes (words i = 8q + k), so that the multiplications do not wait on each other (the
  // lane count changes the order of the sums, not their value).
  constexpr size_t kLanes = 8;
  const size_t m = n / 8, groups = m / kLanes;
  if (m > 0) {
    const uint64_t r_lanes = pow_mod(r, kLanes);
    uint64_t lane[kLanes] = {};
    // The lanes stay below 2^62 + 16 without a compare: two folds of 2^64 = 8 (mod P).
    const auto fold = [](uint64_t x) { return (x & kP) + (x >> 61); };
    for (size_t q = groups; q-- > 0;) {
      uint64_t w[kLanes];
      std::memcpy(w, p + 8 * kLanes * q, 8 * kLanes);
      for (size_t k = 0; k < kLanes; ++k) {
        const unsigned __int128 prod = static_cast<unsigned __int128>(lane[k]) * r_lanes;
        lane[k] = fold(static_cast<uint64_t>(prod & kP) + static_cast<uint64_t>(prod >> 61)) + fold(w[k]);
      }
    }
    for (uint64_t& l : lane) l = reduce(reduce(l));
    uint64_t inner = 0, rk = 1;
    for (size_t k = 0; k < kLanes; ++k, rk = mul_mod(rk, r)) inner = add_mod(inner, mul_mod(rk, lane[k]));
    uint64_t ri = pow_mod(r, kLanes * groups);
    for (size_t i = kLanes * groups; i < m; ++i, ri = mul_mod(ri, r)) {
      uint64_t w;
      std::memcpy(&w, p + 8 * i, 8);
      inner = add_mod(inner, mul_mod(ri, w));
    }
    sum = add_mod(sum, mul_mod(pow_mod(r, pos / 8), inner));
    p += 8 * m;
    pos += 8 * m;
    n -= 8 * m;
  }
  if (n > 0) partial(pos, n);
  return sum;
}

void WeightFingerprint::add(size_t t, uint64_t begin, const void* data, size_t n) {
  E3_REQUIRE(t < sums_.size() && begin + n <= tensor_bytes_[t], ErrorKind::Internal,
             "weight fingerprint: read of tensor {} outside its bytes", t);
  const uint64_t s = positional_sum(t, begin, data, n);
  std::lock_guard lock(mu_);
  sums_[t] = add_mod(sums_[t], s);
  read_[t] += n;
}

std::vector<uint64_t> WeightFingerprint::partial_sums() const {
  std::vector<uint64_t> out;
  out.reserve(3 * sums_.size());
  for (size_t t = 0; t < sums_.size(); ++t) {
    out.push_back(sums_[t] & ((uint64_t{1} << 31) - 1));
    out.push_back(sums_[t] >> 31);
    out.push_back(read_[t]);
  }
  return out;
}

std::string WeightFingerprint::digest(const std::vector<uint64_t>& summed) const {
  E3_REQUIRE(summed.size() == 3 * tensor_bytes_.size(), ErrorKind::Internal, "weight fingerprint: {} sums for {} tensors",
             summed.size(), tensor_bytes_.size());
  Fnv1a h;
  for (size_t t = 0; t < tensor_bytes_.size(); ++t) {
    const uint64_t read = summed[3 * t + 2];
    if (read == 0) continue;  // a tensor no rank uses
    uint64_t sum = add_mod(reduce(summed[3 * t]), mul_mod(reduce(summed[3 * t + 1]), uint64_t{1} << 31));
    const uint64_t bytes = tensor_bytes_[t];
    // Every byte read the same number of times k: the tensor's own sum is sum / k. Otherwise
    // (reads that overlap unevenly) the sum stands as it is, with the bytes read.
    const bool even = bytes > 0 && read % bytes == 0;
    if (even) sum = mul_mod(sum, pow_mod(read / bytes, kP - 2));
    const uint64_t words[3] = {t, sum, even ? 0 : read};
    h.update(words, sizeof words);
  }
  return h.hex();
}

}  // namespace e3::model
