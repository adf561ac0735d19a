// The storage codecs: each --dtype's row bytes, encode and decode, its non-finite check and
// the datasets a shard stores it in. Every other part of the program (capture, writer,
// verify, export) relies on these, so each property is checked for all four codecs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/e4m3.h"
#include "core/error.h"
#include "core/storage_codec.h"
#include "support/test_support.h"

namespace {

using e3::DType;
using e3::PartKind;
using e3::StorageCodec;
using e3::StoredPart;
using e3::StoredRows;

const DType kStorage[] = {DType::F32, DType::BF16, DType::F16, DType::F8E4M3};
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Values over many binades (fp16 subnormals among them) and of both signs.
std::vector<float> spread_values(size_t n, uint64_t seed) {
  std::vector<float> x = e3::test::random_floats(n, seed);
  for (size_t i = 0; i < n; ++i) x[i] *= std::ldexp(1.0f, static_cast<int>(i % 30) - 20);
  return x;
}

std::vector<uint8_t> encoded(const StorageCodec& codec, const std::vector<float>& x, int64_t H) {
  const size_t rows = x.size() / static_cast<size_t>(H);
  std::vector<uint8_t> out(rows * codec.row_bytes(H));
  codec.encode(x.data(), rows, H, out.data());
  return out;
}

// The rows as a shard holds them: each part's bytes of every row, one dataset a part.
std::vector<std::vector<uint8_t>> split_parts(const StorageCodec& codec, const std::vector<uint8_t>& staged, int64_t H) {
  const size_t row = codec.row_bytes(H), rows = staged.size() / row;
  std::vector<std::vector<uint8_t>> parts;
  size_t offset = 0;
  for (const StoredPart& p : codec.parts()) {
    const size_t bytes = p.row_bytes(H);
    std::vector<uint8_t> part(rows * bytes);
    for (size_t r = 0; r < rows; ++r) std::memcpy(part.data() + r * bytes, staged.data() + r * row + offset, bytes);
    parts.push_back(std::move(part));
    offset += bytes;
  }
  EXPECT_EQ(offset, row) << codec.name();
  return parts;
}

StoredRows split_rows(const StorageCodec& codec, const std::vector<std::vector<uint8_t>>& parts, size_t rows, int64_t H) {
  std::vector<const void*> ptrs;
  for (const auto& p : parts) ptrs.push_back(p.data());
  return codec.split(ptrs, rows, H);
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// What decode() makes of `rows`, as bits (so that NaNs and signed zeros compare too).
std::vector<uint32_t> decoded_bits(const StorageCodec& codec, const StoredRows& rows, int64_t H) {
  std::vector<float> f(rows.count * static_cast<size_t>(H));
  codec.decode(rows, H, f.data());
  std::vector<uint32_t> bits;
  for (float v : f) bits.push_back(bits_of(v));
  return bits;
}

std::vector<uint16_t> decoded_bf16(const StorageCodec& codec, const StoredRows& rows, int64_t H) {
  std::vector<uint16_t> b(rows.count * static_cast<size_t>(H));
  codec.decode_bf16(rows, H, b.data());
  return b;
}

// Rows `a` decode to what `b` decode to, to float and to bf16.
void expect_same_decode(const StorageCodec& codec, const StoredRows& a, const StoredRows& b, int64_t H) {
  EXPECT_EQ(decoded_bits(codec, a, H), decoded_bits(codec, b, H)) << codec.name();
  EXPECT_EQ(decoded_bf16(codec, a, H), decoded_bf16(codec, b, H)) << codec.name();
}

// ---------------------------------------------------------------- row bytes and layout

TEST(StorageCodec, RowBytesPerDtype) {
  EXPECT_EQ(e3::storage_codec(DType::F32).row_bytes(4096), 16384u);
  EXPECT_EQ(e3::storage_codec(DType::BF16).row_bytes(4096), 8192u);
  EXPECT_EQ(e3::storage_codec(DType::F16).row_bytes(4096), 8192u);
  EXPECT_EQ(e3::storage_codec(DType::F8E4M3).row_bytes(4096), 4100u);  // codes, then a float32 scale
  EXPECT_EQ(e3::storage_codec(DType::F8E4M3).row_bytes(1), 5u);
}

TEST(StorageCodec, ChosenByDtypeAndByName) {
  for (DType t : kStorage) {
    const StorageCodec& c = e3::storage_codec(t);
    EXPECT_EQ(c.dtype(), t);
    EXPECT_STREQ(c.name(), e3::dtype_name(t));
    EXPECT_EQ(e3::storage_codec_named(e3::dtype_name(t)), &c);
    EXPECT_EQ(&e3::storage_codec(t), &c);  // one codec a dtype
  }
  EXPECT_EQ(e3::storage_codec_named("int32"), nullptr);
  EXPECT_EQ(e3::storage_codec_named("float8"), nullptr);
  EXPECT_EQ(e3::storage_codec_named(""), nullptr);
  for (DType t : {DType::I32, DType::U8}) {
    const auto e = e3::test::error_of([&] { e3::storage_codec(t); });
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->kind(), e3::ErrorKind::Internal);
  }
}

TEST(StorageCodec, FloatTypesAreOneDatasetOfTheirType) {
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    const StorageCodec& c = e3::storage_codec(t);
    ASSERT_EQ(c.parts().size(), 1u) << c.name();
    const StoredPart& p = c.parts().front();
    EXPECT_EQ(p.kind, PartKind::Values);
    EXPECT_STREQ(p.suffix, "");
    EXPECT_EQ(p.element, t);
    EXPECT_EQ(p.encoding, nullptr);
    EXPECT_EQ(p.row_bytes(10), 10 * e3::dtype_size(t));
    EXPECT_EQ(p.dims({3, 2}, 10), (std::vector<uint64_t>{3, 2, 10}));  // hidden_states [T, K, H]
    EXPECT_EQ(p.dims({3}, 10), (std::vector<uint64_t>{3, 10}));        // a final state [T, H]
    EXPECT_EQ(c.device_encode(), e3::DeviceEncode::Convert);
  }
}

