#include "io/npy_write.h"

#include <string>

#include <fmt/format.h>

#include "core/error.h"

namespace e3::io {

namespace {

const char* npy_descr(TensorElement element) {
  switch (element) {
    case TensorElement::I64: return "<i8";
    case TensorElement::I32: return "<i4";
    case TensorElement::U8: return "|u1";
    case TensorElement::Bool: return "|b1";
    case TensorElement::F32: return "<f4";
    case TensorElement::F16: return "<f2";
    case TensorElement::BF16: break;
  }
  E3_THROW(ErrorKind::Internal, "no NumPy type for tensor element {}", static_cast<int>(element));
}

// Python's repr of the shape tuple: "()", "(5,)", "(2, 3)".
std::string shape_repr(const std::vector<int64_t>& shape) {
  if (shape.size() == 1) return fmt::format("({},)", shape[0]);
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) out += fmt::format("{}{}", i ? ", " : "", shape[i]);
  return out + ")";
}

// The magic, version 1.0, the header length, and the header dict padded with spaces and a
// newline so that the data starts at a multiple of 64 bytes. NumPy adds room for the first
// dimension to grow to 21 digits, and pads a full 64 bytes where no padding would be needed.
std::string npy_header(const TensorRef& t) {
  constexpr size_t kAlign = 64, kPrefix = 10, kGrowthDigits = 21;
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", npy_descr(t.element),
                                 shape_repr(t.shape));
  if (!t.shape.empty()) {
    const size_t digits = std::to_string(t.shape[0]).size();
    if (digits < kGrowthDigits) dict.append(kGrowthDigits - digits, ' ');
  }
  const size_t pad = kAlign - (kPrefix + dict.size() + 1) % kAlign;
  dict.append(pad, ' ');
  dict += '\n';
  E3_REQUIRE(dict.size() <= 0xFFFF, ErrorKind::Internal, "a .npy header of {} bytes needs version 2.0", dict.size());
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(dict.size() & 0xFF);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict;
}

}  // namespace

void write_npy(const std::filesystem::path& path, const TensorRef& tensor) {
  const uint64_t bytes = tensor_bytes(tensor, path);
  const std::string header = npy_header(tensor);
  TempFile file(path);
  file.write(header.data(), header.size());
  file.write_tensor(tensor, bytes);
  file.commit();
}

}  // namespace e3::io
