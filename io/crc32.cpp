#include "io/crc32.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace e3::io {

namespace {

constexpr uint32_t kReflectedPoly = 0xEDB88320u;
constexpr uint64_t kPoly = 0x104C11DB7ull;  // the same polynomial, highest degree first

// kTables[k][b]: the register after byte b followed by k zero bytes, from a zero register.
using Tables = std::array<std::array<uint32_t, 256>, 8>;
constexpr Tables make_tables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t r = b;
    for (int bit = 0; bit < 8; ++bit) r = (r >> 1) ^ ((r & 1u) ? kReflectedPoly : 0u);
    t[0][b] = r;
  }
  for (size_t k = 1; k < t.size(); ++k)
    for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFu];
  return t;
}
constexpr Tables kTables = make_tables();

// The raw register (no initial or final inversion) after `n` more bytes.
uint32_t advance_tables(uint32_t r, const unsigned char* p, size_t n) {
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);  // little-endian: the first byte is the low one
    v ^= r;
    r = kTables[7][v & 0xFF] ^ kTables[6][(v >> 8) & 0xFF] ^ kTables[5][(v >> 16) & 0xFF] ^
        kTables[4][(v >> 24) & 0xFF] ^ kTables[3][(v >> 32) & 0xFF] ^ kTables[2][(v >> 40) & 0xFF] ^
        kTables[1][(v >> 48) & 0xFF] ^ kTables[0][v >> 56];
  }
  for (; n > 0; ++p, --n) r = (r >> 8) ^ kTables[0][(r ^ *p) & 0xFFu];
  return r;
}

#if defined(__x86_64__)

// x^e mod P, bit-reflected into the upper half of 64 bits: the form a 64-bit half of a
// reflected 128-bit block multiplies with (the product then lines up with the block's bits).
constexpr uint64_t folding_constant(int e) {
  uint64_t v = 1;
  for (int i = 0; i < e; ++i) {
    v <<= 1;
    if (v & (1ull << 32)) v ^= kPoly;
  }
  uint64_t reflected = 0;
  for (int i = 0; i < 32; ++i)
    if (v & (1ull << i)) reflected |= 1ull << (31 - i);
  return reflected << 32;
}

// A 16-byte block read little-endian holds a polynomial whose bit i has degree 127 - i. To
// move block A forward by D bits (A * x^D mod P, congruent and still 128 bits), split it into
// A_hi * x^64 + A_lo (low and high 64-bit lanes) and multiply A_hi by x^(D+64) and A_lo by x^D;
// a carry-less product of reflected operands comes out one degree short, hence the - 1.
template <int D>
struct Fold {
  static constexpr uint64_t kHi = folding_constant(D + 64 - 1);  // for the low lane (A_hi)
  static constexpr uint64_t kLo = folding_constant(D - 1);       // for the high lane (A_lo)
};

__attribute__((target("pclmul,sse4.1"))) inline __m128i fold(__m128i a, __m128i k, __m128i next) {
  return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(a, k, 0x00), _mm_clmulepi64_si128(a, k, 0x11)), next);
}

// n >= 64. Four independent lanes fold 512 bits at a time (the multiplier's latency hides
// behind the other lanes), then fold into one block, which the tables finish with the tail.
__attribute__((target("pclmul,sse4.1"))) uint32_t crc32_clmul(uint32_t crc, const unsigned char* p, size_t n) {
  const auto load = [](const unsigned char* q) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q)); };
  __m128i x0 = _mm_xor_si128(load(p), _mm_cvtsi32_si128(static_cast<int>(~crc)));
  __m128i x1 = load(p + 16);
  __m128i x2 = load(p + 32);
  __m128i x3 = load(p + 48);
  p += 64;
  n -= 64;
  const __m128i k512 = _mm_set_epi64x(static_cast<long long>(Fold<512>::kLo), static_cast<long long>(Fold<512>::kHi));
  for (; n >= 64; p += 64, n -= 64) {
    x0 = fold(x0, k512, load(p));
    x1 = fold(x1, k512, load(p + 16));
    x2 = fold(x2, k512, load(p + 32));
    x3 = fold(x3, k512, load(p + 48));
  }
  const __m128i k128 = _mm_set_epi64x(static_cast<long long>(Fold<128>::kLo), static_cast<long long>(Fold<128>::kHi));
  x1 = fold(x0, k128, x1);
  x2 = fold(x1, k128, x2);
  x3 = fold(x2, k128, x3);
  for (; n >= 16; p += 16, n -= 16) x3 = fold(x3, k128, load(p));
  // The folded block is congruent to everything so far, with the initial register in it:
  // the tables finish it from a zero register.
  unsigned char block[16];
  _mm_storeu_si128(reinterpret_cast<__m128i*>(block), x3);
  return ~advance_tables(advance_tables(0, block, 16), p, n);
}

bool cpu_has_clmul() {
  static const bool has = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  return has;
}

#endif

}  // namespace

namespace detail {

uint32_t crc32_tables(uint32_t crc, const void* data, size_t n) {
  return ~advance_tables(~crc, static_cast<const unsigned char*>(data), n);
}

bool crc32_uses_clmul() {
#if defined(__x86_64__)
  return cpu_has_clmul();
#else
  return false;
#endif
}

}  // namespace detail

uint32_t crc32(uint32_t crc, const void* data, size_t n) {
#if defined(__x86_64__)
  if (n >= 64 && cpu_has_clmul()) return crc32_clmul(crc, static_cast<const unsigned char*>(data), n);
#endif
  return detail::crc32_tables(crc, data, n);
}

}  // namespace e3::io
