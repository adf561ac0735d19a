// The MoE router as config.json names it: the scoring function and the top-k method, each an
// enum with one name table (core/named_enum.h) of the names HF configs use, and the kernels'
// RouterParams of a config.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "core/named_enum.h"
#include "kernels/router_params.h"

namespace e3::kernels {

// config.json's names of the router's kinds. The tables sit in the enums' namespace, where
// core/named_enum.h's lookup finds them; the names are the model's, so they live here.
// scoring_func:
inline constexpr NamedValue<RouterScoring> kScoringNames[] = {{RouterScoring::Softmax, "softmax"},
                                                              {RouterScoring::Sigmoid, "sigmoid"}};
constexpr const auto& name_table(RouterScoring) { return kScoringNames; }
// topk_method:
inline constexpr NamedValue<RouterSelect> kTopkMethodNames[] = {{RouterSelect::Greedy, "greedy"},
                                                                {RouterSelect::GroupLimitedGreedy, "group_limited_greedy"},
                                                                {RouterSelect::NoAuxTc, "noaux_tc"}};
constexpr const auto& name_table(RouterSelect) { return kTopkMethodNames; }

}  // namespace e3::kernels

namespace e3::model {

using Scoring = kernels::RouterScoring;
using TopkMethod = kernels::RouterSelect;

struct MoeConfig;
// The router settings of a config's MoE layers.
kernels::RouterParams router_params(const MoeConfig& moe);

}  // namespace e3::model
