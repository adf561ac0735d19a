#include <gtest/gtest.h>

#include "core/error.h"

TEST(Error, DescribeCarriesRankKindAndPlace) {
  e3::Error e(e3::ErrorKind::Input, "data.jsonl:3: bad", "io/dataset.cpp", 42);
  e.set_rank(3);
  // A user-facing error says what is wrong, not where the code noticed (issue 20)...
  EXPECT_EQ(e.describe(), "rank 3: input error: data.jsonl:3: bad");
  // ...unless asked (--log-level debug).
  EXPECT_EQ(e.describe(true), "rank 3: input error: data.jsonl:3: bad (io/dataset.cpp:42)");
  EXPECT_EQ(e3::exit_code(e.kind()), 3);
  // A bug always names its place.
  const e3::Error bug(e3::ErrorKind::Internal, "stoll", "io/shard_reader.cpp", 7);
  EXPECT_EQ(bug.describe(), "internal error: stoll (io/shard_reader.cpp:7)");
}

TEST(Printable, EscapesControlCharactersAndBytesThatAreNotUtf8) {
  EXPECT_EQ(e3::printable("plain id: caf\xc3\xa9 \xe2\x82\xac \\ \"q\""), "plain id: caf\xc3\xa9 \xe2\x82\xac \\ \"q\"");
  EXPECT_EQ(e3::printable(std::string("a\0b", 3)), "a\\u0000b");
  // The id that printed a fake critical line: a newline and a terminal escape sequence.
  EXPECT_EQ(e3::printable("x\n2024-01-01 00:00:00.000 [r0/1] critical: \x1b[31mboom\r\t"),
            "x\\n2024-01-01 00:00:00.000 [r0/1] critical: \\u001b[31mboom\\r\\t");
  EXPECT_EQ(e3::printable("\x7f"), "\\u007f");
  EXPECT_EQ(e3::printable("\xc2\x9b" "1m \xc2\xa0"), "\\u009b1m \xc2\xa0");  // C1 CSI escaped, NBSP kept
  EXPECT_EQ(e3::printable("\xff\xc3"), "\\xff\\xc3");                     // not UTF-8, truncated
  EXPECT_EQ(e3::printable("\xc0\xaf\xed\xa0\x80"), "\\xc0\\xaf\\xed\\xa0\\x80");  // overlong, surrogate
  EXPECT_EQ(e3::printable("\xf0\x9f\x98\x80"), "\xf0\x9f\x98\x80");
}
