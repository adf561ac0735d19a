// The JSONL dataset: validation up front with FILE:LINE errors, --on-long policies, and
// re-reading samples by byte offset.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "io/dataset.h"
#include "kernels/error.h"
#include "support/test_support.h"

namespace {

using e3::ErrorKind;
using e3::io::Dataset;
using e3::io::DatasetOptions;
using e3::io::OnLong;
using e3::io::SampleRecord;
using e3::test::TempDir;
using e3::test::write_text;

using e3::test::Contains;
using e3::test::error_of;

DatasetOptions options(int64_t vocab = 100, int64_t max_seq_len = 1000, OnLong on_long = OnLong::Skip) {
  DatasetOptions o;
  o.vocab_size = vocab;
  o.max_seq_len = max_seq_len;
  o.on_long = on_long;
  return o;
}

struct Sample {
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;
};

Sample read(const Dataset& ds, size_t k) {
  Sample s;
  ds.read(ds.samples().at(k), s.ids, s.mask);
  return s;
}

class DatasetTest : public ::testing::Test {
 protected:
  std::filesystem::path write(const std::string& text) {
    write_text(path_, text);
    return path_;
  }

  // Expects opening `text` to fail with an input error starting "FILE:LINE: " and holding `part`.
  void expect_error_at(const std::string& text, int line, const std::string& part,
                       const DatasetOptions& o = options()) {
    write(text);
    auto err = error_of([&] { Dataset::open(path_, o); });
    ASSERT_TRUE(err.has_value()) << "no error for:\n" << text;
    EXPECT_EQ(err->kind(), ErrorKind::Input);
    const std::string prefix = path_.string() + ":" + std::to_string(line) + ": ";
    EXPECT_EQ(std::string(err->what()).rfind(prefix, 0), 0u) << err->what() << "\nshould start with " << prefix;
    EXPECT_TRUE(Contains(err->what(), part));
  }

