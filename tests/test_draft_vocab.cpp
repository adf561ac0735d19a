// The draft vocabulary export writes: the N most often masked ids (ties: the lower id), the
// lowest uncounted ids when too few are masked, the bounds of N, EAGLE-3's d2t and t2d, and
// each format's files, the same bytes every time. tests/trainers/check_export.py reads the files
// back with the trainers' own loading code.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "jobs/draft_vocab.h"
#include "support/test_support.h"

namespace {

namespace fs = std::filesystem;
using e3::ErrorKind;
using e3::io::TokenCount;
using e3::jobs::choose_draft_vocab;
using e3::jobs::ExportFormat;

const std::vector<TokenCount> kCounts = {{1, 3}, {2, 3}, {5, 3}, {7, 2}, {9, 1}, {30, 4}};

TEST(DraftVocab, TheMostFrequentIdsWithTiesToTheLowerId) {
  // 30 (4), then 1, 2, 5 (3 each: lower id first), then 7 (2), 9 (1).
  const auto v = choose_draft_vocab(kCounts, 3, 64);
  EXPECT_EQ(v.by_frequency, (std::vector<int64_t>{30, 1, 2}));
  EXPECT_EQ(v.ascending, (std::vector<int64_t>{1, 2, 30}));
  EXPECT_EQ(v.masked_tokens, 16);
  EXPECT_EQ(v.covered, 10);
  EXPECT_EQ(v.distinct, 6);
  EXPECT_EQ(v.filled, 0);
  EXPECT_EQ(choose_draft_vocab(kCounts, 4, 64).by_frequency, (std::vector<int64_t>{30, 1, 2, 5}));
  EXPECT_EQ(choose_draft_vocab(kCounts, 5, 64).by_frequency, (std::vector<int64_t>{30, 1, 2, 5, 7}));
  // The order the counts come in does not matter.
  std::vector<TokenCount> reversed(kCounts.rbegin(), kCounts.rend());
  EXPECT_EQ(choose_draft_vocab(reversed, 3, 64).by_frequency, (std::vector<int64_t>{30, 1, 2}));
}

TEST(DraftVocab, TooFewMaskedIdsAreFilledWithTheLowestUncountedIds) {
  // 6 distinct ids for 9 places: 0, 3, 4 are the lowest ids not counted (1 and 2 are).
  const auto v = choose_draft_vocab(kCounts, 9, 64);
  EXPECT_EQ(v.by_frequency, (std::vector<int64_t>{30, 1, 2, 5, 7, 9, 0, 3, 4}));
  EXPECT_EQ(v.ascending, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 7, 9, 30}));
  EXPECT_EQ(v.filled, 3);
  EXPECT_EQ(v.covered, v.masked_tokens);
  // Nothing masked at all: ids 0..N-1.
  const auto none = choose_draft_vocab({}, 4, 64);
  EXPECT_EQ(none.ascending, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(none.filled, 4);
  EXPECT_EQ(none.masked_tokens, 0);
}

TEST(DraftVocab, TheSizeMustLieBetweenOneAndTheTargetVocabulary) {
  for (const int64_t n : {int64_t{0}, int64_t{-3}, int64_t{65}}) {
    const auto e = e3::test::error_of([&] { choose_draft_vocab(kCounts, n, 64); });
    ASSERT_TRUE(e) << n;
    EXPECT_EQ(e->kind(), ErrorKind::Usage) << n;
    EXPECT_TRUE(e3::test::Contains(e->what(), "between 1 and the target's vocabulary size, 64 tokens")) << e->what();
  }
  // The whole vocabulary: every id, the identity mapping.
  const auto all = choose_draft_vocab(kCounts, 64, 64);
  ASSERT_EQ(all.ascending.size(), 64u);
  for (int64_t i = 0; i < 64; ++i) EXPECT_EQ(all.ascending[static_cast<size_t>(i)], i);
  EXPECT_EQ(e3::jobs::d2t_offsets(all.ascending), std::vector<int64_t>(64, 0));
}

