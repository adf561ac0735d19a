// RoPE frequencies for each scaling variant, computed as HF transformers computes them
// (float32 arithmetic, the same formulas), so that fp32 runs match the reference closely.
#pragma once

#include <vector>

#include "model/config.h"

namespace e3::model {

struct RopeFrequencies {
  std::vector<float> inv_freq;   // [rot_dim / 2]
  float attention_factor = 1.0f; // multiplies cos and sin (yarn)
  int rot_dim = 0;
};

// `head_dim` is the dimension being rotated before partial_rotary_factor is applied.
RopeFrequencies compute_rope_frequencies(const RopeConfig& rope, int head_dim, int64_t max_position_embeddings);

// cos/sin tables [positions, rot_dim / 2], row-major, attention_factor folded in.
void fill_rope_tables(const RopeFrequencies& f, int64_t positions, std::vector<float>& cos_table,
                      std::vector<float>& sin_table);

// YaRN's mscale: 0.1 * m * ln(scale) + 1 for scale > 1, else 1.
double yarn_get_mscale(double scale, double mscale);

}  // namespace e3::model
