// The JSONL dataset: validation up front with FILE:LINE errors, --on-long policies, and
// re-reading samples by byte offset.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "io/dataset.h"
#include "core/error.h"
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

TEST_F(DatasetTest, UnknownKeysAreErrorsWithTheLikelyKey) {
  struct Case {
    const char* line;
    const char* message;
  };
  const std::vector<Case> cases = {
      {R"({"input_ids": [1, 2, 3], "lossmask": [0, 0, 1]})", "unknown key \"lossmask\": did you mean \"loss_mask\"?"},
      {R"({"input_ids": [1], "lossMask": [1]})", "unknown key \"lossMask\": did you mean \"loss_mask\"?"},
      {R"({"input_id": [1]})", "unknown key \"input_id\": did you mean \"input_ids\"?"},
      {R"({"ID": "a", "input_ids": [1]})", "unknown key \"ID\": did you mean \"id\"?"},
      {R"({"tokens": [1]})", "unknown key \"tokens\": did you mean \"input_ids\"?"},
      {R"({"ids": [1]})", "unknown key \"ids\": did you mean \"input_ids\"?"},
      {R"({"input_ids": [1], "lossmsk": [1]})", "unknown key \"lossmsk\": did you mean \"loss_mask\"?"},
      {R"({"input_ids": [1], "x": 1})", "unknown key \"x\" (a sample holds only"},
      {R"({"input_ids": [1], "labels": [-100]})", "unknown key \"labels\": give \"loss_mask\" instead"},
      {R"({"input_ids": [1], "attention_mask": [1]})", "unknown key \"attention_mask\": drop it"},
      {R"({"input_ids": [1], "source": "web"})",
       "unknown key \"source\" (a sample holds only \"id\", \"input_ids\", \"loss_mask\")"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.line);
    expect_error_at(std::string("{\"input_ids\": [1]}\n\n") + c.line + "\n", 3, c.message);
  }
}

TEST_F(DatasetTest, TextWithoutATokenizerIsAnError) {
  // Without load_chat (as a caller with no tokenizer): text is refused, naming the line.
  const char* none = "this line holds text, which needs the model's tokenizer; none is given here";
  expect_error_at(R"({"text": "Hello there"})" "\n", 1, none);
  expect_error_at(R"({"messages": [{"role": "user", "content": "hi"}]})" "\n", 1, none);
  expect_error_at(R"({"input_ids": [1]})" "\n" R"({"id": "c", "conversations": [{"from": "human", "value": "hi"}]})" "\n",
                  2, none);
  // A line that kept its text beside tokens must not pass.
  expect_error_at(R"({"input_ids": [1], "text": "hi"})" "\n", 1,
                  "a line holds one of \"input_ids\", \"messages\", \"conversations\" or \"text\", not several");
}

TEST_F(DatasetTest, IdOfMoreThan4096BytesIsAnError) {
  const std::string ok(4096, 'a');
  const std::string too_long(4097, 'b');
  write("{\"id\": \"" + ok + "\", \"input_ids\": [1]}\n");
  EXPECT_EQ(Dataset::open(path_, options()).samples().at(0).id, ok);
  expect_error_at("{\"id\": \"a\", \"input_ids\": [1]}\n{\"id\": \"" + too_long + "\", \"input_ids\": [1]}\n", 2,
                  "\"id\" is 4097 bytes long, more than 4096 allowed");
  auto err = error_of([&] { Dataset::open(path_, options()); });
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(std::string(err->what()).find(too_long), std::string::npos) << "the message quotes the whole id";
}

