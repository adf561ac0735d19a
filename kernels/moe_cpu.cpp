#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "kernels/ops_cpu.h"

namespace e3::kernels::cpu {
namespace {

// The k largest of `values` (ties to the lower index), in descending order.
void top_k(const float* values, int n, int k, int* out) {
  std::vector<int> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) {
    return values[a] > values[b] || (values[a] == values[b] && a < b);
  });
  std::copy(order.begin(), order.begin() + k, out);
}

}  // namespace

void moe_route(Tensor logits, const Tensor* correction_bias, const RouterParams& p, Tensor topk_ids,
               Tensor topk_weights) {
  require_f32(logits, "router logits");
  require_f32(topk_weights, "router weights");
  const int E = p.num_experts, K = p.top_k, G = p.n_group;
  E3_REQUIRE(logits.cols == E && topk_ids.dtype == DType::I32 && topk_ids.cols == K && topk_weights.cols == K &&
                 topk_ids.rows == logits.rows && topk_weights.rows == logits.rows && G > 0 && E % G == 0 &&
                 p.topk_group >= 1 && p.topk_group <= G && K >= 1 && K <= E,
             ErrorKind::Internal, "moe_route: logits {} ids {} weights {} experts {} top-k {} groups {}/{}",
             logits.shape_str(), topk_ids.shape_str(), topk_weights.shape_str(), E, K, p.topk_group, G);
  const bool noaux = p.select == RouterSelect::NoAuxTc;
  E3_REQUIRE(!noaux || (correction_bias && correction_bias->numel() == E), ErrorKind::Internal,
             "noaux_tc routing needs a correction bias of {} experts", E);
  const int per_group = E / G;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < logits.rows; ++t) {
    const float* lg = logits.as<float>() + t * logits.stride;
    std::vector<float> scores(static_cast<size_t>(E)), choice(static_cast<size_t>(E)), group_score(static_cast<size_t>(G));
    if (p.scoring == RouterScoring::Softmax) {
      const float mx = *std::max_element(lg, lg + E);
      float sum = 0.0f;
      for (int e = 0; e < E; ++e) sum += scores[static_cast<size_t>(e)] = std::exp(lg[e] - mx);
      for (float& s : scores) s /= sum;
    } else {
      for (int e = 0; e < E; ++e) scores[static_cast<size_t>(e)] = 1.0f / (1.0f + std::exp(-lg[e]));
    }
    for (int e = 0; e < E; ++e)
      choice[static_cast<size_t>(e)] = scores[static_cast<size_t>(e)] + (noaux ? correction_bias->as<float>()[e] : 0.0f);

    if (p.select != RouterSelect::Greedy && p.topk_group < G) {
      for (int g = 0; g < G; ++g) {
        const float* c = choice.data() + g * per_group;
        if (noaux) {  // the sum of the group's two best choices
          int best[2] = {0, 0};
          const int take = std::min(2, per_group);
          top_k(c, per_group, take, best);
          group_score[static_cast<size_t>(g)] = c[best[0]] + (take > 1 ? c[best[1]] : 0.0f);
        } else {  // the group's best score
          group_score[static_cast<size_t>(g)] = *std::max_element(c, c + per_group);
        }
      }
      std::vector<int> keep(static_cast<size_t>(p.topk_group));
      top_k(group_score.data(), G, p.topk_group, keep.data());
      std::vector<bool> kept(static_cast<size_t>(G), false);
      for (int g : keep) kept[static_cast<size_t>(g)] = true;
      // Dropped groups can never be chosen: -inf for noaux_tc as DeepSeek-V3 does, 0 for the
      // softmax scores of group_limited_greedy as DeepSeek-V2 does.
      const float dropped = noaux ? -std::numeric_limits<float>::infinity() : 0.0f;
      for (int e = 0; e < E; ++e)
        if (!kept[static_cast<size_t>(e / per_group)]) choice[static_cast<size_t>(e)] = dropped;
    }
    int* ids = topk_ids.as<int32_t>() + t * topk_ids.stride;
    float* w = topk_weights.as<float>() + t * topk_weights.stride;
    top_k(choice.data(), E, K, ids);
    float sum = 0.0f;
    for (int j = 0; j < K; ++j) sum += w[j] = scores[static_cast<size_t>(ids[j])];
    for (int j = 0; j < K; ++j) {
      if (p.norm_topk_prob) w[j] /= sum + 1e-20f;
      w[j] *= p.routed_scaling_factor;
    }
  }
}

