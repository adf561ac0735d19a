// Host conversions between fp32 and the 16-bit storage types. Shards are written through
// these, so every rounding rule (ties to even, overflow, subnormals, NaN) matters.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace {

using namespace e3;

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

constexpr float kInf = std::numeric_limits<float>::infinity();

// Nearest of the two bf16 neighbours of f by exact double arithmetic, ties to the even one.
uint16_t ref_bf16(float f) {
  const uint32_t u = bits_of(f);
  const auto lo = static_cast<uint16_t>(u >> 16);  // truncation: toward zero
  const auto hi = static_cast<uint16_t>(lo + 1);   // next in magnitude (0x7f80 is inf)
  const double a = std::fabs(static_cast<double>(f));
  const double vlo = std::fabs(static_cast<double>(bf16_to_float(lo)));
  // The step past the largest finite value lands on inf; measure it as 2^128.
  const double vhi = (hi & 0x7fffu) == 0x7f80u ? std::ldexp(1.0, 128) : std::fabs(static_cast<double>(bf16_to_float(hi)));
  const double dlo = a - vlo, dhi = vhi - a;
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1u) ? hi : lo;
}

// ---------------------------------------------------------------- bf16

TEST(DtypeBf16, ExactValuesConvertExactly) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16(0.15625f), 0x3e20);
}

TEST(DtypeBf16, TiesRoundToEven) {
  const float ulp = std::ldexp(1.0f, -7);  // bf16 spacing at 1.0
  // 1 + ulp/2 sits exactly between 1 (even) and 1 + ulp (odd): goes down.
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3 ulp/2 sits between 1 + ulp (odd) and 1 + 2 ulp (even): goes up.
  EXPECT_EQ(float_to_bf16(1.0f + 3.0f * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(bf16_to_float(0x3f82), 1.0f + 2.0f * ulp);
  EXPECT_EQ(float_to_bf16(-(1.0f + std::ldexp(1.0f, -8))), 0xbf80);
  EXPECT_EQ(float_to_bf16(-(1.0f + 3.0f * std::ldexp(1.0f, -8))), 0xbf82);
}

TEST(DtypeBf16, NonTiesRoundToNearest) {
  // Just above and just below the tie at 1 + 2^-8.
  EXPECT_EQ(float_to_bf16(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)), 0x3f81);
  EXPECT_EQ(float_to_bf16(std::nextafter(1.0f + std::ldexp(1.0f, -8), 0.0f)), 0x3f80);
  // A carry out of the mantissa bumps the exponent: the largest float below 2 rounds to 2.
  EXPECT_EQ(float_to_bf16(std::nextafter(2.0f, 0.0f)), 0x4000);
}

TEST(DtypeBf16, NanStaysNan) {
  // Payloads only in the low 16 bits would truncate to an infinity if handled naively.
  for (uint32_t u : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0x7f80ffffu}) {
    const uint16_t h = float_to_bf16(from_bits(u));
    EXPECT_TRUE(std::isnan(bf16_to_float(h))) << std::hex << u << " -> " << h;
    EXPECT_EQ(h & 0x8000u, (u >> 16) & 0x8000u) << "sign of " << std::hex << u;
  }
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DtypeBf16, InfinityStaysInfinity) {
  EXPECT_EQ(float_to_bf16(kInf), 0x7f80);
  EXPECT_EQ(float_to_bf16(-kInf), 0xff80);
  EXPECT_EQ(bf16_to_float(0x7f80), kInf);
  EXPECT_EQ(bf16_to_float(0xff80), -kInf);
  // FLT_MAX lies past the midpoint between bf16's largest finite value and 2^128.
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(float_to_bf16(bf16_to_float(0x7f7f)), 0x7f7f);
}

TEST(DtypeBf16, ToFloatIsExactForEveryPattern) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = bf16_to_float(static_cast<uint16_t>(h));
    ASSERT_EQ(bits_of(f), h << 16) << std::hex << h;
    if (!std::isnan(f)) {
      ASSERT_EQ(float_to_bf16(f), h) << std::hex << h;
    }
  }
}

TEST(DtypeBf16, MatchesExactReferenceOnRandomFloats) {
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const float f = from_bits(static_cast<uint32_t>(rng()));
    if (std::isnan(f) || std::isinf(f)) continue;
    ASSERT_EQ(float_to_bf16(f), ref_bf16(f)) << std::hex << bits_of(f);
  }
}

