// --part I/P: parsing (also from a Slurm array's variables) and the output directory scan,
// which must touch only this part's files while other parts write beside it.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>

#include "io/manifest.h"
#include "io/shard_writer.h"
#include "jobs/output_dir.h"
#include "jobs/part.h"
#include "core/error.h"
#include "support/test_support.h"

namespace {

using e3::ErrorKind;
using e3::io::Part;

e3::Environment env_of(std::map<std::string, std::string> vars) { return e3::Environment(std::move(vars)); }

std::string usage_error(const std::string& text, const e3::Environment& env) {
  try {
    e3::jobs::parse_part(text, env);
  } catch (const e3::Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    return e.what();
  }
  ADD_FAILURE() << "--part " << text << " was accepted";
  return "";
}

TEST(ParsePart, IndexOverCount) {
  EXPECT_EQ(e3::jobs::parse_part("3/8", env_of({})), (Part{3, 8}));
  EXPECT_EQ(e3::jobs::parse_part("0/1", env_of({})), (Part{0, 1}));
  for (const char* bad : {"8/8", "-1/4", "1/0", "3", "a/b", "1/2/3", "1 /2"})
    EXPECT_NE(usage_error(bad, env_of({})).find("--part"), std::string::npos) << bad;
}

TEST(ParsePart, FromASlurmArray) {
  // --array=1-16:5 -> tasks 1, 6, 11, 16: task 11 is part 2 of 4.
  auto env = env_of({{"SLURM_ARRAY_TASK_ID", "11"},
                     {"SLURM_ARRAY_TASK_MIN", "1"},
                     {"SLURM_ARRAY_TASK_MAX", "16"},
                     {"SLURM_ARRAY_TASK_STEP", "5"},
                     {"SLURM_ARRAY_TASK_COUNT", "4"}});
  EXPECT_EQ(e3::jobs::parse_part("slurm", env), (Part{2, 4}));
  // --array=0-7 without a step variable.
  EXPECT_EQ(e3::jobs::parse_part("slurm", env_of({{"SLURM_ARRAY_TASK_ID", "7"},
                                                  {"SLURM_ARRAY_TASK_MIN", "0"},
                                                  {"SLURM_ARRAY_TASK_MAX", "7"},
                                                  {"SLURM_ARRAY_TASK_COUNT", "8"}})),
            (Part{7, 8}));
}

TEST(ParsePart, SlurmNeedsAnEvenlySpacedArray) {
  EXPECT_NE(usage_error("slurm", env_of({})).find("SLURM_ARRAY_TASK_ID is not set"), std::string::npos);
  // --array=1,3,10: 3 tasks over ids 1..10 cannot be numbered by position.
  const auto msg = usage_error("slurm", env_of({{"SLURM_ARRAY_TASK_ID", "3"},
                                                {"SLURM_ARRAY_TASK_MIN", "1"},
                                                {"SLURM_ARRAY_TASK_MAX", "10"},
                                                {"SLURM_ARRAY_TASK_COUNT", "3"}}));
  EXPECT_NE(msg.find("evenly spaced"), std::string::npos) << msg;
}

TEST(PartOwnership, ShardIndexModuloCount) {
  const Part p{1, 3};
  EXPECT_TRUE(p.owns(1));
  EXPECT_TRUE(p.owns(4));
  EXPECT_FALSE(p.owns(0));
  EXPECT_FALSE(p.owns(5));
}

TEST(ShardNames, IndexIsParsedFromFinalAndTemporaryNames) {
  EXPECT_EQ(e3::jobs::shard_index_of("shard-000042.h5"), 42);
  EXPECT_EQ(e3::jobs::shard_index_of("shard-000042.h5.tmp.991"), 42);
  EXPECT_FALSE(e3::jobs::shard_index_of("other.h5").has_value());
  EXPECT_FALSE(e3::jobs::shard_index_of("shard-.h5").has_value());
  EXPECT_FALSE(e3::jobs::shard_index_of("shard-12.json").has_value());
}

TEST(OutputDirParts, ScanTouchesOnlyThisPartsFiles) {
  e3::test::TempDir dir;
  // Part 0 of 2 owns even shards. Temporary files of both parts lie around.
  std::ofstream(dir / "shard-000000.h5.tmp.11") << "partial";
  std::ofstream(dir / "shard-000001.h5.tmp.12") << "partial";
  std::ofstream(dir / "manifest.part-0000-of-0002.json.tmp.13") << "partial";
  std::ofstream(dir / "manifest.part-0001-of-0002.json.tmp.14") << "partial";
  std::ofstream(dir / "shard-000003.h5") << "another part's shard, being renamed right now";
  const auto state = e3::jobs::prepare_output_dir(dir.path(), e3::test::small_run_fingerprint(), "data", Part{0, 2});
  EXPECT_EQ(state.temps_removed, 2);
  EXPECT_TRUE(state.committed.empty());
  EXPECT_FALSE(std::filesystem::exists(dir / "shard-000000.h5.tmp.11"));
  EXPECT_FALSE(std::filesystem::exists(dir / "manifest.part-0000-of-0002.json.tmp.13"));
  EXPECT_TRUE(std::filesystem::exists(dir / "shard-000001.h5.tmp.12"));
  EXPECT_TRUE(std::filesystem::exists(dir / "manifest.part-0001-of-0002.json.tmp.14"));
  EXPECT_TRUE(std::filesystem::exists(dir / "shard-000003.h5"));
}

TEST(OutputDirParts, RefusesADirectoryCutInAnotherNumberOfParts) {
  e3::test::TempDir dir;
  e3::io::Manifest m;
  m.fingerprint = e3::test::small_run_fingerprint();
  m.part = {0, 3};
  m.data_fingerprint = "data";
  e3::io::write_manifest(dir.path(), m);
  try {
    e3::jobs::prepare_output_dir(dir.path(), e3::test::small_run_fingerprint(), "data", Part{1, 2});
    ADD_FAILURE() << "accepted";
  } catch (const e3::Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Output);
    EXPECT_NE(std::string(e.what()).find("same --part count"), std::string::npos) << e.what();
  }
  // A single job (1 part) into a directory of parts is refused the same way.
  EXPECT_THROW(e3::jobs::prepare_output_dir(dir.path(), e3::test::small_run_fingerprint(), "data", Part{}), e3::Error);
  // Another part of the same cut is welcome.
  EXPECT_NO_THROW(e3::jobs::prepare_output_dir(dir.path(), e3::test::small_run_fingerprint(), "data", Part{2, 3}));
}

}  // namespace