size_t moe_scratch_bytes(int64_t tokens, const MoeScratchShape& s) {
  // Every routed row of one expert at most: gathered x, gate|up, down output.
  const auto rows = static_cast<size_t>(tokens) * static_cast<size_t>(std::min(s.top_k, s.local_experts));
  return rows * static_cast<size_t>(s.hidden + 2 * s.intermediate + s.hidden) * sizeof(float);
}

void moe_experts(Tensor x, Tensor topk_ids, Tensor topk_weights, const ExpertStack& ex, Tensor out, Tensor shared,
                 Tensor scratch) {
  require_f32(x, "moe x");
  require_f32(out, "moe out");
  require_f32(topk_weights, "moe weights");
  if (shared.data) require_f32(shared, "moe shared");
  E3_REQUIRE(!shared.data || shared.data != out.data, ErrorKind::Internal, "moe_experts: shared is out");
  const int64_t M = x.rows, H = x.cols, I = ex.intermediate, K = topk_ids.cols;
  E3_REQUIRE(out.rows == M && out.cols == H && topk_ids.rows == M && topk_weights.rows == M && topk_weights.cols == K &&
                 ex.gate_up.rows == ex.num_experts * 2 * I && ex.gate_up.cols == H &&
                 ex.down.rows == ex.num_experts * H && ex.down.cols == I,
             ErrorKind::Internal, "moe_experts: x {} ids {} out {} gate_up {} down {} experts {} I {}",
             x.shape_str(), topk_ids.shape_str(), out.shape_str(), ex.gate_up.shape_str(), ex.down.shape_str(),
             ex.num_experts, I);
  for (int64_t t = 0; t < M; ++t) std::fill(out.as<float>() + t * out.stride, out.as<float>() + t * out.stride + H, 0.0f);

  // Tokens grouped by local expert, in token order: (token, weight).
  std::vector<std::vector<std::pair<int64_t, float>>> routed(static_cast<size_t>(ex.num_experts));
  for (int64_t t = 0; t < M; ++t)
    for (int64_t j = 0; j < K; ++j) {
      const int e = topk_ids.as<int32_t>()[t * topk_ids.stride + j] - ex.first_expert;
      if (e >= 0 && e < ex.num_experts)
        routed[static_cast<size_t>(e)].emplace_back(t, topk_weights.as<float>()[t * topk_weights.stride + j]);
    }
  size_t most = 0;
  for (const auto& r : routed) most = std::max(most, r.size());
  E3_REQUIRE(most * static_cast<size_t>(H + 2 * I + H) * sizeof(float) <= scratch.bytes(), ErrorKind::Internal,
             "moe scratch of {} bytes is too small for {} rows", scratch.bytes(), most);

  for (int e = 0; e < ex.num_experts; ++e) {
    const auto& rows = routed[static_cast<size_t>(e)];
    if (rows.empty()) continue;
    const auto n = static_cast<int64_t>(rows.size());
    float* base = scratch.as<float>();
    Tensor in(base, DType::F32, n, H);
    Tensor gate_up(base + n * H, DType::F32, n, 2 * I);
    Tensor gate = gate_up.col_slice(0, I), up = gate_up.col_slice(I, I);
    Tensor down(base + n * (H + 2 * I), DType::F32, n, H);
    for (int64_t r = 0; r < n; ++r)
      std::copy(x.as<float>() + rows[static_cast<size_t>(r)].first * x.stride,
                x.as<float>() + rows[static_cast<size_t>(r)].first * x.stride + H, in.as<float>() + r * H);
    linear(in, ex.gate_up.row_slice(e * 2 * I, 2 * I), nullptr, gate_up);
    silu_mul(gate, up, gate);
    linear(gate, ex.down.row_slice(e * H, H), nullptr, down);
    for (int64_t r = 0; r < n; ++r) {
      const auto [token, weight] = rows[static_cast<size_t>(r)];
      float* o = out.as<float>() + token * out.stride;
      const float* d = down.as<float>() + r * H;
      for (int64_t c = 0; c < H; ++c) o[c] += weight * d[c];
    }
  }
  if (shared.data) add_inplace(out, shared);
}

}  // namespace e3::kernels::cpu
