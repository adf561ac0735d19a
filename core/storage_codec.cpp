#include "core/storage_codec.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "core/e4m3.h"
#include "core/error.h"

namespace e3 {

std::vector<uint64_t> StoredPart::dims(std::vector<uint64_t> rows, int64_t H) const {
  if (per_column()) rows.push_back(static_cast<uint64_t>(H));
  return rows;
}

size_t StoredPart::first_invalid(const void* data, size_t n) const {
  switch (kind) {
    case PartKind::Values: return first_nonfinite(data, element, n);
    case PartKind::E4m3Codes:
      return first_flagged<uint8_t>(data, n, [](uint8_t b) { return (b & 0x7fu) == 0x7fu; });
    case PartKind::RowScale:
      return first_flagged<float>(data, n,
                                  [](float s) { return !(s >= 0.0f && s <= std::numeric_limits<float>::max()); });
  }
  return n;
}

float StoredPart::value(const void* data, size_t i) const {
  switch (kind) {
    case PartKind::Values: {
      float v;
      convert_to_float(static_cast<const uint8_t*>(data) + i * dtype_size(element), element, &v, 1);
      return v;
    }
    case PartKind::E4m3Codes: return e4m3fn_to_float(static_cast<const uint8_t*>(data)[i]);
    case PartKind::RowScale: return load_unaligned<float>(data, i);
  }
  return 0;
}

size_t StorageCodec::row_bytes(int64_t H) const {
  size_t bytes = 0;
  for (const StoredPart& p : parts_) bytes += p.row_bytes(H);
  return bytes;
}

StoredRows StorageCodec::staged(const void* rows, size_t count, int64_t H) const {
  StoredRows r;
  r.count = count;
  const size_t row = row_bytes(H);
  size_t offset = 0;
  for (size_t p = 0; p < parts_.size(); ++p) {
    r.part[p] = static_cast<const uint8_t*>(rows) + offset;
    r.stride[p] = row;
    offset += parts_[p].row_bytes(H);
  }
  return r;
}

StoredRows StorageCodec::split(std::span<const void* const> parts, size_t count, int64_t H) const {
  E3_REQUIRE(parts.size() == parts_.size(), ErrorKind::Internal, "{} rows are stored in {} parts, not {}", name(),
             parts_.size(), parts.size());
  StoredRows r;
  r.count = count;
  for (size_t p = 0; p < parts_.size(); ++p) {
    r.part[p] = static_cast<const uint8_t*>(parts[p]);
    r.stride[p] = parts_[p].row_bytes(H);
  }
  return r;
}

namespace {

// fp32, bf16, fp16: the values themselves, H a row.
class FloatCodec final : public StorageCodec {
 public:
  explicit FloatCodec(DType t)
      : StorageCodec(t, {{PartKind::Values, "", t, nullptr}}, DeviceEncode::Convert), value_bytes_(dtype_size(t)) {}

  void encode(const float* x, size_t rows, int64_t H, void* out) const override {
    convert_from_float(x, dtype(), out, rows * static_cast<size_t>(H));
  }
  void decode(const StoredRows& rows, int64_t H, float* out) const override {
    by_runs(rows, H, [&](const uint8_t* src, size_t first_row, size_t n) {
      convert_to_float(src, dtype(), out + first_row * static_cast<size_t>(H), n);
    });
  }
  void decode_bf16(const StoredRows& rows, int64_t H, uint16_t* out) const override {
    by_runs(rows, H, [&](const uint8_t* src, size_t first_row, size_t n) {
      convert_to_bf16(src, dtype(), out + first_row * static_cast<size_t>(H), n);
    });
  }
  std::optional<NonfiniteValue> first_nonfinite(const StoredRows& rows, int64_t H) const override {
    std::optional<NonfiniteValue> found;
    const auto h = static_cast<size_t>(H);
    by_runs(rows, H, [&](const uint8_t* src, size_t first_row, size_t n) {
      if (found) return;
      const size_t i = e3::first_nonfinite(src, dtype(), n);
      if (i == n) return;
      found = NonfiniteValue{first_row + i / h, static_cast<int64_t>(i % h), parts().front().value(src, i)};
    });
    return found;
  }

 private:
  // Calls f(first element, first row, elements) over runs of adjacent rows: the whole block
  // at once when the rows follow each other (as they do everywhere but in a strided view).
  template <typename F>
  void by_runs(const StoredRows& rows, int64_t H, F&& f) const {
    const auto h = static_cast<size_t>(H);
    if (rows.stride[0] == h * value_bytes_) return f(rows.part[0], size_t{0}, rows.count * h);
    for (size_t r = 0; r < rows.count; ++r) f(rows.part[0] + r * rows.stride[0], r, h);
  }