// ---------------------------------------------------------------- fp16

// Decoding by definition: sign, 5 exponent bits (bias 15), 10 mantissa bits.
double ref_fp16_value(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  double v = exp == 0 ? std::ldexp(static_cast<double>(man), -24) : std::ldexp(1.0 + man / 1024.0, exp - 15);
  return sign ? -v : v;
}

TEST(DtypeFp16, ExactValuesConvertExactly) {
  EXPECT_EQ(float_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(float_to_fp16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_fp16(0.5f), 0x3800);
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_fp16(-65504.0f), 0xfbff);
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(float_to_fp16(1.0f + std::ldexp(1.0f, -10)), 0x3c01);
  EXPECT_EQ(fp16_to_float(0x3c00), 1.0f);
  EXPECT_EQ(fp16_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(fp16_to_float(0xc000), -2.0f);
}

TEST(DtypeFp16, TiesRoundToEven) {
  EXPECT_EQ(float_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(float_to_fp16(1.0f + 3.0f * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(float_to_fp16(-(1.0f + std::ldexp(1.0f, -11))), 0xbc00);
  EXPECT_EQ(float_to_fp16(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)), 0x3c01);
  // 2048 + 1 is halfway between 2048 and 2050.
  EXPECT_EQ(float_to_fp16(2049.0f), float_to_fp16(2048.0f));
  EXPECT_EQ(float_to_fp16(2051.0f), float_to_fp16(2052.0f));
}

TEST(DtypeFp16, OverflowGoesToInfinity) {
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7c00);  // the midpoint rounds to even, i.e. past the top
  EXPECT_EQ(float_to_fp16(-65520.0f), 0xfc00);
  EXPECT_EQ(float_to_fp16(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(float_to_fp16(1e6f), 0x7c00);
  EXPECT_EQ(float_to_fp16(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(float_to_fp16(kInf), 0x7c00);
  EXPECT_EQ(float_to_fp16(-kInf), 0xfc00);
  EXPECT_EQ(fp16_to_float(0x7c00), kInf);
  EXPECT_EQ(fp16_to_float(0xfc00), -kInf);
}

TEST(DtypeFp16, Subnormals) {
  const float tiny = std::ldexp(1.0f, -24);  // smallest fp16 subnormal
  EXPECT_EQ(float_to_fp16(tiny), 0x0001);
  EXPECT_EQ(fp16_to_float(0x0001), tiny);
  EXPECT_EQ(float_to_fp16(-tiny), 0x8001);
  EXPECT_EQ(float_to_fp16(1023.0f * tiny), 0x03ff);
  EXPECT_EQ(fp16_to_float(0x03ff), 1023.0f * tiny);
  // Ties among subnormals: half of the smallest goes to zero, 3/2 of it to 2.
  EXPECT_EQ(float_to_fp16(0.5f * tiny), 0x0000);
  EXPECT_EQ(float_to_fp16(1.5f * tiny), 0x0002);
  EXPECT_EQ(float_to_fp16(std::nextafter(0.5f * tiny, 1.0f)), 0x0001);
  // Halfway between the largest subnormal (odd) and the smallest normal (even).
  EXPECT_EQ(float_to_fp16(1023.5f * tiny), 0x0400);
  // Far below the range: zero, keeping the sign.
  EXPECT_EQ(float_to_fp16(1e-30f), 0x0000);
  EXPECT_EQ(float_to_fp16(-1e-30f), 0x8000);
  EXPECT_EQ(float_to_fp16(std::numeric_limits<float>::denorm_min()), 0x0000);
}

TEST(DtypeFp16, ZeroKeepsItsSign) {
  EXPECT_EQ(float_to_fp16(0.0f), 0x0000);
  EXPECT_EQ(float_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(fp16_to_float(0x0000), 0.0f);
  EXPECT_FALSE(std::signbit(fp16_to_float(0x0000)));
  EXPECT_TRUE(std::signbit(fp16_to_float(0x8000)));
}

TEST(DtypeFp16, NanStaysNan) {
  for (uint32_t u : {0x7fc00000u, 0x7f800001u, 0xffc00000u, 0x7f802000u}) {
    const uint16_t h = float_to_fp16(from_bits(u));
    EXPECT_EQ(h & 0x7c00u, 0x7c00u) << std::hex << u;
    EXPECT_NE(h & 0x03ffu, 0u) << std::hex << u;
    EXPECT_TRUE(std::isnan(fp16_to_float(h)));
  }
  EXPECT_TRUE(std::isnan(fp16_to_float(0x7e00)));
  EXPECT_TRUE(std::isnan(fp16_to_float(0x7c01)));
}

TEST(DtypeFp16, ToFloatIsExactForEveryPattern) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const auto x = static_cast<uint16_t>(h);
    const float f = fp16_to_float(x);
    if (((h >> 10) & 0x1f) == 0x1f) {
      ASSERT_EQ(std::isnan(f), (h & 0x3ff) != 0) << std::hex << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), ref_fp16_value(x)) << std::hex << h;
    ASSERT_EQ(float_to_fp16(f), x) << std::hex << h;
  }
}

TEST(DtypeFp16, MatchesExactReferenceOnRandomFloats) {
  // Floats spread over the fp16 range and a little beyond, both signs.
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> exponent(-28.0, 17.0);
  for (int i = 0; i < 200000; ++i) {
    const float f = static_cast<float>((rng() & 1 ? -1.0 : 1.0) * std::exp2(exponent(rng)));
    const double a = std::fabs(static_cast<double>(f));
    double want;
    if (a >= 65520.0) {
      want = INFINITY;
    } else {
      // Units of the fp16 grid at a's binade (fixed below the smallest normal), RNE in double.
      const int e = std::max(static_cast<int>(std::floor(std::log2(a))), -14);
      const double ulp = std::ldexp(1.0, e - 10);
      want = std::nearbyint(a / ulp) * ulp;
      if (want > 65504.0) want = INFINITY;
    }
    const uint16_t h = float_to_fp16(f);
    ASSERT_EQ(std::fabs(static_cast<double>(fp16_to_float(h))), want) << f;
    ASSERT_EQ(std::signbit(fp16_to_float(h)), std::signbit(f)) << f;
  }
}

// ---------------------------------------------------------------- bulk conversions

TEST(DtypeConvert, Fp32IsACopy) {
  const std::vector<float> src{1.5f, -0.0f, kInf, 3.0e-40f, -7.25f};
  std::vector<float> mid(src.size()), back(src.size());
  convert_from_float(src.data(), DType::F32, mid.data(), src.size());
  convert_to_float(mid.data(), DType::F32, back.data(), src.size());
  for (size_t i = 0; i < src.size(); ++i) EXPECT_EQ(bits_of(back[i]), bits_of(src[i])) << i;
}

TEST(DtypeConvert, SixteenBitRoundTripsAreElementwiseConversions) {
  std::vector<float> src;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-300.0f, 300.0f);
  for (int i = 0; i < 1000; ++i) src.push_back(dist(rng));
  src.insert(src.end(), {0.0f, -0.0f, 1.0f + std::ldexp(1.0f, -8), 65520.0f, 1e-7f});
  for (DType t : {DType::BF16, DType::F16}) {
    std::vector<uint16_t> mid(src.size());
    std::vector<float> back(src.size());
    convert_from_float(src.data(), t, mid.data(), src.size());
    convert_to_float(mid.data(), t, back.data(), src.size());
    for (size_t i = 0; i < src.size(); ++i) {
      const uint16_t want = t == DType::BF16 ? float_to_bf16(src[i]) : float_to_fp16(src[i]);
      ASSERT_EQ(mid[i], want) << dtype_name(t) << " " << src[i];
      const float wantf = t == DType::BF16 ? bf16_to_float(want) : fp16_to_float(want);
      ASSERT_EQ(bits_of(back[i]), bits_of(wantf)) << dtype_name(t) << " " << src[i];
    }
  }
}

TEST(DtypeConvert, RepresentableValuesSurviveBothWays) {
  for (DType t : {DType::BF16, DType::F16}) {
    std::vector<uint16_t> all;
    for (uint32_t h = 0; h <= 0xffff; ++h) {
      const auto x = static_cast<uint16_t>(h);
      const float f = t == DType::BF16 ? bf16_to_float(x) : fp16_to_float(x);
      if (!std::isnan(f)) all.push_back(x);
    }
    std::vector<float> floats(all.size());
    std::vector<uint16_t> back(all.size());
    convert_to_float(all.data(), t, floats.data(), all.size());
    convert_from_float(floats.data(), t, back.data(), all.size());
    EXPECT_EQ(back, all) << dtype_name(t);
  }
}

TEST(DtypeConvert, IntegerIsRejected) {
  float f = 0.0f;
  int32_t i = 0;
  try {
    convert_to_float(&i, DType::I32, &f, 1);
    FAIL() << "expected an error";
  } catch (const e3::Error& e) {
    EXPECT_EQ(e.kind(), e3::ErrorKind::Internal);
  }
  try {
    convert_from_float(&f, DType::I32, &i, 1);
    FAIL() << "expected an error";
  } catch (const e3::Error& e) {
    EXPECT_EQ(e.kind(), e3::ErrorKind::Internal);
  }
}

TEST(DtypeNames, SizesNamesAndParsing) {
  EXPECT_EQ(dtype_size(DType::F32), 4u);
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::F16), 2u);
  EXPECT_EQ(dtype_size(DType::I32), 4u);
  // The storage dtypes' --dtype names are their dtype_name; the others have none.
  for (DType t : {DType::F32, DType::BF16, DType::F16, DType::F8E4M3}) {
    EXPECT_EQ(e3::name_of(t), dtype_name(t));
    EXPECT_EQ(e3::value_named<DType>(dtype_name(t)), t);
  }
  EXPECT_FALSE(e3::value_named<DType>(dtype_name(DType::I32)).has_value());
  EXPECT_FALSE(e3::value_named<DType>(dtype_name(DType::U8)).has_value());
  try {
    e3::parse_named<DType>("float16", "--dtype");
    FAIL() << "expected an error";
  } catch (const e3::Error& e) {
    EXPECT_EQ(e.kind(), e3::ErrorKind::Usage);
    EXPECT_STREQ(e.what(), "--dtype: must be bf16, fp16, fp32 or fp8, not 'float16'");
  }
}

TEST(FirstNonfinite, FindsTheFirstNanOrInfinityInEachFloatType) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const DType t : {DType::F32, DType::BF16, DType::F16}) {
    // Long enough to cross the scan's blocks; the largest finite values must not count.
    std::vector<float> v(10000, 1.5f);
    v[17] = t == DType::F16 ? 65504.0f : 3.0e38f;
    std::vector<uint8_t> buf(v.size() * e3::dtype_size(t));
    e3::convert_from_float(v.data(), t, buf.data(), v.size());
    EXPECT_EQ(e3::first_nonfinite(buf.data(), t, v.size()), v.size()) << dtype_name(t);
    v[9001] = nan;
    v[9500] = inf;
    e3::convert_from_float(v.data(), t, buf.data(), v.size());
    EXPECT_EQ(e3::first_nonfinite(buf.data(), t, v.size()), 9001u) << dtype_name(t);
    v[4100] = -inf;
    e3::convert_from_float(v.data(), t, buf.data(), v.size());
    EXPECT_EQ(e3::first_nonfinite(buf.data(), t, v.size()), 4100u) << dtype_name(t);
  }
  // fp32 values beyond fp16's range become infinity when stored as fp16.
  const float big = 1.0e6f;
  uint16_t h = 0;
  e3::convert_from_float(&big, DType::F16, &h, 1);
  EXPECT_EQ(e3::first_nonfinite(&h, DType::F16, 1), 0u);
}

}  // namespace

