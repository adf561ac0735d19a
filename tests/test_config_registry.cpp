// The architecture registry: each family is found by every name its descriptor lists, no name
// selects two families, every descriptor can parse and build, and messages list the registry's
// families and the router name tables rather than a copy of them.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/arch.h"
#include "model/config.h"
#include "support/test_support.h"

namespace {

using e3::model::arch_registry;
using e3::model::ArchDescriptor;
using e3::model::find_arch;
using e3::test::Contains;
using e3::test::error_of;
using nlohmann::json;

TEST(ArchRegistry, EveryNameFindsItsFamilyAndNoOther) {
  std::set<std::string_view> architectures, model_types, families;
  ASSERT_GE(arch_registry().size(), 8u);
  for (const ArchDescriptor* a : arch_registry()) {
    SCOPED_TRACE(a->family);
    EXPECT_TRUE(families.insert(a->family).second) << "two families named " << a->family;
    EXPECT_NE(a->parse, nullptr);
    EXPECT_NE(a->attention_block, nullptr);
    EXPECT_NE(a->names, nullptr);
    EXPECT_FALSE(a->architectures.empty());
    EXPECT_FALSE(a->model_types.empty());
    for (std::string_view n : a->architectures) {
      EXPECT_TRUE(architectures.insert(n).second) << n << " selects two families";
      EXPECT_EQ(find_arch(n, ""), a) << n;
      EXPECT_EQ(find_arch(n, "unknown"), a) << n;
    }
    for (std::string_view t : a->model_types) {
      EXPECT_TRUE(model_types.insert(t).second) << t << " selects two families";
      EXPECT_EQ(find_arch("", t), a) << t;
      EXPECT_EQ(find_arch("SomethingForCausalLM", t), a) << t;
    }
  }
  EXPECT_EQ(find_arch("GPT2LMHeadModel", "gpt2"), nullptr);
  EXPECT_TRUE(families.count("glm4_moe"));
}

TEST(ArchRegistry, UnsupportedArchitectureListsEveryFamily) {
  const json doc = {{"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"}, {"hidden_size", 64}};
  auto err = error_of([&] { e3::model::parse_model_config(doc, "/m/config.json"); });
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->kind(), e3::ErrorKind::Model);
  for (const ArchDescriptor* a : arch_registry()) EXPECT_TRUE(Contains(err->what(), a->family)) << err->what();
  EXPECT_TRUE(Contains(err->what(), "deepseek_v3 (kimi_k2)")) << err->what();
}

TEST(RouterNames, EachTableRoundTripsAndListsItsNames) {
  using e3::model::Scoring;
  using e3::model::TopkMethod;
  for (const auto& [value, name] : e3::kernels::kScoringNames) {
    EXPECT_EQ(e3::value_named<Scoring>(name), value);
    EXPECT_EQ(e3::name_of(value), name);
  }
  for (const auto& [value, name] : e3::kernels::kTopkMethodNames) {
    EXPECT_EQ(e3::value_named<TopkMethod>(name), value);
    EXPECT_EQ(e3::name_of(value), name);
  }
  EXPECT_FALSE(e3::value_named<TopkMethod>("random").has_value());
  EXPECT_EQ((e3::joined_names<TopkMethod>(", ", ", ")), "greedy, group_limited_greedy, noaux_tc");
  EXPECT_EQ((e3::joined_names<Scoring>(", ", ", ")), "softmax, sigmoid");
}

}  // namespace
