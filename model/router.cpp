#include "model/router.h"

#include "model/config.h"

namespace e3::model {

kernels::RouterParams router_params(const MoeConfig& moe) {
  kernels::RouterParams p;
  p.num_experts = static_cast<int>(moe.num_experts);
  p.top_k = static_cast<int>(moe.experts_per_token);
  p.n_group = static_cast<int>(moe.n_group);
  p.topk_group = static_cast<int>(moe.topk_group);
  p.scoring = moe.scoring;
  p.select = moe.topk_method;
  p.norm_topk_prob = moe.norm_topk_prob;
  p.routed_scaling_factor = static_cast<float>(moe.routed_scaling_factor);
  return p;
}

}  // namespace e3::model
