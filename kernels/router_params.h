// The MoE router's settings as the kernels take them. A header of its own, without the
// backend, so that config parsing (model/router.h) can name them without pulling in the backend.
#pragma once

namespace e3::kernels {

enum class RouterScoring { Softmax, Sigmoid };
// greedy: top-k of the scores. group_limited_greedy (DeepSeek-V2): groups ranked by their best
// score, experts of the other groups dropped. noaux_tc (DeepSeek-V3): choice = score +
// correction bias, groups ranked by the sum of their two best choices; the weights are the
// scores without the bias.
enum class RouterSelect { Greedy, GroupLimitedGreedy, NoAuxTc };

struct RouterParams {
  int num_experts = 0;
  int top_k = 0;
  int n_group = 1;
  int topk_group = 1;
  RouterScoring scoring = RouterScoring::Softmax;
  RouterSelect select = RouterSelect::Greedy;
  bool norm_topk_prob = false;         // weights divided by their sum (+1e-20)
  float routed_scaling_factor = 1.0f;  // then multiplied by this
};

}  // namespace e3::kernels
