// st_poison FILE.safetensors TENSOR ROW: overwrites row ROW of a 2-D float tensor with
// +infinity, in place, so that tests can make a real model produce non-finite states for
// exactly the samples holding one token id.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

#include "model/safetensors.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: st_poison FILE TENSOR ROW\n");
    return 2;
  }
  using e3::model::StDType;
  uint64_t offset = 0, row_bytes = 0;
  std::vector<uint8_t> inf;
  {
    const e3::model::SafetensorsFile st(argv[1]);
    const e3::model::TensorInfo* t = st.find(argv[2]);
    const long row = std::atol(argv[3]);
    if (!t || t->shape.size() != 2 || row < 0 || row >= t->shape[0]) {
      std::fprintf(stderr, "st_poison: no 2-D tensor %s with row %ld\n", argv[2], row);
      return 1;
    }
    switch (t->dtype) {
      case StDType::BF16: inf = {0x80, 0x7f}; break;
      case StDType::F16: inf = {0x00, 0x7c}; break;
      case StDType::F32: inf = {0x00, 0x00, 0x80, 0x7f}; break;
      default: std::fprintf(stderr, "st_poison: %s is not a float tensor\n", argv[2]); return 1;
    }
    row_bytes = static_cast<uint64_t>(t->shape[1]) * inf.size();
    offset = static_cast<uint64_t>(st.data(*t) - st.map().data()) + static_cast<uint64_t>(row) * row_bytes;
  }
  std::vector<uint8_t> bytes;
  for (uint64_t i = 0; i < row_bytes; i += inf.size()) bytes.insert(bytes.end(), inf.begin(), inf.end());
  std::fstream f(argv[1], std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return f.good() ? 0 : 1;
}
