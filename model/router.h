// The MoE router as config.json names it: the scoring function and the top-k method, each an
// enum with one table of the names HF configs use, and the kernels' RouterParams of a config.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "kernels/router_params.h"

namespace e3::model {

using Scoring = kernels::RouterScoring;
using TopkMethod = kernels::RouterSelect;

template <class E>
using NameEntry = std::pair<std::string_view, E>;

// config.json's scoring_func values.
inline constexpr NameEntry<Scoring> kScoringNames[] = {{"softmax", Scoring::Softmax}, {"sigmoid", Scoring::Sigmoid}};
// config.json's topk_method values.
inline constexpr NameEntry<TopkMethod> kTopkMethodNames[] = {{"greedy", TopkMethod::Greedy},
                                                             {"group_limited_greedy", TopkMethod::GroupLimitedGreedy},
                                                             {"noaux_tc", TopkMethod::NoAuxTc}};

template <class E, size_t N>
std::optional<E> enum_from_name(const NameEntry<E> (&table)[N], std::string_view name) {
  for (const auto& [n, e] : table)
    if (n == name) return e;
  return std::nullopt;
}

template <class E, size_t N>
std::string_view enum_name(const NameEntry<E> (&table)[N], E value) {
  for (const auto& [n, e] : table)
    if (e == value) return n;
  return "?";
}

// "a, b, c": the accepted names, for messages.
template <class E, size_t N>
std::string enum_names(const NameEntry<E> (&table)[N]) {
  std::string out;
  for (const auto& entry : table) out += (out.empty() ? "" : ", ") + std::string(entry.first);
  return out;
}

inline std::string_view scoring_name(Scoring s) { return enum_name(kScoringNames, s); }
inline std::string_view topk_method_name(TopkMethod m) { return enum_name(kTopkMethodNames, m); }

struct MoeConfig;
// The router settings of a config's MoE layers.
kernels::RouterParams router_params(const MoeConfig& moe);

}  // namespace e3::model
