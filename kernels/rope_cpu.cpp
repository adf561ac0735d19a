#include "core/error.h"
#include "kernels/ops_cpu.h"

namespace e3::kernels::cpu {

void rope(Tensor x, const RopeParams& p, const RopeTable& table, const SequenceLayout& seqs) {
  require_f32(x, "rope x");
  const int half = p.rot_dim / 2;
  E3_REQUIRE(p.rot_dim % 2 == 0 && p.rot_offset + p.rot_dim <= p.head_dim &&
                 x.cols == static_cast<int64_t>(p.num_heads) * p.head_dim && table.cos.cols == half &&
                 x.rows == seqs.num_tokens,
             ErrorKind::Internal, "rope: x {} heads {} head_dim {} rot [{}, +{}) table {}",
             x.shape_str(), p.num_heads, p.head_dim, p.rot_offset, p.rot_dim, table.cos.shape_str());
  const int32_t* pos = seqs.positions.as<int32_t>();
  // Checked before the parallel loop: an exception must not leave an OpenMP region.
  for (int64_t t = 0; t < x.rows; ++t)
    E3_REQUIRE(pos[t] >= 0 && pos[t] < table.cos.rows, ErrorKind::Internal,
               "position {} outside the RoPE table of {} positions", pos[t], table.cos.rows);
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < x.rows; ++t) {
    const float* cs = table.cos.as<float>() + pos[t] * table.cos.stride;
    const float* sn = table.sin.as<float>() + pos[t] * table.sin.stride;
    float* row = x.as<float>() + t * x.stride;
    for (int h = 0; h < p.num_heads; ++h) {
      float* head = row + h * p.head_dim + p.rot_offset;
      for (int i = 0; i < half; ++i) {
        float& a = p.interleaved ? head[2 * i] : head[i];
        float& b = p.interleaved ? head[2 * i + 1] : head[i + half];
        const float a0 = a, b0 = b;
        a = a0 * cs[i] - b0 * sn[i];
        b = b0 * cs[i] + a0 * sn[i];
      }
    }
  }
}

}  // namespace e3::kernels::cpu