TEST(StorageCodec, Fp8IsCodesWithTheirEncodingAndAScaleDataset) {
  const StorageCodec& c = e3::storage_codec(DType::F8E4M3);
  ASSERT_EQ(c.parts().size(), 2u);
  const StoredPart& codes = c.parts()[0];
  EXPECT_EQ(codes.kind, PartKind::E4m3Codes);
  EXPECT_STREQ(codes.suffix, "");
  EXPECT_EQ(codes.element, DType::F8E4M3);
  EXPECT_EQ(e3::dtype_size(codes.element), 1u);
  ASSERT_NE(codes.encoding, nullptr);
  EXPECT_STREQ(codes.encoding, "float8_e4m3fn");
  EXPECT_EQ(codes.dims({3, 2}, 10), (std::vector<uint64_t>{3, 2, 10}));
  EXPECT_EQ(codes.dims({3}, 10), (std::vector<uint64_t>{3, 10}));
  const StoredPart& scale = c.parts()[1];
  EXPECT_EQ(scale.kind, PartKind::RowScale);
  EXPECT_STREQ(scale.suffix, "_scale");
  EXPECT_EQ(scale.element, DType::F32);
  EXPECT_EQ(scale.encoding, nullptr);
  EXPECT_EQ(scale.row_bytes(10), 4u);
  EXPECT_EQ(scale.dims({3, 2}, 10), (std::vector<uint64_t>{3, 2}));  // hidden_states_scale [T, K]
  EXPECT_EQ(scale.dims({3}, 10), (std::vector<uint64_t>{3}));        // <final>_scale [T]
  EXPECT_EQ(c.device_encode(), e3::DeviceEncode::E4m3Rows);
}

// ---------------------------------------------------------------- encode and decode