// Ids equal up to a NUL would collide where the id is a C string (HDF5 attributes, file names),
// and an id holding a newline and an escape sequence would print a fake log line: refused.
TEST_F(DatasetTest, IdsWithControlCharactersAreErrors) {
  const std::string good = "{\"id\": \"a\", \"input_ids\": [1]}\n";
  expect_error_at(good + R"({"id": "a\u0000b", "input_ids": [1]})" "\n", 2,
                  R"("id" "a\u0000b" holds the control character \u0000 at byte 2)");
  expect_error_at(good + R"({"id": "x\n[r0/1] critical: \u001b[31m", "input_ids": [1]})" "\n", 2,
                  R"("id" "x\n[r0/1] critical: \u001b[31m" holds the control character \n at byte 2)");
  expect_error_at(good + R"({"id": "tab\there", "input_ids": [1]})" "\n", 2, "control character \\t at byte 4");
  expect_error_at(good + R"({"id": "del\u007f", "input_ids": [1]})" "\n", 2, "control character \\u007f at byte 4");
  expect_error_at(good + R"({"id": "c1\u009b", "input_ids": [1]})" "\n", 2, "control character \\u009b at byte 3");
  // Every bad id of the file is named, and no message carries the raw character.
  write(R"({"id": "a\u0000b", "input_ids": [1]})" "\n" R"({"id": "a\u0000c", "input_ids": [1]})" "\n");
  const auto err = error_of([&] { Dataset::open(path_, options()); });
  ASSERT_TRUE(err.has_value());
  const std::string what = err->what();
  EXPECT_TRUE(Contains(what, path_.string() + ":2: \"id\" \"a\\u0000c\"")) << what;
  EXPECT_EQ(what.find('\0'), std::string::npos);
  // Printable text beyond ASCII stays an id.
  write("{\"id\": \"caf\xc3\xa9 \\u00a0\xe2\x82\xac\", \"input_ids\": [1]}\n");
  EXPECT_EQ(Dataset::open(path_, options()).samples().at(0).id, "caf\xc3\xa9 \xc2\xa0\xe2\x82\xac");
}

// The JSON parser stops at a NUL as at the end of its input: the rest of the line was dropped.
TEST_F(DatasetTest, ARawNulByteInALineIsAnError) {
  const std::string nul(1, '\0');
  expect_error_at("{\"input_ids\": [1]}\n{\"input_ids\": [1]}" + nul + "{\"loss_mask\": [0]}\n", 2,
                  "a raw NUL byte at column 19");
  expect_error_at("{\"input_ids\": [1, 2]" + nul + ", \"loss_mask\": [0]}\n", 1, "a raw NUL byte at column 21");
}

TEST_F(DatasetTest, ARawNulByteWrittenAfterTheCheckIsAnErrorOnReRead) {
  write("{\"input_ids\": [1]}\n{\"input_ids\": [2, 3]}   \n");
  const Dataset ds = Dataset::open(path_, options());
  // The same length, so only the bytes tell the change: a NUL after the sample's last key.
  write("{\"input_ids\": [1]}\n{\"input_ids\": [2, 3]}" + std::string(1, '\0') + "  \n");
  const auto err = error_of([&] { read(ds, 1); });
  ASSERT_TRUE(err.has_value()) << "the re-read dropped the rest of the line silently";
  EXPECT_EQ(err->kind(), ErrorKind::Input);
  EXPECT_TRUE(Contains(err->what(), path_.string() + ":2: a raw NUL byte at column 22")) << err->what();
}

TEST_F(DatasetTest, DuplicateKeysAreErrors) {
  expect_error_at(R"({"input_ids": [1, 2], "input_ids": [3]})" "\n", 1, "duplicate key \"input_ids\"");
  expect_error_at(R"({"id": "a", "loss_mask": [1], "input_ids": [1], "loss_mask": [0]})" "\n", 1,
                  "duplicate key \"loss_mask\"");
  // The same key in two objects is not a duplicate: the check is per object.
  expect_error_at(R"({"input_ids": [1], "id": {"a": 1}, "x": {"a": 2}})" "\n", 1, "unknown key \"x\"");
}

TEST_F(DatasetTest, DeepNestingIsAnErrorNotACrash) {
  const std::string open_brackets(100000, '[');
  const std::string close_brackets(100000, ']');
  expect_error_at(open_brackets + "\n", 1, "JSON nested more than 64 levels deep");
  expect_error_at("{\"input_ids\": " + open_brackets + "1" + close_brackets + "}\n", 1,
                  "JSON nested more than 64 levels deep");
  expect_error_at("{\"id\": " + open_brackets + close_brackets + ", \"input_ids\": [1]}\n", 1, "nested");
  // Within the bound, a nested value is quoted in the message, cut short.
  const std::string deep = std::string(60, '[') + "7" + std::string(60, ']');
  expect_error_at("{\"input_ids\": [1, " + deep + "]}\n", 1, "input_ids[1] is [[[[");
}

TEST_F(DatasetTest, QuotedValuesAreCutShort) {
  const std::string big(100000, 'x');
  write("{\"input_ids\": [1, \"" + big + "\"]}\n{\"input_ids\": [1], \"" + big + "\": 1}\n{\"input_ids\": [1, " + big +
        "]}\n");
  auto err = error_of([&] { Dataset::open(path_, options()); });
  ASSERT_TRUE(err.has_value());
  EXPECT_LT(std::string(err->what()).size(), 2000u) << err->what();
  EXPECT_TRUE(Contains(err->what(), path_.string() + ":1: input_ids[1] is \"xxx"));
  EXPECT_TRUE(Contains(err->what(), "(100002 bytes)"));
  EXPECT_TRUE(Contains(err->what(), path_.string() + ":2: unknown key \"xxx"));
  EXPECT_TRUE(Contains(err->what(), path_.string() + ":3: invalid JSON"));
}

TEST_F(DatasetTest, NumbersOutOfRangeAreInputErrors) {
  expect_error_at(R"({"input_ids": [1e400]})" "\n", 1, "invalid JSON value");
  expect_error_at(R"({"input_ids": [1], "loss_mask": [-1e999]})" "\n", 1, "1e999");
  expect_error_at(R"({"id": 1e400, "input_ids": [1]})" "\n", 1, "number overflow");
  // Past int64 but within uint64: must not wrap around to a valid-looking token id.
  expect_error_at(R"({"input_ids": [18446744073709551615]})" "\n", 1,
                  "token id 18446744073709551615 at input_ids[0] is outside the vocabulary");
  expect_error_at(R"({"input_ids": [18446744073709551616]})" "\n", 1, "input_ids[0] is 1.8446744073709552e+19, not an integer");
}

TEST_F(DatasetTest, AllBadLinesOfTheFileAreReportedUpToTwenty) {
  std::string text;
  for (int i = 0; i < 30; ++i) text += i % 5 == 0 ? "{\"input_ids\": [1]}\n" : "{\"input_ids\": [" + std::to_string(100 + i) + "]}\n";
  // Lines 2-5, 7-10, ...: 24 bad lines, the 20th of them on line 25.
  write(text);
  auto err = error_of([&] { Dataset::open(path_, options()); });
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->kind(), ErrorKind::Input);
  const std::string what = err->what();
  const std::string p = path_.string();
  EXPECT_EQ(what.rfind(p + ":2: token id 101 at input_ids[0]", 0), 0u) << what;
  EXPECT_TRUE(Contains(what, "\n" + p + ":3: token id 102 "));
  EXPECT_TRUE(Contains(what, "\n" + p + ":25: token id 124 "));
  EXPECT_FALSE(Contains(what, p + ":27:"));
  EXPECT_FALSE(Contains(what, p + ":6:"));  // a good line
  EXPECT_TRUE(Contains(what, "\nand 4 more bad lines (24 in all)"));
  EXPECT_EQ(std::count(what.begin(), what.end(), '\n'), 20);

  // Different faults, each named on its own line, and no "more" when all fit.
  write("{\"input_ids\": [1]}\n{\"input_ids\": [1], \"lossmask\": [1]}\n{\"id\": \"a\", \"input_ids\": [1]}\n"
        "{\"id\": \"a\", \"input_ids\": [2]}\n{\"input_ids\": [1, 2\n");
  err = error_of([&] { Dataset::open(path_, options()); });
  ASSERT_TRUE(err.has_value());
  EXPECT_TRUE(Contains(err->what(), p + ":2: unknown key \"lossmask\""));
  EXPECT_TRUE(Contains(err->what(), "\n" + p + ":4: duplicate id \"a\" (first seen at line 3)"));
  EXPECT_TRUE(Contains(err->what(), "\n" + p + ":5: invalid JSON"));
  EXPECT_FALSE(Contains(err->what(), "more bad line"));
}

TEST_F(DatasetTest, AFileWithoutSamplesIsAnError) {
  for (const char* text : {"", "\n", "  \n\t\r\n\n"}) {
    SCOPED_TRACE(testing::PrintToString(text));
    write(text);
    auto err = error_of([&] { Dataset::open(path_, options()); });
    ASSERT_TRUE(err.has_value());
    EXPECT_EQ(err->kind(), ErrorKind::Input);
    EXPECT_TRUE(Contains(err->what(), path_.string() + ": no samples: the file is empty or holds only blank lines"));
  }
}

TEST_F(DatasetTest, ADirectoryIsRefused) {
  auto err = error_of([&] { Dataset::open(dir_.path(), options()); });
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->kind(), ErrorKind::Input);
  EXPECT_TRUE(Contains(err->what(), "--data " + dir_.path().string() + " is a directory"));
}