// A safetensors header may have any length, so a tensor's data can start at an odd address.
// Conversions must read (and write) such buffers element by element as if they were aligned;
// built with -fsanitize=alignment, a typed load of a misaligned uint16_t would be reported.
TEST(DtypeConvert, MisalignedBuffersConvertLikeAlignedOnes) {
  std::vector<float> values(1027);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 97) * 0.5f - 17.0f;
  values[1001] = std::numeric_limits<float>::infinity();
  for (DType t : {DType::BF16, DType::F16, DType::F32}) {
    SCOPED_TRACE(dtype_name(t));
    const size_t bytes = values.size() * dtype_size(t);
    std::vector<unsigned char> aligned(bytes), storage(bytes + 16);
    unsigned char* odd = storage.data() + (reinterpret_cast<uintptr_t>(storage.data()) % 2 == 0 ? 1 : 0);
    convert_from_float(values.data(), t, aligned.data(), values.size());
    convert_from_float(values.data(), t, odd, values.size());
    EXPECT_EQ(std::memcmp(odd, aligned.data(), bytes), 0);
    std::vector<float> back(values.size());
    convert_to_float(odd, t, back.data(), back.size());
    EXPECT_EQ(back, values);
    EXPECT_EQ(first_nonfinite(odd, t, values.size()), 1001u);
  }
}