TEST(DraftVocab, ACountedIdOutsideTheTargetVocabularyIsRefused) {
  const auto e = e3::test::error_of([&] { choose_draft_vocab(kCounts, 3, 30); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind(), ErrorKind::Verify);
  EXPECT_TRUE(e3::test::Contains(e->what(), "token id 30 is counted 4 times, but the target's vocabulary has 30 tokens"));
}

TEST(DraftVocab, D2tHoldsOffsetsAndT2dMarksTheChosenIds) {
  const std::vector<int64_t> ids = {0, 1, 2, 3, 4, 5, 7, 9, 30};
  EXPECT_EQ(e3::jobs::d2t_offsets(ids), (std::vector<int64_t>{0, 0, 0, 0, 0, 0, 1, 2, 22}));
  const std::vector<uint8_t> t2d = e3::jobs::t2d_mask(ids, 32);
  ASSERT_EQ(t2d.size(), 32u);
  for (int64_t i = 0; i < 32; ++i)
    EXPECT_EQ(t2d[static_cast<size_t>(i)], std::find(ids.begin(), ids.end(), i) != ids.end() ? 1 : 0) << i;
}

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(DraftVocab, EachFormatsFilesAreWrittenTheSameEveryTime) {
  const auto v = choose_draft_vocab(kCounts, 9, 64);
  for (const ExportFormat f : {ExportFormat::Speculators, ExportFormat::SpecForge, ExportFormat::ModelOpt}) {
    e3::test::TempDir a, b;
    e3::jobs::write_draft_vocab(f, a.path(), v);
    e3::jobs::write_draft_vocab(f, b.path(), v);
    for (const std::string& name : e3::jobs::draft_vocab_files(f)) {
      ASSERT_TRUE(fs::is_regular_file(a / name)) << name;
      EXPECT_EQ(bytes_of(a / name), bytes_of(b / name)) << name;
    }
    // Only those files (no temporary left); for ModelOpt none it would train on (every *.pt under DEST).
    size_t files = 0;
    for (const auto& e : fs::recursive_directory_iterator(a.path())) {
      if (!e.is_regular_file()) continue;
      ++files;
      if (f == ExportFormat::ModelOpt) {
        EXPECT_NE(e.path().extension(), ".pt") << e.path();
      }
    }
    EXPECT_EQ(files, e3::jobs::draft_vocab_files(f).size());
  }
  EXPECT_EQ(e3::jobs::draft_vocab_files(ExportFormat::Speculators), (std::vector<std::string>{"d2t.npy", "t2d.npy"}));
  EXPECT_EQ(e3::jobs::draft_vocab_files(ExportFormat::SpecForge),
            (std::vector<std::string>{"vocab_mapping/vocab_mapping.pt"}));
  EXPECT_EQ(e3::jobs::draft_vocab_files(ExportFormat::ModelOpt), (std::vector<std::string>{"d2t.pth"}));
}

TEST(DraftVocab, TheUsageNamesTheTrainersFlagsAndKeys) {
  const fs::path dest = "/scratch/x";
  EXPECT_TRUE(e3::test::Contains(e3::jobs::draft_vocab_usage(ExportFormat::Speculators, dest, 123),
                                 "--data-path /scratch/x (or give --d2t-path and --t2d-path); pass --draft-vocab-size 123"));
  EXPECT_TRUE(e3::test::Contains(e3::jobs::draft_vocab_usage(ExportFormat::SpecForge, dest, 123),
                                 "model.vocab_mapping_path=/scratch/x/vocab_mapping/vocab_mapping.pt"));
  EXPECT_TRUE(e3::test::Contains(e3::jobs::draft_vocab_usage(ExportFormat::ModelOpt, dest, 123),
                                 "data.draft_vocab_cache=/scratch/x/d2t.pth "
                                 "eagle.eagle_architecture_config.draft_vocab_size=123"));
}

}  // namespace
