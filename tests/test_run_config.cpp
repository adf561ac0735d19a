// Command-line values checked in jobs/run_config: the --layers list, --shard-size, the --threads
// warning, and the test-only fault-injection settings read from the environment.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "jobs/run_config.h"
#include "core/error.h"
#include "support/test_support.h"

namespace {

using e3::ErrorKind;
using e3::jobs::parse_byte_size;
using e3::jobs::parse_capture_ids;
using e3::jobs::threads_warning;
using e3::test::Contains;
using e3::test::error_of;

TEST(LayersOption, CommaSeparatedIntegers) {
  EXPECT_EQ(parse_capture_ids("2,16,29"), (std::vector<int>{2, 16, 29}));
  EXPECT_EQ(parse_capture_ids("0"), (std::vector<int>{0}));
  // Negative and repeated ids reach the model-aware check, which names them.
  EXPECT_EQ(parse_capture_ids("-1,3,3"), (std::vector<int>{-1, 3, 3}));
  // As a person writes a list: --layers "2, 3, 4".
  EXPECT_EQ(parse_capture_ids("2, 3, 4"), (std::vector<int>{2, 3, 4}));
  EXPECT_EQ(parse_capture_ids(" 2 ,3 "), (std::vector<int>{2, 3}));
}

TEST(LayersOption, EmptyListsAndItemsAreUsageErrors) {
  struct Case {
    const char* text;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"", "--layers is empty"},
      {"1,,2", "--layers 1,,2: item 2 is empty"},
      {",1", "--layers ,1: item 1 is empty"},
      {"1,", "--layers 1,: item 2 is empty"},
      {"1,x", "--layers 1,x: item 2 ('x') is not an integer"},
      {"1.5", "item 1 ('1.5') is not an integer"},
      {"1, ,2", "--layers 1, ,2: item 2 is empty"},
      {"2 16", "item 1 ('2 16') is not an integer"},
      {"99999999999", "item 1 ('99999999999') is not an integer"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    auto err = error_of([&] { parse_capture_ids(c.text); });
    ASSERT_TRUE(err.has_value());
    EXPECT_EQ(err->kind(), ErrorKind::Usage);
    EXPECT_TRUE(Contains(err->what(), c.message));
  }
}

TEST(ShardSizeOption, SuffixesArePowersOf1024) {
  EXPECT_EQ(parse_byte_size("1048576", "--shard-size"), 1048576u);
  EXPECT_EQ(parse_byte_size("1", "--shard-size"), 1u);  // tests want tiny shards
  EXPECT_EQ(parse_byte_size("100K", "--shard-size"), 100u * 1024);
  EXPECT_EQ(parse_byte_size("100k", "--shard-size"), 100u * 1024);
  EXPECT_EQ(parse_byte_size("512M", "--shard-size"), 512u << 20);
  EXPECT_EQ(parse_byte_size("512MiB", "--shard-size"), 512u << 20);
  EXPECT_EQ(parse_byte_size("4G", "--shard-size"), uint64_t{4} << 30);
  EXPECT_EQ(parse_byte_size("4GiB", "--shard-size"), uint64_t{4} << 30);
  EXPECT_EQ(parse_byte_size("2KiB", "--shard-size"), 2048u);
  EXPECT_EQ(parse_byte_size("8589934592G", "--shard-size"), uint64_t{1} << 63);
}

TEST(ShardSizeOption, AnythingElseIsAUsageErrorNamingTheOption) {
  for (const char* text : {"", "0", "0G", "-1", "G", "1.5G", "4GB", "4T", "4 G", " 4G", "4Gi", "4giB0",
                           "8589934593G", "99999999999999999999"}) {
    SCOPED_TRACE(text);
    auto err = error_of([&] { parse_byte_size(text, "--shard-size"); });
    ASSERT_TRUE(err.has_value());
    EXPECT_EQ(err->kind(), ErrorKind::Usage);
    EXPECT_TRUE(Contains(err->what(), std::string("--shard-size '") + text + "'"));
  }
}

TEST(ThreadsWarning, OnlyWhenTheRanksOfANodeWantMoreThreadsThanCores) {
  EXPECT_FALSE(threads_warning(4, 2, 8).has_value());
  EXPECT_FALSE(threads_warning(8, 1, 8).has_value());
  const auto w = threads_warning(9, 1, 8);
  ASSERT_TRUE(w.has_value());
  EXPECT_TRUE(Contains(*w, "--threads 9 on each of the 1 rank of this node is 9 threads for 8 cores"));
  const auto w2 = threads_warning(3, 4, 8);
  ASSERT_TRUE(w2.has_value());
  EXPECT_TRUE(Contains(*w2, "--threads 3 on each of the 4 ranks of this node is 12 threads for 8 cores"));
}

}  // namespace

namespace {

using e3::jobs::fault_injection_from;

e3::jobs::FaultInjection faults_of(const std::map<std::string, std::string>& env) {
  return fault_injection_from(e3::Environment(env));
}

TEST(FaultInjection, ReadOnceIntoTheRunConfig) {
  const e3::jobs::FaultInjection none = faults_of({});
  EXPECT_FALSE(none.fails_before(0, 0));
  EXPECT_EQ(none.fail_publish_shard, -1);
  const e3::jobs::FaultInjection f =
      faults_of({{"E3_FAIL_AT_SAMPLE", "3"}, {"E3_FAIL_ON_RANK", "2"}, {"E3_FAIL_PUBLISH_SHARD", "5"}});
  EXPECT_TRUE(f.fails_before(3, 2));
  EXPECT_FALSE(f.fails_before(3, 0)) << "another rank";
  EXPECT_FALSE(f.fails_before(4, 2)) << "another sample";
  EXPECT_EQ(f.fail_publish_shard, 5);
  EXPECT_TRUE(faults_of({{"E3_FAIL_AT_SAMPLE", "0"}}).fails_before(0, 0)) << "rank 0 by default";
}

TEST(FaultInjection, ABadValueIsAUsageErrorNamingTheVariable) {
  for (const char* name : {"E3_FAIL_AT_SAMPLE", "E3_FAIL_ON_RANK", "E3_FAIL_PUBLISH_SHARD"})
    for (const char* value : {"x", "-1", "3a"}) {
      const auto e = error_of([&] { faults_of({{name, value}}); });
      ASSERT_TRUE(e) << name << "=" << value;
      EXPECT_EQ(e->kind(), ErrorKind::Usage);
      EXPECT_TRUE(Contains(e->what(), std::string(name) + "='" + value + "'"));
    }
}

}  // namespace
