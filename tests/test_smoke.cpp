#include <gtest/gtest.h>

#include "core/error.h"

TEST(Error, DescribeCarriesRankKindAndPlace) {
  e3::Error e(e3::ErrorKind::Input, "data.jsonl:3: bad", "io/dataset.cpp", 42);
  e.set_rank(3);
  EXPECT_EQ(e.describe(), "rank 3: input error: data.jsonl:3: bad (io/dataset.cpp:42)");
  EXPECT_EQ(e3::exit_code(e.kind()), 3);
}
