// Named enums (core/named_enum.h): every value of each table has one name that reads back as
// it, messages list the table, a bad name is one usage error (or the kind asked for) in the
// CLI's form, and a near miss gets its "did you mean".
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/named_enum.h"
#include "io/dataset.h"
#include "jobs/export.h"
#include "jobs/option_names.h"
#include "jobs/run_config.h"
#include "model/capture.h"
#include "model/router.h"

namespace {

using e3::ErrorKind;
using e3::NamedValue;
using namespace e3::jobs;

template <typename E>
void expect_round_trip() {
  std::set<std::string_view> seen;
  for (const NamedValue<E>& n : name_table(E{})) {
    EXPECT_TRUE(seen.insert(n.name).second) << "name " << n.name << " twice";
    EXPECT_EQ(e3::name_of(n.value), n.name);
    ASSERT_TRUE(e3::value_named<E>(n.name).has_value()) << n.name;
    EXPECT_EQ(*e3::value_named<E>(n.name), n.value);
    EXPECT_EQ(e3::parse_named<E>(n.name, "--x"), n.value);
  }
  EXPECT_FALSE(e3::value_named<E>("").has_value());
  EXPECT_FALSE(e3::value_named<E>("AUTO").has_value()) << "names are exact";
}

TEST(NamedEnum, EveryValueReadsBackByItsName) {
  expect_round_trip<BackendKind>();
  expect_round_trip<CommKind>();
  expect_round_trip<ExpertDequant>();
  expect_round_trip<LogLevel>();
  expect_round_trip<OnNonfinite>();
  expect_round_trip<ExportFormat>();
  expect_round_trip<e3::io::OnLong>();
  expect_round_trip<e3::model::FinalMode>();
  expect_round_trip<e3::model::Scoring>();
  expect_round_trip<e3::model::TopkMethod>();
  expect_round_trip<e3::DType>();
}

TEST(NamedEnum, ListsTheValidNamesInTableOrder) {
  EXPECT_EQ(e3::valid_names<BackendKind>(), "auto, cuda or cpu");
  EXPECT_EQ(e3::valid_names<CommKind>(), "auto, nccl or mpi");
  EXPECT_EQ(e3::valid_names<ExpertDequant>(), "scratch or gemm");
  EXPECT_EQ(e3::valid_names<LogLevel>(), "trace, debug, info, warn or error");
  EXPECT_EQ(e3::valid_names<OnNonfinite>(), "error or skip");
  EXPECT_EQ(e3::valid_names<e3::DType>(), "bf16, fp16, fp32 or fp8");
  EXPECT_EQ((e3::joined_names<CommKind>(",", ",")), "auto,nccl,mpi");
  EXPECT_EQ(e3::name_of(LogLevel::Warn), "warn");
  EXPECT_EQ(e3::value_named<CommKind>("nccl"), CommKind::Nccl);
  EXPECT_EQ(e3::name_of(e3::DType::I32), "?") << "not a storage dtype";
}

std::string message_of(std::string_view text, std::string_view what, ErrorKind kind = ErrorKind::Usage) {
  try {
    e3::parse_named<CommKind>(text, what, kind);
  } catch (const e3::Error& e) {
    EXPECT_EQ(e.kind(), kind);
    return e.what();
  }
  ADD_FAILURE() << "'" << text << "' was accepted";
  return {};
}

TEST(NamedEnum, ABadNameIsOneErrorInTheFormOfTheCommandLine) {
  EXPECT_EQ(message_of("nvlink", "--comm"), "--comm: must be auto, nccl or mpi, not 'nvlink'");
  EXPECT_EQ(message_of("", "--comm"), "--comm: must be auto, nccl or mpi, not ''");
  EXPECT_EQ(message_of("tcp", "bench --comm", ErrorKind::Model), "bench --comm: must be auto, nccl or mpi, not 'tcp'");
}

TEST(NamedEnum, ANearMissGetsTheNameItMisspells) {
  EXPECT_EQ(message_of("nccll", "--comm"), "--comm: must be auto, nccl or mpi, not 'nccll' (did you mean 'nccl'?)");
  EXPECT_EQ(message_of("NCCL", "--comm"), "--comm: must be auto, nccl or mpi, not 'NCCL' (did you mean 'nccl'?)");
  EXPECT_THROW(e3::parse_named<e3::DType>("bf61", "--dtype"), e3::Error);
  try {
    e3::parse_named<e3::DType>("bf61", "--dtype");
  } catch (const e3::Error& e) {
    EXPECT_STREQ(e.what(), "--dtype: must be bf16, fp16, fp32 or fp8, not 'bf61' (did you mean 'bf16'?)");
  }
  try {
    e3::parse_named<e3::model::FinalMode>("post_norm", "--final");
  } catch (const e3::Error& e) {
    EXPECT_STREQ(e.what(),
                 "--final: must be post-norm, pre-norm, both or none, not 'post_norm' (did you mean 'post-norm'?)");
  }
}

TEST(NamedEnum, ClosestNameAllowsFewEditsAndFewerForShortNames) {
  const std::vector<std::string_view> names = {"id", "input_ids", "loss_mask"};
  EXPECT_EQ(e3::closest_name("lossmsk", names), "loss_mask");
  EXPECT_EQ(e3::closest_name("Loss-Mask", names), "loss_mask") << "case, '_' and '-' do not count";
  EXPECT_EQ(e3::closest_name("inptu_ids", names), "input_ids") << "a swap of neighbours is one edit";
  EXPECT_EQ(e3::closest_name("ID", names), "id");
  EXPECT_EQ(e3::closest_name("x", names), std::nullopt) << "a two-letter name allows no edit";
  EXPECT_EQ(e3::closest_name("lxxxmask", names), std::nullopt) << "three edits are not a typo";
  EXPECT_EQ(e3::closest_name("", names), std::nullopt);
  EXPECT_EQ(e3::closest_name(std::string(40, 'a'), names), std::nullopt);
  EXPECT_EQ(e3::closest_name("mpii", {"auto", "nccl", "mpi"}), "mpi");
  EXPECT_EQ(e3::closest_name("nvlink", {"auto", "nccl", "mpi"}), std::nullopt);
  EXPECT_EQ(e3::closest_name("gpu", {"auto", "cuda", "cpu"}), std::nullopt)
      << "a three-letter name's first letter is not a slip: 'gpu' means cuda, not cpu";
  EXPECT_EQ(e3::closest_name("cpuu", {"auto", "cuda", "cpu"}), "cpu");
  EXPECT_EQ(e3::closest_name("gemmxx", {"gemm"}), std::nullopt) << "four letters allow one edit, not two";
  EXPECT_EQ(e3::closest_name("srach", {"scratch"}), "scratch") << "six letters and more allow two";
  EXPECT_EQ(e3::closest_name("abx", {"abc", "abd"}), "abc") << "the first of equally close names";
}

}  // namespace
