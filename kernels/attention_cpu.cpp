#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "kernels/ops_cpu.h"

namespace e3::kernels::cpu {

void attention(Tensor q, Tensor k, Tensor v, Tensor out, const AttentionParams& p,
               const SequenceLayout& seqs, std::vector<float>& scratch) {
  require_f32(q, "attention q");
  require_f32(k, "attention k");
  require_f32(v, "attention v");
  require_f32(out, "attention out");
  E3_REQUIRE(p.num_kv_heads > 0 && p.num_q_heads % p.num_kv_heads == 0 &&
                 q.cols == int64_t{p.num_q_heads} * p.qk_head_dim &&
                 k.cols == int64_t{p.num_kv_heads} * p.qk_head_dim &&
                 v.cols == int64_t{p.num_kv_heads} * p.v_head_dim &&
                 out.cols == int64_t{p.num_q_heads} * p.v_head_dim && q.rows == seqs.num_tokens &&
                 k.rows == q.rows && v.rows == q.rows && out.rows == q.rows,
             ErrorKind::Internal, "attention: q {} k {} v {} out {} heads {}/{} dims {}/{}",
             q.shape_str(), k.shape_str(), v.shape_str(), out.shape_str(), p.num_q_heads,
             p.num_kv_heads, p.qk_head_dim, p.v_head_dim);
  const int group = p.num_q_heads / p.num_kv_heads;
  const int threads = omp_get_max_threads();
  const size_t row_len = static_cast<size_t>(std::max<int64_t>(seqs.max_seqlen, 1));
  if (scratch.size() < row_len * threads) scratch.resize(row_len * threads);
  const int32_t* cu = seqs.cu_seqlens_host;

  // One task per (sequence, head, query token); a query sees keys [lo, i] of its own sequence.
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t task = 0; task < seqs.num_tokens * p.num_q_heads; ++task) {
    const int64_t token = task / p.num_q_heads;
    const int head = static_cast<int>(task % p.num_q_heads);
    const int kv_head = head / group;
    const int s = static_cast<int>(std::upper_bound(cu, cu + seqs.num_seqs + 1, token) - cu) - 1;
    const int64_t begin = cu[s];
    int64_t lo = begin;
    if (p.sliding_window > 0) lo = std::max(lo, token - p.sliding_window + 1);
    float* scores = scratch.data() + row_len * omp_get_thread_num();

    const float* qi = q.as<float>() + token * q.stride + int64_t{head} * p.qk_head_dim;
    float max_score = -std::numeric_limits<float>::infinity();
    for (int64_t j = lo; j <= token; ++j) {
      const float* kj = k.as<float>() + j * k.stride + int64_t{kv_head} * p.qk_head_dim;
      float dot = 0.0f;
      for (int d = 0; d < p.qk_head_dim; ++d) dot += qi[d] * kj[d];
      const float sc = dot * p.scale;
      scores[j - lo] = sc;
      max_score = std::max(max_score, sc);
    }
    float sum = 0.0f;
    for (int64_t j = lo; j <= token; ++j) {
      scores[j - lo] = std::exp(scores[j - lo] - max_score);
      sum += scores[j - lo];
    }
    float* o = out.as<float>() + token * out.stride + int64_t{head} * p.v_head_dim;
    for (int d = 0; d < p.v_head_dim; ++d) o[d] = 0.0f;
    for (int64_t j = lo; j <= token; ++j) {
      const float w = scores[j - lo] / sum;
      const float* vj = v.as<float>() + j * v.stride + int64_t{kv_head} * p.v_head_dim;
      for (int d = 0; d < p.v_head_dim; ++d) o[d] += w * vj[d];
    }
  }
}

}  // namespace e3::kernels::cpu

namespace e3::kernels::cpu {

void mla_expand_kv(Tensor kv, Tensor k_rot, int heads, int nope_dim, int v_dim, Tensor k, Tensor v) {
  require_f32(kv, "mla kv");
  require_f32(k_rot, "mla k_rot");
  require_f32(k, "mla k");
  require_f32(v, "mla v");
  const int64_t rope = k_rot.cols, qk = nope_dim + rope;
  E3_REQUIRE(kv.cols == int64_t{heads} * (nope_dim + v_dim) && k.cols == heads * qk && v.cols == int64_t{heads} * v_dim &&
                 k_rot.rows == kv.rows && k.rows == kv.rows && v.rows == kv.rows,
             ErrorKind::Internal, "mla_expand_kv: kv {} k_rot {} k {} v {} heads {} nope {} v {}", kv.shape_str(),
             k_rot.shape_str(), k.shape_str(), v.shape_str(), heads, nope_dim, v_dim);
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < kv.rows; ++t) {
    const float* src = kv.as<float>() + t * kv.stride;
    const float* rot = k_rot.as<float>() + t * k_rot.stride;
    float* kd = k.as<float>() + t * k.stride;
    float* vd = v.as<float>() + t * v.stride;
    for (int h = 0; h < heads; ++h) {
      const float* head = src + int64_t{h} * (nope_dim + v_dim);
      std::copy(head, head + nope_dim, kd + h * qk);
      std::copy(rot, rot + rope, kd + h * qk + nope_dim);
      std::copy(head + nope_dim, head + nope_dim + v_dim, vd + int64_t{h} * v_dim);
    }
  }
}

}  // namespace e3::kernels::cpu
