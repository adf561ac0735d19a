// The counts of masked tokens each shard stores (/token_counts): what is counted, how the
// table is written and read back, that the committer's shards hold the same counts however the
// samples were packed into steps, and that verify finds a table that does not match its
// samples (and accepts a shard written before tables existed).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <vector>

#include <fmt/format.h>

#include "io/hdf5.h"
#include "io/manifest.h"
#include "io/shard_reader.h"
#include "io/shard_writer.h"
#include "io/token_counts.h"
#include "io/verify.h"
#include "jobs/step_writer.h"
#include "support/shard_samples.h"
#include "support/step_rig.h"
#include "support/test_support.h"

namespace {

namespace fs = std::filesystem;
using e3::ErrorKind;
using e3::io::TokenCount;
using e3::io::TokenCounter;
using e3::test::Contains;
using e3::test::TempDir;

std::vector<TokenCount> stored_counts(const fs::path& shard) {
  const auto layout = e3::io::read_shard_layout(shard);
  EXPECT_TRUE(layout.token_counts.has_value()) << shard;
  return layout.token_counts ? layout.token_counts->counts : std::vector<TokenCount>{};
}

TEST(TokenCounter, CountsOnlyMaskedTokensIdsAscending) {
  TokenCounter c;
  c.add(std::vector<int32_t>{5, 3, 5, 9, 3, 0}, std::vector<uint8_t>{1, 1, 1, 0, 0, 1});
  c.add(std::vector<int32_t>{9, 5}, std::vector<uint8_t>{1, 1});
  EXPECT_EQ(c.counts(), (std::vector<TokenCount>{{0, 1}, {3, 1}, {5, 3}, {9, 1}}));
  EXPECT_EQ(c.total(), 6);
  // Another's counts add to these.
  c.add(std::vector<TokenCount>{{3, 4}, {100, 2}});
  EXPECT_EQ(c.counts(), (std::vector<TokenCount>{{0, 1}, {3, 5}, {5, 3}, {9, 1}, {100, 2}}));
  EXPECT_EQ(c.total(), 12);
}

TEST(TokenCounter, ANegativeIdIsACallersBug) {
  TokenCounter c;
  const auto e = e3::test::error_of([&] { c.add(std::vector<int32_t>{-1}, std::vector<uint8_t>{1}); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind(), ErrorKind::Internal);
  // A masked-out negative id is not counted, so not refused either.
  EXPECT_NO_THROW(c.add(std::vector<int32_t>{-1}, std::vector<uint8_t>{0}));
}

// The rig's run (one capture of 4 fp32 columns, no final state) with a 64-token vocabulary.
e3::io::ShardAttributes counted_attributes() {
  e3::io::ShardAttributes a = e3::test::rig_shard_attributes();
  a.vocab_size = 64;
  return a;
}

// Sample s: ids s, s + 1, ... (mod 64), masked from its second token on.
std::pair<std::vector<int32_t>, std::vector<uint8_t>> sample_tokens(int64_t s, int64_t T) {
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;
  for (int64_t t = 0; t < T; ++t) {
    ids.push_back(static_cast<int32_t>((s * 7 + t * t) % 64));
    mask.push_back(t == 0 ? 0 : 1);
  }
  return {ids, mask};
}

void write_samples(e3::io::ShardWriter& w, const std::vector<int64_t>& samples, int64_t T) {
  for (const int64_t s : samples) {
    const auto [ids, mask] = sample_tokens(s, T);
    const auto states = e3::test::random_floats(static_cast<size_t>(T * e3::test::kRigHidden), static_cast<uint64_t>(s));
    e3::test::write_float_sample(w, s, nullptr, ids, mask, {states.data()}, {});
  }
}

TEST(ShardTokenCounts, TheWriterStoresTheMaskedTokensOfItsWrittenSamples) {
  TempDir dir;
  e3::io::ShardWriter w(dir.path(), 0, counted_attributes());
  write_samples(w, {0, 1, 2}, 5);
  w.skip_sample({3, 4, "NaN"});  // not stored: not counted
  w.commit();
  TokenCounter want;
  for (int64_t s : {0, 1, 2}) {
    const auto [ids, mask] = sample_tokens(s, 5);
    want.add(ids, mask);
  }
  const fs::path shard = dir / e3::io::shard_file_name(0);
  EXPECT_EQ(stored_counts(shard), want.counts());
  EXPECT_EQ(e3::io::read_shard_layout(shard).token_counts->vocab_size, 64);
}

TEST(ShardTokenCounts, AShardWithoutMaskedTokensHoldsAnEmptyTable) {
  TempDir dir;
  e3::io::ShardWriter w(dir.path(), 0, e3::test::rig_shard_attributes());  // vocabulary size unknown
  const auto states = e3::test::random_floats(3 * e3::test::kRigHidden, 1);
  e3::test::write_float_sample(w, 0, nullptr, {4, 5, 6}, {0, 0, 0}, {states.data()}, {});
  w.commit();
  const auto layout = e3::io::read_shard_layout(dir / e3::io::shard_file_name(0));
  ASSERT_TRUE(layout.token_counts.has_value());
  EXPECT_TRUE(layout.token_counts->counts.empty());
  EXPECT_EQ(layout.token_counts->vocab_size, 0);
}

// A file holding only a /token_counts dataset of the given rows, type and vocabulary size.
fs::path table_file(const TempDir& dir, const std::vector<std::vector<int64_t>>& rows, hid_t type = H5T_STD_I64LE,
                    int64_t vocab_size = 0) {
  const fs::path path = dir / "t.h5";
  fs::remove(path);
  e3::io::H5Id f(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  const hsize_t dims[2] = {rows.size(), rows.empty() ? 2 : rows.front().size()};
  e3::io::H5Id space(H5Screate_simple(2, dims, nullptr), H5Sclose);
  e3::io::H5Id ds(H5Dcreate2(f.get(), "token_counts", type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                  H5Dclose);
  std::vector<int64_t> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  if (!flat.empty()) H5Dwrite(ds.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, flat.data());
  if (vocab_size > 0) e3::io::write_attr(ds.get(), "vocab_size", vocab_size);
  return path;
}

std::string read_error(const fs::path& path) {
  e3::io::H5Id f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  const auto e = e3::test::error_of([&] { e3::io::read_token_counts(f.get(), "t.h5", ErrorKind::Verify); });
  if (!e) return "read passed";
  EXPECT_EQ(e->kind(), ErrorKind::Verify) << e->what();
  return e->what();
}

TEST(ShardTokenCounts, ReadingRefusesATableThatCannotBeCounts) {
  e3::io::silence_hdf5_errors();
  TempDir dir;
  EXPECT_EQ(read_error(table_file(dir, {{1, 2}, {3, 4}}, H5T_STD_I64LE, 8)), "read passed");
  EXPECT_TRUE(Contains(read_error(table_file(dir, {{1, 2, 3}})), "must be int64 [n, 2]"));
  EXPECT_TRUE(Contains(read_error(table_file(dir, {{1, 2}}, H5T_STD_I32LE)), "must be int64 [n, 2]"));
  EXPECT_TRUE(Contains(read_error(table_file(dir, {{3, 2}, {1, 4}})), "does not come after token id 3"));
  EXPECT_TRUE(Contains(read_error(table_file(dir, {{3, 2}, {3, 4}})), "does not come after token id 3"));
  EXPECT_TRUE(Contains(read_error(table_file(dir, {{3, 0}})), "the count 0"));
  EXPECT_TRUE(Contains(read_error(table_file(dir, {{-1, 2}})), "token id -1"));
  EXPECT_TRUE(Contains(read_error(table_file(dir, {{8, 2}}, H5T_STD_I64LE, 8)), "outside the vocabulary of 8"));
}

// The committer writes the same shards, counts included, however the samples come in steps.
TEST(ShardTokenCounts, TheSameCountsWhateverThePackingOfSteps) {
  const std::vector<std::vector<std::pair<int64_t, int>>> packings = {
      {{0, 6}},                          // every sample in one step
      {{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}},  // one a step
      {{0, 2}, {2, 3}, {5, 1}},          // steps across shard boundaries
  };
  std::vector<std::vector<std::vector<TokenCount>>> per_packing;
  for (const auto& packing : packings) {
    e3::test::StepRig rig(3, 2, 4);
    e3::io::ShardAttributes attrs = rig.attrs();
    attrs.vocab_size = 64;
    e3::jobs::ShardCommitter committer(rig.out(), attrs, rig.todo(), e3::jobs::NonfiniteCheck{}, {});
    int slot = 0;
    for (const auto& [first, count] : packing) {
      auto [samples, ticket] = rig.step(slot, first, count);
      for (e3::jobs::StepSample& ss : samples) std::tie(ss.ids, ss.mask) = sample_tokens(ss.record->index, 4);
      committer.write(samples, rig.capture(), slot);
      slot = 1 - slot;
    }
    committer.finish(true);
    std::vector<std::vector<TokenCount>> shards;
    for (int s = 0; s < 3; ++s) shards.push_back(stored_counts(rig.shard_file(s)));
    per_packing.push_back(shards);
  }
  for (size_t p = 1; p < packings.size(); ++p) EXPECT_EQ(per_packing[p], per_packing[0]) << "packing " << p;
  // And they are the counts of the shards' own samples.
  for (int s = 0; s < 3; ++s) {
    TokenCounter want;
    for (int64_t i : {2 * s, 2 * s + 1}) {
      const auto [ids, mask] = sample_tokens(i, 4);
      want.add(ids, mask);
    }
    EXPECT_EQ(per_packing[0][static_cast<size_t>(s)], want.counts()) << "shard " << s;
  }
}

// ---------------------------------------------------------------- verify

// A finished run of 4 samples, 2 a shard, with token counts.
class VerifyTokenCounts : public ::testing::Test {
 protected:
  void SetUp() override {
    e3::io::silence_hdf5_errors();
    e3::io::RunFingerprint fp = e3::test::small_run_fingerprint();
    fp.samples_per_shard = 2;
    m_.fingerprint = fp;
    m_.data_fingerprint = "data";
    m_.num_samples = 4;
    m_.num_shards = 2;
    m_.complete = true;
    e3::io::ShardAttributes attrs = e3::test::rig_shard_attributes();
    attrs = e3::io::shard_attributes(fp, attrs);
    attrs.vocab_size = 64;
    for (int64_t s = 0; s < 2; ++s) {
      e3::io::ShardWriter w(dir_.path(), s, attrs);
      write_samples(w, {2 * s, 2 * s + 1}, 6);
      m_.shards.push_back(w.commit());
    }
    e3::io::write_manifest(dir_.path(), m_);
  }

  fs::path shard(int64_t s) const { return dir_ / e3::io::shard_file_name(s); }

  // After a change to shard `s` made on purpose: the manifest takes the file's new size and
  // checksum, so that only the content checks can find what changed.
  void relist(int64_t s) {
    m_.shards[static_cast<size_t>(s)].bytes = fs::file_size(shard(s));
    m_.shards[static_cast<size_t>(s)].checksum = e3::io::file_checksum(shard(s));
    e3::io::write_manifest(dir_.path(), m_);
  }

  // Runs `change` on shard `s` opened for writing.
  template <typename F>
  void change(int64_t s, F&& edit) {
    {
      e3::io::H5Id f(H5Fopen(shard(s).c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
      ASSERT_TRUE(static_cast<bool>(f));
      edit(f.get());
    }
    relist(s);
  }

  std::string verify_error() {
    const auto e = e3::test::error_of([&] { e3::io::verify_output(dir_.path()); });
    if (!e) return "verify passed";
    EXPECT_EQ(e->kind(), ErrorKind::Verify) << e->what();
    return e->what();
  }

  TempDir dir_;
  e3::io::Manifest m_;
};

TEST_F(VerifyTokenCounts, PassesWhenTheTablesMatchTheirSamples) { EXPECT_EQ(verify_error(), "verify passed"); }

TEST_F(VerifyTokenCounts, FindsACountChangedInTheTable) {
  const std::vector<TokenCount> counts = stored_counts(shard(1));
  ASSERT_FALSE(counts.empty());
  change(1, [&](hid_t f) {
    std::vector<int64_t> rows;
    for (const TokenCount& c : counts) rows.insert(rows.end(), {c.id, c.count});
    rows[3] += 1;  // the second id's count
    e3::io::H5Id ds(H5Dopen2(f, "token_counts", H5P_DEFAULT), H5Dclose);
    ASSERT_GE(H5Dwrite(ds.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()), 0);
  });
  const std::string msg = verify_error();
  EXPECT_TRUE(Contains(msg, shard(1).string()));
  EXPECT_TRUE(Contains(msg, fmt::format("counts token id {} {} times, but the samples' masked tokens (loss_mask 1) "
                                        "hold it {} times",
                                        counts[1].id, counts[1].count + 1, counts[1].count)));
}

TEST_F(VerifyTokenCounts, FindsAMaskChangedUnderTheTable) {
  // Sample 0's first token was not masked; now it is, and the table no longer says so.
  const auto [ids, mask] = sample_tokens(0, 6);
  change(0, [&](hid_t f) {
    std::vector<uint8_t> all(mask.size(), 1);
    e3::io::H5Id ds(H5Dopen2(f, "samples/00000000/loss_mask", H5P_DEFAULT), H5Dclose);
    ASSERT_GE(H5Dwrite(ds.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, all.data()), 0);
  });
  const std::string msg = verify_error();
  EXPECT_TRUE(Contains(msg, shard(0).string()));
  EXPECT_TRUE(Contains(msg, fmt::format("counts token id {} ", ids[0])));
}

TEST_F(VerifyTokenCounts, FindsABrokenTable) {
  change(0, [&](hid_t f) {
    e3::io::H5Id ds(H5Dopen2(f, "token_counts", H5P_DEFAULT), H5Dclose);
    std::vector<int64_t> rows(stored_counts(shard(0)).size() * 2, 0);  // every id 0, every count 0
    ASSERT_GE(H5Dwrite(ds.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()), 0);
  });
  EXPECT_TRUE(Contains(verify_error(), shard(0).string() + ": /token_counts: row"));
}

TEST_F(VerifyTokenCounts, AcceptsAShardWrittenBeforeTheTable) {
  change(1, [&](hid_t f) { ASSERT_GE(H5Ldelete(f, "token_counts", H5P_DEFAULT), 0); });
  EXPECT_FALSE(e3::io::read_shard_layout(shard(1)).token_counts.has_value());
  EXPECT_EQ(verify_error(), "verify passed");
}

}  // namespace
