#include "core/e4m3.h"

namespace e3 {

void encode_e4m3_row(const float* x, int64_t H, uint8_t* out) {
  float amax = 0;
  int64_t bad = H;
  for (int64_t c = 0; c < H; ++c) {
    const float a = std::fabs(x[c]);
    if (!(a <= 3.402823466e38f)) {  // NaN or infinity
      bad = c;
      break;
    }
    amax = std::fmax(amax, a);
  }
  float scale;
  if (bad < H) {
    std::memset(out, 0, static_cast<size_t>(H));
    const auto col = static_cast<int32_t>(bad);
    std::memcpy(out, &col, static_cast<size_t>(H < 4 ? H : 4));
    scale = e4m3_bad_row_scale(x[bad]);
  } else {
    scale = e4m3_row_scale(amax);
    if (scale == 0.0f) {
      std::memset(out, 0, static_cast<size_t>(H));
    } else {
      for (int64_t c = 0; c < H; ++c) out[c] = float_to_e4m3fn_sat(div_rn(x[c], scale));
    }
  }
  std::memcpy(out + H, &scale, 4);
}

void decode_e4m3_row(const uint8_t* row, int64_t H, float* out) {
  const float scale = e4m3_row_scale_of(row, H);
  for (int64_t c = 0; c < H; ++c) out[c] = e4m3fn_to_float(row[c]) * scale;
}

}  // namespace e3