TEST_F(DatasetTest, AFifoIsRefusedWithoutWaitingForAWriter) {
  const std::filesystem::path fifo = dir_ / "pipe.jsonl";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // A writer that waits for any reader and then closes: a reader that blocked in open() is
  // released (and sees end of file) rather than hanging the test.
  std::thread writer([&] {
    const int fd = ::open(fifo.c_str(), O_WRONLY);
    if (fd >= 0) ::close(fd);
  });
  auto err = error_of([&] { Dataset::open(fifo, options()); });
  // Releases the writer whatever open() did.
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  writer.join();
  if (reader >= 0) ::close(reader);
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->kind(), ErrorKind::Input);
  EXPECT_TRUE(Contains(err->what(), "--data " + fifo.string() + " is not a regular file (a FIFO)"));
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
  EXPECT_EQ(e3::value_named<OnLong>("skip"), OnLong::Skip);
  EXPECT_EQ(e3::value_named<OnLong>("truncate"), OnLong::Truncate);
  EXPECT_EQ(e3::value_named<OnLong>("error"), OnLong::Error);
  EXPECT_EQ(e3::name_of(OnLong::Truncate), "truncate");
  auto err = error_of([] { e3::parse_named<OnLong>("drop", "--on-long"); });
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->kind(), ErrorKind::Usage);
  EXPECT_STREQ(err->what(), "--on-long: must be skip, truncate or error, not 'drop'");
}

}  // namespace
