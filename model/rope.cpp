#include "model/rope.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace e3::model {
namespace {

// base ** (i / dim) in float32, as torch computes `base ** (arange(0, dim, 2).float() / dim)`.
float pos_freq(double base, int i, int dim) {
  const float exponent = static_cast<float>(i) / static_cast<float>(dim);
  return static_cast<float>(std::pow(static_cast<double>(static_cast<float>(base)), static_cast<double>(exponent)));
}

std::vector<float> default_inv_freq(double base, int dim) {
  std::vector<float> inv(static_cast<size_t>(dim / 2));
  for (int i = 0; i < dim / 2; ++i) inv[static_cast<size_t>(i)] = 1.0f / pos_freq(base, 2 * i, dim);
  return inv;
}

void apply_llama3(const RopeConfig& r, std::vector<float>& inv) {
  const float factor = static_cast<float>(r.factor);
  const double old_ctx = static_cast<double>(r.original_max_position_embeddings);
  const double low_wavelen = old_ctx / r.low_freq_factor;
  const double high_wavelen = old_ctx / r.high_freq_factor;
  for (float& f : inv) {
    const float wavelen = static_cast<float>(2.0 * M_PI) / f;
    float scaled = wavelen > low_wavelen ? f / factor : f;
    if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
      const float smooth = static_cast<float>((old_ctx / wavelen - r.low_freq_factor) /
                                              (r.high_freq_factor - r.low_freq_factor));
      scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
    }
    f = scaled;
  }
}

void apply_yarn(const RopeConfig& r, double base, int dim, std::vector<float>& inv, float& attention_factor) {
  const double factor = r.factor;
  if (r.attention_factor) {
    attention_factor = static_cast<float>(*r.attention_factor);
  } else if (r.mscale && r.mscale_all_dim && *r.mscale != 0 && *r.mscale_all_dim != 0) {
    attention_factor = static_cast<float>(yarn_get_mscale(factor, *r.mscale) / yarn_get_mscale(factor, *r.mscale_all_dim));
  } else {
    attention_factor = static_cast<float>(yarn_get_mscale(factor, 1.0));
  }
  const double max_pos = static_cast<double>(r.original_max_position_embeddings);
  auto correction_dim = [&](double rotations) {
    return (dim * std::log(max_pos / (rotations * 2 * M_PI))) / (2 * std::log(base));
  };
  double low = correction_dim(r.beta_fast);
  double high = correction_dim(r.beta_slow);
  if (r.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // as HF: avoids a zero-width ramp
  const float factor_f = static_cast<float>(factor);
  for (int i = 0; i < dim / 2; ++i) {
    const float pf = pos_freq(base, 2 * i, dim);
    const float extrapolation = 1.0f / pf;
    const float interpolation = 1.0f / (factor_f * pf);
    const float ramp = std::clamp(static_cast<float>((static_cast<float>(i) - low) / (high - low)), 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    inv[static_cast<size_t>(i)] = interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
}

}  // namespace

double yarn_get_mscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

RopeFrequencies compute_rope_frequencies(const RopeConfig& rope, int head_dim, int64_t max_position_embeddings) {
  RopeFrequencies f;
  f.rot_dim = static_cast<int>(head_dim * rope.partial_rotary_factor);
  E3_REQUIRE(f.rot_dim > 0 && f.rot_dim % 2 == 0, ErrorKind::Model, "rotary dimension {} must be even and positive",
             f.rot_dim);
  f.inv_freq = default_inv_freq(rope.theta, f.rot_dim);
  if (rope.type == "linear") {
    for (float& x : f.inv_freq) x /= static_cast<float>(rope.factor);
  } else if (rope.type == "llama3") {
    apply_llama3(rope, f.inv_freq);
  } else if (rope.type == "yarn") {
    apply_yarn(rope, rope.theta, f.rot_dim, f.inv_freq, f.attention_factor);
  }
  return f;
}

void fill_rope_tables(const RopeFrequencies& f, int64_t positions, std::vector<float>& cos_table,
                      std::vector<float>& sin_table) {
  const size_t half = f.inv_freq.size();
  cos_table.resize(static_cast<size_t>(positions) * half);
  sin_table.resize(static_cast<size_t>(positions) * half);
  for (int64_t p = 0; p < positions; ++p) {
    for (size_t i = 0; i < half; ++i) {
      // The angle is rounded to float32 first, as HF forms it with a float32 matmul.
      const float angle = f.inv_freq[i] * static_cast<float>(p);
      const size_t at = static_cast<size_t>(p) * half + i;
      cos_table[at] = static_cast<float>(std::cos(static_cast<double>(angle))) * f.attention_factor;
      sin_table[at] = static_cast<float>(std::sin(static_cast<double>(angle))) * f.attention_factor;
    }
  }
}

}  // namespace e3::model