  size_t value_bytes_;
};

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// One row of e4m3fn codes times its scale, rounded to bf16 as float_to_bf16 rounds. Each code's
// value is computed from its bits, not looked up, and every choice is a mask, so that the
// compiler vectorises the loop (a lookup or a branch stops it). Built twice: for any x86-64 and
// for AVX2, taken where the CPU has it (0.53 ns a value against the table lookup's 1.5 on the
// development machine; an export of an fp8 SRC spent most of its writers' time here, issue 21).
// The NaN codes take the bits of e4m3fn_to_float's NaNs.
__attribute__((always_inline)) inline void decode_row(const uint8_t* codes, float scale, int64_t H, uint16_t* dst) {
  const uint32_t nan_positive = bits_of(e4m3fn_to_float(0x7f)), nan_negative = bits_of(e4m3fn_to_float(0xff));
  for (int64_t c = 0; c < H; ++c) {
    const uint32_t code = codes[c];
    const uint32_t sign = (code & 0x80u) << 24, em = code & 0x7fu;  // em: exponent and mantissa bits
    // Normal: 2^(e - 7) (1 + m/8), the exponent rebiased by 127 - 7. Subnormal (e = 0): m 2^-9.
    const uint32_t normal = sign | ((em << 20) + (120u << 23));
    const uint32_t subnormal = sign | bits_of(static_cast<float>(em) * 0x1p-9f);
    const uint32_t is_normal = 0u - static_cast<uint32_t>(em >= 8), is_nan = 0u - static_cast<uint32_t>(em == 0x7fu);
    const uint32_t nan = sign ? nan_negative : nan_positive;
    const uint32_t bits = (((normal & is_normal) | (subnormal & ~is_normal)) & ~is_nan) | (nan & is_nan);
    const uint32_t u = bits_of(float_of(bits) * scale);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet = (u >> 16) | 0x40u;
    const uint32_t nan_out = 0u - static_cast<uint32_t>((u & 0x7fffffffu) > 0x7f800000u);
    dst[c] = static_cast<uint16_t>((quiet & nan_out) | (rounded & ~nan_out));
  }
}

#if defined(__x86_64__)
// The same loop built for AVX2 (8 values a step), taken where the CPU has it; x86-64 only.
__attribute__((target("avx2"))) void decode_row_avx2(const uint8_t* codes, float scale, int64_t H, uint16_t* dst) {
  decode_row(codes, scale, H, dst);
}
#endif

void decode_row_portable(const uint8_t* codes, float scale, int64_t H, uint16_t* dst) {
  decode_row(codes, scale, H, dst);
}

// fp8: H e4m3fn codes, then the row's float32 scale (core/e4m3.h); a shard stores the codes
// and the scales as two datasets.
class E4m3Codec final : public StorageCodec {
 public:
  E4m3Codec()
      : StorageCodec(DType::F8E4M3,
                     {{PartKind::E4m3Codes, "", DType::F8E4M3, kE4m3fnEncoding},
                      {PartKind::RowScale, "_scale", DType::F32, nullptr}},
                     DeviceEncode::E4m3Rows) {
    for (int b = 0; b < 256; ++b) code_value_[static_cast<size_t>(b)] = e4m3fn_to_float(static_cast<uint8_t>(b));
  }

  void encode(const float* x, size_t rows, int64_t H, void* out) const override {
    const size_t row = row_bytes(H), h = static_cast<size_t>(H);
    for (size_t r = 0; r < rows; ++r) encode_e4m3_row(x + r * h, H, static_cast<uint8_t*>(out) + r * row);
  }
  void decode(const StoredRows& rows, int64_t H, float* out) const override {
    each_row(rows, [&](const uint8_t* codes, float scale, size_t r) {
      float* dst = out + r * static_cast<size_t>(H);
      for (int64_t c = 0; c < H; ++c) dst[c] = code_value_[codes[c]] * scale;
    });
  }
  void decode_bf16(const StoredRows& rows, int64_t H, uint16_t* out) const override {
    each_row(rows, [&](const uint8_t* codes, float scale, size_t r) {
      detail::decode_e4m3_row_bf16(codes, scale, H, out + r * static_cast<size_t>(H));
    });
  }
  // encode_e4m3_row gave a row holding a NaN or an infinity a non-finite scale and the column.
  std::optional<NonfiniteValue> first_nonfinite(const StoredRows& rows, int64_t H) const override {
    for (size_t r = 0; r < rows.count; ++r) {
      const float scale = load_unaligned<float>(rows.part[1] + r * rows.stride[1], 0);
      if (!std::isfinite(scale)) return NonfiniteValue{r, e4m3_row_bad_column(rows.part[0] + r * rows.stride[0], H), scale};
    }
    return std::nullopt;
  }

 private:
  // Calls f(codes, scale, row) for each row.
  template <typename F>
  static void each_row(const StoredRows& rows, F&& f) {
    for (size_t r = 0; r < rows.count; ++r)
      f(rows.part[0] + r * rows.stride[0], load_unaligned<float>(rows.part[1] + r * rows.stride[1], 0), r);
  }

  std::array<float, 256> code_value_{};  // each code's value before its row's scale
};

}  // namespace

namespace detail {

void decode_e4m3_row_bf16(const uint8_t* codes, float scale, int64_t H, uint16_t* out, bool portable) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2 && !portable) return decode_row_avx2(codes, scale, H, out);
#endif
  decode_row_portable(codes, scale, H, out);
}

}  // namespace detail

const StorageCodec& storage_codec(DType dtype) {
  static const FloatCodec f32(DType::F32), bf16(DType::BF16), f16(DType::F16);
  static const E4m3Codec fp8;
  switch (dtype) {
    case DType::F32: return f32;
    case DType::BF16: return bf16;
    case DType::F16: return f16;
    case DType::F8E4M3: return fp8;
    case DType::I32:
    case DType::U8: break;
  }
  E3_THROW(ErrorKind::Internal, "{} is not a storage dtype", dtype_name(dtype));
}

const StorageCodec* storage_codec_named(std::string_view name) {
  const std::optional<DType> dtype = value_named<DType>(name);
  return dtype ? &storage_codec(*dtype) : nullptr;
}

}  // namespace e3
