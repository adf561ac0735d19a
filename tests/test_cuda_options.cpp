// The CUDA backend's environment knobs, read once where the backend is created: the values
// they take, and one usage error naming the variable for anything else.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "kernels/cuda_options.h"
#include "support/test_support.h"

namespace {

using e3::kernels::CudaOptions;

CudaOptions from(const std::map<std::string, std::string>& env) {
  return e3::kernels::cuda_options_from(e3::Environment(env));
}

TEST(CudaOptions, UnsetOrEmptyKeepsTheDefaults) {
  for (const auto& env : {std::map<std::string, std::string>{},
                          std::map<std::string, std::string>{{"E3_GEMM_VARIANT", ""}, {"E3_MOE_UNFUSED", ""}}}) {
    const CudaOptions o = from(env);
    EXPECT_EQ(o.gemm_variant, CudaOptions::kAutoGemmVariant);
    EXPECT_FALSE(o.moe_unfused);
    EXPECT_FALSE(o.profile);
    EXPECT_EQ(o.attention_variant, CudaOptions::kAutoAttentionVariant);
    EXPECT_EQ(o.l2_sides, CudaOptions::kAutoL2Sides);
  }
}

TEST(CudaOptions, ReadsTheL2Sides) {
  EXPECT_EQ(from({{"E3_L2_SIDES", "0"}}).l2_sides, CudaOptions::kNoL2Sides);
  EXPECT_EQ(from({{"E3_L2_SIDES", "1"}}).l2_sides, CudaOptions::kProbedL2Sides);
  EXPECT_EQ(from({{"E3_L2_SIDES", "2"}}).l2_sides, CudaOptions::kParityL2Sides);
  EXPECT_EQ(from({{"E3_L2_SIDES", ""}}).l2_sides, CudaOptions::kAutoL2Sides);
  for (const std::string value : {"3", "-1", "on", "11"}) {
    const auto e = e3::test::error_of([&] { from({{"E3_L2_SIDES", value}}); });
    ASSERT_TRUE(e) << "E3_L2_SIDES=" << value << " was accepted";
    EXPECT_EQ(e->kind(), e3::ErrorKind::Usage);
    EXPECT_TRUE(e3::test::Contains(e->what(), "E3_L2_SIDES='" + value + "'"));
  }
}

TEST(CudaOptions, ReadsTheAttentionVariant) {
  EXPECT_EQ(from({{"E3_ATTENTION_VARIANT", "0"}}).attention_variant, CudaOptions::kMmaSyncAttention);
  EXPECT_EQ(from({{"E3_ATTENTION_VARIANT", "1"}}).attention_variant, CudaOptions::kWgmmaAttention);
  EXPECT_EQ(from({{"E3_ATTENTION_VARIANT", ""}}).attention_variant, CudaOptions::kAutoAttentionVariant);
  for (const std::string value : {"2", "-1", "wgmma", "01"}) {
    const auto e = e3::test::error_of([&] { from({{"E3_ATTENTION_VARIANT", value}}); });
    ASSERT_TRUE(e) << "E3_ATTENTION_VARIANT=" << value << " was accepted";
    EXPECT_EQ(e->kind(), e3::ErrorKind::Usage);
    EXPECT_TRUE(e3::test::Contains(e->what(), "E3_ATTENTION_VARIANT='" + value + "'"));
  }
}

TEST(CudaOptions, OnlyOneTurnsTheProfilerOn) {
  EXPECT_TRUE(from({{"E3_PROFILE", "1"}}).profile);
  for (const char* value : {"", "0", "yes", "2"}) EXPECT_FALSE(from({{"E3_PROFILE", value}}).profile) << value;
}

TEST(CudaOptions, ReadsTheVariantAndTheUnfusedSilu) {
  for (int v = 0; v <= CudaOptions::kHopperWsCountedRegsGemmVariant; ++v)
    EXPECT_EQ(from({{"E3_GEMM_VARIANT", std::to_string(v)}}).gemm_variant, v);
  EXPECT_TRUE(from({{"E3_MOE_UNFUSED", "1"}}).moe_unfused);
  EXPECT_FALSE(from({{"E3_MOE_UNFUSED", "0"}}).moe_unfused);
}

TEST(CudaOptions, AnythingElseIsAUsageErrorNamingTheVariable) {
  for (const std::string value : {"10", "-1", "1x", "hopper"}) {
    const auto e = e3::test::error_of([&] { from({{"E3_GEMM_VARIANT", value}}); });
    ASSERT_TRUE(e) << "E3_GEMM_VARIANT=" << value << " was accepted";
    EXPECT_EQ(e->kind(), e3::ErrorKind::Usage);
    EXPECT_TRUE(e3::test::Contains(e->what(), "E3_GEMM_VARIANT='" + value + "'"));
  }
  for (const char* value : {"yes", "2", "true"}) {
    const auto e = e3::test::error_of([&] { from({{"E3_MOE_UNFUSED", value}}); });
    ASSERT_TRUE(e) << "E3_MOE_UNFUSED=" << value << " was accepted";
    EXPECT_EQ(e->kind(), e3::ErrorKind::Usage);
    EXPECT_TRUE(e3::test::Contains(e->what(), "E3_MOE_UNFUSED"));
  }
}

}  // namespace
