// File names of exported samples: a sample id never leads out of DEST, never names a hidden or
// special file, and two samples never share a name.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "jobs/export.h"
#include "core/error.h"

using e3::jobs::modelopt_file_stem;
using e3::jobs::specforge_file;
using e3::jobs::speculators_file;

namespace {

std::string stem(const std::string& id) { return modelopt_file_stem(7, &id); }

bool plain(const std::string& name) {
  if (name.empty() || name[0] == '.' || name.size() > 200) return false;
  for (unsigned char c : name)
    if (c == '/' || c < 0x20 || c == 0x7F || c > 0x7E) return false;
  return true;
}

}  // namespace

TEST(ExportNames, SafeIdsKeepTheirNames) {
  EXPECT_EQ(stem("conv_123-a.b"), "conv_123-a.b");
  EXPECT_EQ(modelopt_file_stem(3, nullptr), "00000003");
  const std::string empty;
  EXPECT_EQ(modelopt_file_stem(12, &empty), "00000012");
}

TEST(ExportNames, HostileIdsStayInsideDest) {
  EXPECT_EQ(stem("../evil"), "%2E.%2Fevil");
  EXPECT_EQ(stem(".."), "%2E.");
  EXPECT_EQ(stem("."), "%2E");
  EXPECT_EQ(stem("a/b"), "a%2Fb");
  EXPECT_EQ(stem(std::string("x\x01y\n", 4)), "x%01y%0A");
  EXPECT_EQ(stem(std::string("a\0b", 3)), "a%00b");
  for (const std::string id : {"../evil", "..", ".", "/", "a/../../b", "\x7f", "\xc3\xa9", " "})
    EXPECT_TRUE(plain(stem(id))) << id << " -> " << stem(id);
}

TEST(ExportNames, NoTwoSamplesShareAName) {
  // Ids that a careless escape would merge, an id naming another sample's index, and long
  // ids that differ only after the cut.
  const std::string long_a = std::string(300, 'a') + "1", long_b = std::string(300, 'a') + "2";
  const std::string long_e = std::string(150, '\xe9');  // escapes to 450 bytes
  std::set<std::string> names;
  std::vector<std::string> ids{"a/b", "a%2Fb", "a_2Fb", "00000003", "%300000003", "0000003", "x.y", "x%2Ey",
                               long_a, long_b, long_e, long_e + "x"};
  for (const std::string& id : ids) {
    const std::string s = stem(id);
    EXPECT_TRUE(plain(s)) << id << " -> " << s;
    EXPECT_TRUE(names.insert(s).second) << id << " shares the name " << s;
  }
  EXPECT_TRUE(names.insert(modelopt_file_stem(3, nullptr)).second) << "an id took the name of sample 3 without one";
  EXPECT_EQ(stem("00000003"), "%300000003");
  EXPECT_LE(stem(long_e).size(), 200u);
}

TEST(ExportNames, TrainerLayouts) {
  EXPECT_EQ(speculators_file(0), "hidden_states/hs_0.safetensors");
  EXPECT_EQ(speculators_file(12345), "hidden_states/hs_12345.safetensors");
  EXPECT_EQ(specforge_file(0), "rows_0-2000/data_0.ckpt");
  EXPECT_EQ(specforge_file(1999), "rows_0-2000/data_1999.ckpt");
  EXPECT_EQ(specforge_file(2000), "rows_2000-4000/data_2000.ckpt");
  EXPECT_EQ(specforge_file(4001), "rows_4000-6000/data_4001.ckpt");
}

TEST(ExportNames, FormatNames) {
  EXPECT_EQ(e3::value_named<e3::jobs::ExportFormat>("specforge"), e3::jobs::ExportFormat::SpecForge);
  EXPECT_EQ(e3::name_of(e3::jobs::ExportFormat::ModelOpt), "modelopt");
  EXPECT_EQ(e3::valid_names<e3::jobs::ExportFormat>(), "speculators, specforge or modelopt");
  EXPECT_THROW(e3::parse_named<e3::jobs::ExportFormat>("eagle", "--format"), e3::Error);
}
