// Command-line values checked in jobs/run_config: the --layers list and the --threads warning.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "jobs/run_config.h"
#include "kernels/error.h"
#include "support/test_support.h"

namespace {

using e3::ErrorKind;
using e3::jobs::parse_capture_ids;
using e3::jobs::threads_warning;
using e3::test::Contains;
using e3::test::error_of;

TEST(LayersOption, CommaSeparatedIntegers) {
  EXPECT_EQ(parse_capture_ids("2,16,29"), (std::vector<int>{2, 16, 29}));
  EXPECT_EQ(parse_capture_ids("0"), (std::vector<int>{0}));
  // Negative and repeated ids reach the model-aware check, which names them.
  EXPECT_EQ(parse_capture_ids("-1,3,3"), (std::vector<int>{-1, 3, 3}));
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
      {"2, 16", "item 2 (' 16') is not an integer"},
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
