// A fingerprint of a checkpoint's weight bytes, computed from the bytes each rank reads while
// loading, so that a rerun with another checkpoint of the same shape (a fine-tune of the same
// base) is told apart without reading anything twice.
//
// Word j (8 bytes, counted from the tensor's first byte) of tensor t adds word * r_t^j modulo
// the prime 2^61 - 1, with r_t drawn from t's ordinal. The sum is linear in the bytes and keyed by position, so it
// does not depend on how the reads are cut, on which thread reads what, or in what order: a
// word read in two pieces adds the same as when read whole. Summed over every rank, a tensor
// each of whose bytes was read k times (split: once; replicated over the TP group: tp times;
// and every DP group reads the same again) is divided by k, so that the fingerprint does not
// depend on --tp or the DP layout either.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace e3::model {

class WeightFingerprint {
 public:
  static constexpr uint64_t kPrime = (uint64_t{1} << 61) - 1;

  // `tensor_bytes[t]`: the data bytes of tensor t (its ordinal in name order).
  explicit WeightFingerprint(std::vector<uint64_t> tensor_bytes = {});

  // Bytes [begin, begin + n) of tensor t, as read; thread-safe.
  void add(size_t t, uint64_t begin, const void* data, size_t n);

  // This rank's sums per tensor, to be summed over every rank: for each tensor, the sum split
  // into its low 31 and high 30 bits (so that adding thousands of ranks' values cannot
  // overflow) and the bytes read.
  std::vector<uint64_t> partial_sums() const;
  // The fingerprint from every rank's partial_sums() added element by element.
  std::string digest(const std::vector<uint64_t>& summed) const;

  // word * r_t^j summed over bytes [begin, begin + n) of tensor t (exposed for tests).
  static uint64_t positional_sum(size_t t, uint64_t begin, const void* data, size_t n);

 private:
  std::vector<uint64_t> tensor_bytes_;
  std::vector<uint64_t> sums_, read_;
  std::mutex mu_;
};

}  // namespace e3::model