TEST(StorageCodec, FloatTypesDecodeToTheValueRoundedToTheirType) {
  const int64_t H = 37;
  const std::vector<float> x = spread_values(5 * H, 7);
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    const StorageCodec& c = e3::storage_codec(t);
    const auto rows = encoded(c, x, H);
    std::vector<uint8_t> want(x.size() * e3::dtype_size(t));
    e3::convert_from_float(x.data(), t, want.data(), x.size());
    EXPECT_EQ(rows, want) << c.name();  // the bytes are the plain conversion
    std::vector<float> back(x.size());
    c.decode(c.staged(rows.data(), 5, H), H, back.data());
    for (size_t i = 0; i < x.size(); ++i) {
      const float w = t == DType::F32 ? x[i] : t == DType::BF16 ? e3::bf16_to_float(e3::float_to_bf16(x[i]))
                                                                : e3::fp16_to_float(e3::float_to_fp16(x[i]));
      ASSERT_EQ(bits_of(back[i]), bits_of(w)) << c.name() << " " << i;
    }
  }
}

TEST(StorageCodec, Fp8RowsAreEncodeE4m3RowAndDecodeToCodeTimesScale) {
  const int64_t H = 64;
  const size_t T = 6;
  std::vector<float> x = spread_values(T * H, 11);
  std::fill(x.begin() + 2 * H, x.begin() + 3 * H, 0.0f);  // an all-zero row: scale 0
  const StorageCodec& c = e3::storage_codec(DType::F8E4M3);
  const auto rows = encoded(c, x, H);
  std::vector<float> back(x.size());
  c.decode(c.staged(rows.data(), T, H), H, back.data());
  std::vector<uint8_t> want(static_cast<size_t>(H) + 4);
  for (size_t r = 0; r < T; ++r) {
    e3::encode_e4m3_row(x.data() + r * H, H, want.data());
    ASSERT_EQ(0, std::memcmp(rows.data() + r * (H + 4), want.data(), want.size())) << r;
    const float scale = e3::e4m3_row_scale_of(want.data(), H);
    float amax = 0;
    for (int64_t h = 0; h < H; ++h) amax = std::max(amax, std::fabs(x[r * H + h]));
    EXPECT_EQ(scale, amax / 448.0f) << r;
    for (int64_t h = 0; h < H; ++h) {
      const float v = x[r * H + h], got = back[r * H + h];
      EXPECT_EQ(bits_of(got), bits_of(e3::e4m3fn_to_float(want[h]) * scale)) << r << " " << h;
      // Within half an e4m3 step: 2^-4 relative for normal codes, half a subnormal step below.
      const float bound = std::fabs(v) / scale >= 0.015625f ? std::fabs(v) * 0.0625f : scale * 0.0009765625f;
      EXPECT_LE(std::fabs(got - v), bound * 1.0001f) << r << " " << h;
    }
  }
}

TEST(StorageCodec, DecodesAlikeWhereverTheRowsLieAndToBf16AsTheFloatRounded) {
  // The writer splits each row into its parts' datasets; read back from them, every codec must
  // give what the rows gave. A row may also start at any address (a pinned buffer's offset).
  const int64_t H = 40;
  const size_t T = 7;
  const std::vector<float> x = spread_values(T * H, 17);
  for (DType t : kStorage) {
    const StorageCodec& c = e3::storage_codec(t);
    const auto rows = encoded(c, x, H);
    const StoredRows staged = c.staged(rows.data(), T, H);
    const auto parts = split_parts(c, rows, H);
    expect_same_decode(c, split_rows(c, parts, T, H), staged, H);
    std::vector<uint8_t> odd(rows.size() + 1);
    std::memcpy(odd.data() + 1, rows.data(), rows.size());
    expect_same_decode(c, c.staged(odd.data() + 1, T, H), staged, H);

    const std::vector<uint32_t> f = decoded_bits(c, staged, H);
    const std::vector<uint16_t> b = decoded_bf16(c, staged, H);
    for (size_t i = 0; i < x.size(); ++i) {
      float v;
      std::memcpy(&v, &f[i], 4);
      ASSERT_EQ(b[i], e3::float_to_bf16(v)) << c.name() << " " << i;
    }
    if (t == DType::BF16) {
      EXPECT_EQ(0, std::memcmp(b.data(), rows.data(), rows.size()));  // its own bits
    }
  }
}

// ---------------------------------------------------------------- non-finite rows