  TempDir dir_;
  std::filesystem::path path_ = dir_ / "data.jsonl";
};

TEST_F(DatasetTest, ValidFile) {
  write(R"({"id": "a", "input_ids": [1, 2, 3], "loss_mask": [0, 1, 1]}
{"id": "b", "input_ids": [99], "loss_mask": [1]}
{"id": "c", "input_ids": [0, 50, 7, 7], "loss_mask": [true, false, 1, 0]}
)");
  const Dataset ds = Dataset::open(path_, options());
  EXPECT_EQ(ds.path(), path_);
  ASSERT_EQ(ds.samples().size(), 3u);
  EXPECT_EQ(ds.num_skipped(), 0);
  EXPECT_EQ(ds.num_truncated(), 0);

  const SampleRecord& a = ds.samples()[0];
  EXPECT_EQ(a.index, 0);
  EXPECT_EQ(a.line, 1);
  EXPECT_EQ(a.offset, 0u);
  EXPECT_TRUE(a.has_id);
  EXPECT_EQ(a.id, "a");
  EXPECT_EQ(a.num_tokens, 3);
  EXPECT_EQ(a.original_tokens, 3);
  EXPECT_FALSE(a.skipped);
  EXPECT_EQ(ds.samples()[1].id, "b");
  EXPECT_EQ(ds.samples()[2].num_tokens, 4);

  const Sample s0 = read(ds, 0);
  EXPECT_EQ(s0.ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(s0.mask, (std::vector<uint8_t>{0, 1, 1}));
  const Sample s2 = read(ds, 2);
  EXPECT_EQ(s2.ids, (std::vector<int32_t>{0, 50, 7, 7}));
  EXPECT_EQ(s2.mask, (std::vector<uint8_t>{1, 0, 1, 0}));
}

TEST_F(DatasetTest, SamplesWithoutId) {
  write("{\"input_ids\": [5]}\n{\"id\": null, \"input_ids\": [6]}\n");
  const Dataset ds = Dataset::open(path_, options());
  ASSERT_EQ(ds.samples().size(), 2u);
  EXPECT_FALSE(ds.samples()[0].has_id);
  EXPECT_FALSE(ds.samples()[1].has_id);
}

TEST_F(DatasetTest, BlankLinesAreSkippedButCountedAsLines) {
  write("\n{\"input_ids\": [1]}\n   \n\t\n{\"input_ids\": [2, 3]}\n\n");
  const Dataset ds = Dataset::open(path_, options());
  ASSERT_EQ(ds.samples().size(), 2u);
  EXPECT_EQ(ds.samples()[0].index, 0);
  EXPECT_EQ(ds.samples()[0].line, 2);
  EXPECT_EQ(ds.samples()[1].index, 1);
  EXPECT_EQ(ds.samples()[1].line, 5);
  EXPECT_EQ(read(ds, 1).ids, (std::vector<int32_t>{2, 3}));
}

TEST_F(DatasetTest, ErrorLineIsThePhysicalLine) {
  expect_error_at("\n{\"input_ids\": [1]}\n\n\n{\"input_ids\": [1], oops}\n", 5, "invalid JSON");
}

TEST_F(DatasetTest, LossMaskDefaultsToOnes) {
  write("{\"input_ids\": [4, 5, 6]}\n{\"input_ids\": [7, 8], \"loss_mask\": null}\n");
  const Dataset ds = Dataset::open(path_, options());
  EXPECT_EQ(read(ds, 0).mask, (std::vector<uint8_t>{1, 1, 1}));
  EXPECT_EQ(read(ds, 1).mask, (std::vector<uint8_t>{1, 1}));
}

TEST_F(DatasetTest, BadLinesAreReportedAsFileAndLine) {
  struct Case {
    const char* line;
    const char* message;
  };
  const std::vector<Case> cases = {
      {R"({"input_ids": [1, 2)", "invalid JSON"},
      {R"([1, 2, 3])", "a sample must be a JSON object"},
      {R"({"input_ids": [1, 100, 2]})", "token id 100 at input_ids[1] is outside the vocabulary [0, 100)"},
      {R"({"input_ids": [1, 2, -1]})", "token id -1 at input_ids[2] is outside the vocabulary"},
      {R"({"input_ids": [1, 2.5]})", "input_ids[1] is 2.5, not an integer"},
      {R"({"input_ids": [1, 2, 3], "loss_mask": [1, 1]})", "loss_mask has 2 entries but input_ids has 3"},
      {R"({"input_ids": [1, 2, 3], "loss_mask": [1, 2, 0]})", "loss_mask[1] is 2, not 0 or 1"},
      {R"({"input_ids": []})", "empty sample"},
      {R"({"id": "x", "loss_mask": [1]})", "missing \"input_ids\""},
      {R"({"input_ids": "1 2 3"})", "\"input_ids\" must be an array"},
      {R"({"id": [1], "input_ids": [1]})", "\"id\" must be a string"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.line);
    // A good line and a blank line first, so the bad one is physical line 3 but sample 1.
    expect_error_at(std::string("{\"input_ids\": [1]}\n\n") + c.line + "\n", 3, c.message);
  }
}

TEST_F(DatasetTest, DuplicateIdNamesTheFirstLine) {
  expect_error_at(
      "\n{\"id\": \"x\", \"input_ids\": [1]}\n{\"id\": \"y\", \"input_ids\": [1]}\n\n{\"id\": \"x\", \"input_ids\": [2]}\n",
      5, "duplicate id \"x\" (first seen at line 2)");
}

TEST_F(DatasetTest, MissingFile) {
  auto err = error_of([&] { Dataset::open(dir_ / "absent.jsonl", options()); });
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->kind(), ErrorKind::Input);
  EXPECT_TRUE(Contains(err->what(), (dir_ / "absent.jsonl").string()));
}

// Three samples of 3, 5 and 4 tokens against --max-seq-len 4.
const char* kMixedLengths =
    "{\"id\": \"short\", \"input_ids\": [1, 2, 3]}\n"
    "{\"id\": \"long\", \"input_ids\": [10, 11, 12, 13, 14], \"loss_mask\": [0, 1, 0, 1, 1]}\n"
    "{\"id\": \"exact\", \"input_ids\": [20, 21, 22, 23]}\n";

TEST_F(DatasetTest, OnLongSkip) {
  write(kMixedLengths);
  const Dataset ds = Dataset::open(path_, options(100, 4, OnLong::Skip));
  ASSERT_EQ(ds.samples().size(), 3u);
  EXPECT_EQ(ds.num_skipped(), 1);
  EXPECT_EQ(ds.num_truncated(), 0);
  EXPECT_FALSE(ds.samples()[0].skipped);
  EXPECT_TRUE(ds.samples()[1].skipped);
  EXPECT_EQ(ds.samples()[1].num_tokens, 0);
  EXPECT_EQ(ds.samples()[1].original_tokens, 5);
  EXPECT_FALSE(ds.samples()[2].skipped);  // exactly --max-seq-len is not too long
  EXPECT_EQ(ds.samples()[2].num_tokens, 4);
}

TEST_F(DatasetTest, OnLongTruncate) {
  write(kMixedLengths);
  const Dataset ds = Dataset::open(path_, options(100, 4, OnLong::Truncate));
  EXPECT_EQ(ds.num_skipped(), 0);
  EXPECT_EQ(ds.num_truncated(), 1);
  const SampleRecord& rec = ds.samples()[1];
  EXPECT_FALSE(rec.skipped);
  EXPECT_EQ(rec.num_tokens, 4);
  EXPECT_EQ(rec.original_tokens, 5);
  const Sample s = read(ds, 1);
  EXPECT_EQ(s.ids, (std::vector<int32_t>{10, 11, 12, 13}));
  EXPECT_EQ(s.mask, (std::vector<uint8_t>{0, 1, 0, 1}));
}

TEST_F(DatasetTest, OnLongError) {
  expect_error_at(kMixedLengths, 2, "sample has 5 tokens, more than --max-seq-len 4",
                  options(100, 4, OnLong::Error));
}

TEST_F(DatasetTest, ReadInAnyOrder) {
  write(std::string("\n") + kMixedLengths);
  const Dataset ds = Dataset::open(path_, options());
  EXPECT_EQ(read(ds, 2).ids, (std::vector<int32_t>{20, 21, 22, 23}));
  EXPECT_EQ(read(ds, 0).ids, (std::vector<int32_t>{1, 2, 3}));
  const Sample s1 = read(ds, 1);
  EXPECT_EQ(s1.ids, (std::vector<int32_t>{10, 11, 12, 13, 14}));
  EXPECT_EQ(s1.mask, (std::vector<uint8_t>{0, 1, 0, 1, 1}));
  EXPECT_EQ(read(ds, 2).mask, (std::vector<uint8_t>{1, 1, 1, 1}));
}

TEST_F(DatasetTest, CrlfAndNoFinalNewline) {
  write("{\"input_ids\": [1, 2]}\r\n\r\n{\"input_ids\": [3, 4, 5]}");
  const Dataset ds = Dataset::open(path_, options());
  ASSERT_EQ(ds.samples().size(), 2u);
  EXPECT_EQ(ds.samples()[1].line, 3);
  EXPECT_EQ(read(ds, 0).ids, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(read(ds, 1).ids, (std::vector<int32_t>{3, 4, 5}));
}

TEST(DatasetGolden, TinyLlamaInput) {
  const Dataset ds = Dataset::open(e3::test::golden_case("tiny_llama_default") / "input.jsonl", options(512));
  ASSERT_GE(ds.samples().size(), 2u);
  EXPECT_EQ(ds.samples()[0].id, "s0");
  EXPECT_EQ(ds.samples()[1].id, "s1");
  Sample s;
  ds.read(ds.samples()[1], s.ids, s.mask);
  ASSERT_EQ(s.ids.size(), 33u);
  EXPECT_EQ(s.ids.front(), 421);
  EXPECT_EQ(s.ids.back(), 219);
  ds.read(ds.samples()[0], s.ids, s.mask);
  EXPECT_EQ(s.ids, (std::vector<int32_t>{255, 191, 405, 241, 220, 204, 119}));
  EXPECT_EQ(s.mask, (std::vector<uint8_t>{0, 0, 0, 1, 1, 1, 1}));
}

TEST(DatasetOnLong, ParseAndName) {
  EXPECT_EQ(e3::io::parse_on_long("skip"), OnLong::Skip);
  EXPECT_EQ(e3::io::parse_on_long("truncate"), OnLong::Truncate);
  EXPECT_EQ(e3::io::parse_on_long("error"), OnLong::Error);
  EXPECT_STREQ(e3::io::on_long_name(OnLong::Truncate), "truncate");
  auto err = error_of([] { e3::io::parse_on_long("drop"); });
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->kind(), ErrorKind::Usage);
  EXPECT_TRUE(Contains(err->what(), "'drop'"));
}

}  // namespace
