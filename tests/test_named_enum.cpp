// The name tables of the string-typed options: every value has one name that reads back as
// it, and the list the CLI's error shows is the table's.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "jobs/option_names.h"

namespace {

using namespace e3::jobs;

template <typename E>
void expect_round_trip() {
  std::set<std::string_view> seen;
  for (const NamedValue<E>& n : name_table(E{})) {
    EXPECT_TRUE(seen.insert(n.name).second) << "name " << n.name << " twice";
    EXPECT_EQ(name_of(n.value), n.name);
    ASSERT_TRUE(value_named<E>(n.name).has_value()) << n.name;
    EXPECT_EQ(*value_named<E>(n.name), n.value);
  }
  EXPECT_FALSE(value_named<E>("").has_value());
  EXPECT_FALSE(value_named<E>("AUTO").has_value()) << "names are exact";
}

TEST(OptionNames, EveryValueReadsBackByItsName) {
  expect_round_trip<BackendKind>();
  expect_round_trip<CommKind>();
  expect_round_trip<ExpertDequant>();
  expect_round_trip<LogLevel>();
}

TEST(OptionNames, ListsTheValidNamesInTableOrder) {
  EXPECT_EQ(valid_names<BackendKind>(), "auto, cuda or cpu");
  EXPECT_EQ(valid_names<CommKind>(), "auto, nccl or mpi");
  EXPECT_EQ(valid_names<ExpertDequant>(), "scratch or gemm");
  EXPECT_EQ(valid_names<LogLevel>(), "trace, debug, info, warn or error");
  EXPECT_EQ(name_of(LogLevel::Warn), "warn");
  EXPECT_EQ(value_named<CommKind>("nccl"), CommKind::Nccl);
}

}  // namespace