TEST(StorageCodec, FirstNonfiniteNamesRowColumnAndKindInEveryCodec) {
  // More than one scan block (4096 values) of rows, so the block scan's second look is used.
  const int64_t H = 1000;
  const size_t T = 6;
  for (DType t : kStorage) {
    const StorageCodec& c = e3::storage_codec(t);
    std::vector<float> x = e3::test::random_floats(T * H, 23);
    EXPECT_FALSE(c.first_nonfinite(c.staged(encoded(c, x, H).data(), T, H), H).has_value()) << c.name();

    x[5 * H + 999] = kNaN;
    auto found = c.first_nonfinite(c.staged(encoded(c, x, H).data(), T, H), H);
    ASSERT_TRUE(found.has_value()) << c.name();
    EXPECT_EQ(found->row, 5u) << c.name();
    EXPECT_EQ(found->column, 999) << c.name();
    EXPECT_TRUE(std::isnan(found->value)) << c.name();

    x[4 * H + 3] = -kInf;  // an earlier row wins
    x[4 * H + 700] = kNaN;
    const auto rows = encoded(c, x, H);
    found = c.first_nonfinite(c.staged(rows.data(), T, H), H);
    ASSERT_TRUE(found.has_value()) << c.name();
    EXPECT_EQ(found->row, 4u) << c.name();
    EXPECT_EQ(found->column, 3) << c.name();
    EXPECT_TRUE(std::isinf(found->value)) << c.name();

    // The same from the parts of a shard.
    const auto parts = split_parts(c, rows, H);
    found = c.first_nonfinite(split_rows(c, parts, T, H), H);
    ASSERT_TRUE(found.has_value()) << c.name();
    EXPECT_EQ(found->row, 4u) << c.name();
    EXPECT_EQ(found->column, 3) << c.name();
  }
}

TEST(StorageCodec, Fp16OverflowIsAnInfinityItCannotStore) {
  const StorageCodec& c = e3::storage_codec(DType::F16);
  const std::vector<float> x{1.0f, 70000.0f, 2.0f};
  const auto found = c.first_nonfinite(c.staged(encoded(c, x, 3).data(), 1, 3), 3);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->column, 1);
  EXPECT_TRUE(std::isinf(found->value));
}

TEST(StorageCodec, Fp8MarkedRowsNameTheirColumnEvenInNarrowRows) {
  const StorageCodec& c = e3::storage_codec(DType::F8E4M3);
  for (int64_t H : {1, 2, 3, 4, 5}) {
    std::vector<float> x(static_cast<size_t>(2 * H), 1.0f);
    x[static_cast<size_t>(H + H - 1)] = kInf;  // row 1, last column
    const auto found = c.first_nonfinite(c.staged(encoded(c, x, H).data(), 2, H), H);
    ASSERT_TRUE(found.has_value()) << H;
    EXPECT_EQ(found->row, 1u) << H;
    EXPECT_EQ(found->column, H - 1) << H;
    EXPECT_TRUE(std::isinf(found->value)) << H;
  }
}

// ---------------------------------------------------------------- what a valid shard never holds

TEST(StoredPart, ValuesMustBeFinite) {
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    const StoredPart& p = e3::storage_codec(t).parts().front();
    std::vector<float> v(9000, 1.25f);
    std::vector<uint8_t> stored(v.size() * e3::dtype_size(t));
    e3::convert_from_float(v.data(), t, stored.data(), v.size());
    EXPECT_EQ(p.first_invalid(stored.data(), v.size()), v.size()) << e3::dtype_name(t);
    EXPECT_EQ(p.value(stored.data(), 17), 1.25f);
    v[8500] = -kInf;
    e3::convert_from_float(v.data(), t, stored.data(), v.size());
    EXPECT_EQ(p.first_invalid(stored.data(), v.size()), 8500u) << e3::dtype_name(t);
    EXPECT_EQ(p.value(stored.data(), 8500), -kInf);
  }
}

TEST(StoredPart, E4m3CodesMustNotBeNaN) {
  const StoredPart& p = e3::storage_codec(DType::F8E4M3).parts()[0];
  std::vector<uint8_t> codes(5000);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i % 256 == 0x7f ? 0x7e : i % 256 == 0xff ? 0xfe : i % 256);
  EXPECT_EQ(p.first_invalid(codes.data(), codes.size()), codes.size());
  EXPECT_EQ(p.value(codes.data(), 0x38), 1.0f);
  EXPECT_EQ(p.value(codes.data(), 0x7e), 448.0f);
  codes[4200] = 0xff;
  EXPECT_EQ(p.first_invalid(codes.data(), codes.size()), 4200u);
  EXPECT_TRUE(std::isnan(p.value(codes.data(), 4200)));
  codes[100] = 0x7f;
  EXPECT_EQ(p.first_invalid(codes.data(), codes.size()), 100u);
}

TEST(StoredPart, RowScalesMustBeFiniteAndNotNegative) {
  const StoredPart& p = e3::storage_codec(DType::F8E4M3).parts()[1];
  std::vector<float> s(5000, 0.5f);
  s[0] = 0.0f;
  s[1] = std::numeric_limits<float>::max();
  s[2] = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(p.first_invalid(s.data(), s.size()), s.size());
  for (float bad : {-1.0f, -1e-30f, kInf, -kInf, kNaN}) {
    s[4500] = bad;
    EXPECT_EQ(p.first_invalid(s.data(), s.size()), 4500u) << bad;
    EXPECT_EQ(bits_of(p.value(s.data(), 4500)), bits_of(bad));
  }
}

}  // namespace

// The fp8 decode computes each code's value from its bits, vectorised: for every code (NaNs,
// zeros and subnormals among them), and scales that round up, down, to subnormal, to infinity
// and to NaN, both builds give the bits of the table value times the scale, rounded by
// float_to_bf16, and so does the codec, in rows of a length no vector divides. Where both the
// code and the scale are NaNs, IEEE 754 leaves open which operand's sign and payload the product
// keeps (compilers order the multiply either way), so there the answer need only be a NaN.
TEST(StorageCodec, Fp8DecodeGivesTheTableValueTimesTheScaleForEveryCode) {
  std::vector<uint8_t> codes(256 * 3 + 5);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i * 7 + i / 256);
  const float inf = std::numeric_limits<float>::infinity();
  const auto is_bf16_nan = [](uint16_t bits) { return (bits & 0x7f80u) == 0x7f80u && (bits & 0x7fu) != 0; };
  for (const float scale : {1.0f, 0.0137f, -2.5f, 1e-30f, 1e-38f, 3e37f, 3e38f, 0.0f, -0.0f, inf, std::nanf("")}) {
    std::vector<uint16_t> expected(codes.size());
    for (size_t i = 0; i < codes.size(); ++i) expected[i] = e3::float_to_bf16(e3::e4m3fn_to_float(codes[i]) * scale);
    // Whether a value's NaN sign and payload are left open: a NaN code times a NaN scale.
    const auto open_nan = [&](size_t i) { return std::isnan(scale) && std::isnan(e3::e4m3fn_to_float(codes[i])); };
    const auto check = [&](const std::vector<uint16_t>& got, const char* what) {
      for (size_t i = 0; i < codes.size(); ++i) {
        if (open_nan(i)) {
          ASSERT_TRUE(is_bf16_nan(got[i])) << "code 0x" << std::hex << int{codes[i]} << " gave 0x" << got[i]
                                           << std::dec << " for a NaN scale" << what;
          continue;
        }
        ASSERT_EQ(got[i], expected[i]) << "code 0x" << std::hex << int{codes[i]} << std::dec << " scale " << scale
                                       << what;
      }
    };
    for (const bool portable : {false, true}) {
      std::vector<uint16_t> got(codes.size(), 0xdead);
      e3::detail::decode_e4m3_row_bf16(codes.data(), scale, static_cast<int64_t>(codes.size()), got.data(), portable);
      check(got, portable ? " (portable)" : " (vectorised)");
    }
    const e3::StorageCodec& codec = e3::storage_codec(e3::DType::F8E4M3);
    const float scales[1] = {scale};
    const std::vector<const void*> parts{codes.data(), scales};
    std::vector<uint16_t> got(codes.size());
    codec.decode_bf16(codec.split(parts, 1, static_cast<int64_t>(codes.size())), static_cast<int64_t>(codes.size()),
                      got.data());
    check(got, " (codec)");
  }
}
