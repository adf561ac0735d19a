// `stats`: the accumulation against a reference computed here in long double, on known arrays
// (NaN and infinities included) and on output directories written by the real shard writer in
// every storage dtype; the result must not depend on the thread or rank count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/dtype.h"
#include "core/e4m3.h"
#include "core/storage_codec.h"
#include "io/manifest.h"
#include "io/shard_stats.h"
#include "io/shard_writer.h"
#include "jobs/stats_report.h"
#include "support/shard_samples.h"
#include "support/test_support.h"

namespace {

namespace fs = std::filesystem;
using e3::io::SampleStats;
using e3::io::ValueStats;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

bool same_bits(const ValueStats& a, const ValueStats& b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// The reference: every finite value's square summed in long double, one value at a time.
struct Reference {
  long double squares = 0;
  double abs_max = 0;
  uint64_t count = 0, finite = 0, nan = 0, pos_inf = 0, neg_inf = 0;
  void add(float v) {
    ++count;
    if (std::isnan(v)) {
      ++nan;
    } else if (std::isinf(v)) {
      ++(v > 0 ? pos_inf : neg_inf);
    } else {
      ++finite;
      squares += static_cast<long double>(v) * v;
      abs_max = std::max(abs_max, static_cast<double>(std::fabs(v)));
    }
  }
  double rms() const { return finite == 0 ? 0.0 : static_cast<double>(std::sqrt(squares / finite)); }
};

void expect_matches(const ValueStats& got, const Reference& want, const std::string& what) {
  EXPECT_EQ(got.count, want.count) << what;
  EXPECT_EQ(got.finite(), want.finite) << what;
  EXPECT_EQ(got.nan, want.nan) << what;
  EXPECT_EQ(got.pos_inf, want.pos_inf) << what;
  EXPECT_EQ(got.neg_inf, want.neg_inf) << what;
  EXPECT_EQ(got.abs_max, want.abs_max) << what;
  EXPECT_NEAR(got.rms(), want.rms(), 1e-12 * std::max(1.0, want.rms())) << what;
}

TEST(ValueStats, CountsNonFiniteValuesApartFromTheFiniteOnes) {
  const std::vector<float> row = {1.0f, -2.0f, 3.0f, kNaN, kInf, -kInf, 0.5f, -kInf, kNaN};
  ValueStats v;
  v.add_row(row.data(), row.size());
  EXPECT_EQ(v.count, 9u);
  EXPECT_EQ(v.nan, 2u);
  EXPECT_EQ(v.pos_inf, 1u);
  EXPECT_EQ(v.neg_inf, 2u);
  EXPECT_EQ(v.finite(), 4u);
  EXPECT_DOUBLE_EQ(v.abs_max, 3.0);
  EXPECT_DOUBLE_EQ(v.rms(), std::sqrt((1.0 + 4.0 + 9.0 + 0.25) / 4.0));
}

TEST(ValueStats, AllNonFiniteOrEmptyHasRmsZero) {
  ValueStats v;
  EXPECT_EQ(v.rms(), 0.0);
  const std::vector<float> row = {kNaN, kInf};
  v.add_row(row.data(), row.size());
  EXPECT_EQ(v.rms(), 0.0);
  EXPECT_EQ(v.abs_max, 0.0);
  EXPECT_EQ(v.finite(), 0u);
}

TEST(ValueStats, ManyRowsMatchALongDoubleReference) {
  // Values across many magnitudes, and rows of a length that is not a multiple of the lanes.
  ValueStats v;
  Reference ref;
  for (int r = 0; r < 2000; ++r) {
    std::vector<float> row = e3::test::random_floats(37, static_cast<uint64_t>(r));
    for (size_t i = 0; i < row.size(); ++i) row[i] *= std::ldexp(1.0f, (r % 40) - 20);
    if (r == 7) row[3] = kNaN;
    if (r == 1999) row[36] = -kInf;
    v.add_row(row.data(), row.size());
    for (float x : row) ref.add(x);
  }
  expect_matches(v, ref, "2000 rows");
}

TEST(ValueStats, MergingPartialsInOneOrderGivesTheSameBitsEveryTime) {
  std::vector<ValueStats> parts(5);
  for (size_t p = 0; p < parts.size(); ++p) {
    const std::vector<float> row = e3::test::random_floats(64, 1000 + p);
    parts[p].add_row(row.data(), row.size());
  }
  ValueStats a, b;
  for (const ValueStats& p : parts) a.merge(p);
  for (const ValueStats& p : parts) b.merge(p);
  EXPECT_TRUE(same_bits(a, b));
  EXPECT_EQ(a.count, 5u * 64);
}

TEST(ValueStats, AnFp8RowGivesTheBitsOfItsDecodedRow) {
  // Every code (NaN codes only in the rows meant to hold them), with scales that are usual,
  // zero, negative, tiny, and not finite.
  const e3::StorageCodec& fp8 = e3::storage_codec(e3::DType::F8E4M3);
  for (const float scale : {0.37f, 1.0f, 0.0f, -2.5f, 1e-30f, 3e37f, kNaN, kInf}) {
    for (const bool with_nan_code : {false, true}) {
      std::vector<uint8_t> codes(300);
      for (size_t i = 0; i < codes.size(); ++i) {
        codes[i] = static_cast<uint8_t>(i * 29 % 256);
        if (!with_nan_code && (codes[i] & 0x7f) == 0x7f) codes[i] = 0x7e;
      }
      std::vector<float> decoded(codes.size()), scratch(codes.size());
      const std::vector<const void*> parts{codes.data(), &scale};
      fp8.decode(fp8.split(parts, 1, static_cast<int64_t>(codes.size())), static_cast<int64_t>(codes.size()),
                 decoded.data());
      ValueStats direct, from_codes;
      direct.add_row(decoded.data(), decoded.size());
      from_codes.add_e4m3_row(codes.data(), scale, codes.size(), scratch.data());
      EXPECT_TRUE(same_bits(direct, from_codes)) << "scale " << scale << (with_nan_code ? " with NaN codes" : "");
      Reference ref;
      for (float v : decoded) ref.add(v);
      expect_matches(from_codes, ref, fmt::format("scale {}", scale));
    }
  }
}

TEST(SampleStats, LengthBinsAreThePowersOfTwo) {
  EXPECT_EQ(e3::io::length_bin(1), 0);
  EXPECT_EQ(e3::io::length_bin(2), 1);
  EXPECT_EQ(e3::io::length_bin(3), 1);
  EXPECT_EQ(e3::io::length_bin(4), 2);
  EXPECT_EQ(e3::io::length_bin(1023), 9);
  EXPECT_EQ(e3::io::length_bin(1024), 10);
  EXPECT_EQ(e3::io::length_bin(~uint64_t{0}), e3::io::kLengthBins - 1);
}

TEST(SampleStats, MaskedFractionAndAllZeroMasks) {
  SampleStats s;
  const std::vector<uint8_t> a = {0, 1, 1, 0, 1}, b = {0, 0, 0}, c = {1};
  s.add(a.data(), a.size());
  s.add(b.data(), b.size());
  SampleStats other;
  other.add(c.data(), c.size());
  s.merge(other);
  EXPECT_EQ(s.samples, 3u);
  EXPECT_EQ(s.tokens, 9u);
  EXPECT_EQ(s.masked, 4u);
  EXPECT_EQ(s.all_zero_mask, 1u);
  EXPECT_EQ(s.min_tokens, 1u);
  EXPECT_EQ(s.max_tokens, 5u);
  EXPECT_DOUBLE_EQ(s.masked_fraction(), 4.0 / 9.0);
  EXPECT_EQ(s.length_bins[0], 1u);  // 1 token
  EXPECT_EQ(s.length_bins[1], 1u);  // 3
  EXPECT_EQ(s.length_bins[2], 1u);  // 5
}

TEST(ShardStats, PartialsSurviveTheBytesTheRanksSend) {
  std::vector<e3::io::ShardStats> partials(2);
  for (size_t i = 0; i < partials.size(); ++i) {
    partials[i].shard_index = static_cast<int64_t>(7 - i);
    partials[i].states.resize(3);
    const std::vector<float> row = {1.5f, kNaN, -kInf, static_cast<float>(i)};
    for (ValueStats& v : partials[i].states) v.add_row(row.data(), row.size());
    const std::vector<uint8_t> mask = {1, 0, 1};
    partials[i].samples.add(mask.data(), mask.size());
    partials[i].bytes_read = 100 + i;
  }
  const std::vector<e3::io::ShardStats> back = e3::io::decode_partials(e3::io::encode_partials(partials));
  ASSERT_EQ(back.size(), partials.size());
  for (size_t i = 0; i < back.size(); ++i) {
    EXPECT_EQ(back[i].shard_index, partials[i].shard_index);
    ASSERT_EQ(back[i].states.size(), 3u);
    for (size_t k = 0; k < 3; ++k) EXPECT_TRUE(same_bits(back[i].states[k], partials[i].states[k]));
    EXPECT_EQ(std::memcmp(&back[i].samples, &partials[i].samples, sizeof(SampleStats)), 0);
    EXPECT_EQ(back[i].bytes_read, partials[i].bytes_read);
  }
  EXPECT_THROW(e3::io::decode_partials(e3::io::encode_partials(partials).substr(3)), e3::Error);
}

// ---------------------------------------------------------------- output directories

constexpr int64_t kH = 24;

int64_t length_of(int64_t sample) { return 1 + (sample * 5) % 9; }

// What the stats of a directory must be, from the floats the writer was given: each value as
// its storage dtype gives it back (fp8 decoded here from the codes and scales the codec wrote).
struct Expected {
  std::vector<Reference> states;
  SampleStats samples;
};

void add_stored(const e3::StorageCodec& codec, const std::vector<float>& rows, Reference& ref) {
  const size_t n_rows = rows.size() / kH;
  std::vector<uint8_t> staged(n_rows * codec.row_bytes(kH));
  codec.encode(rows.data(), n_rows, kH, staged.data());
  for (size_t r = 0; r < n_rows; ++r) {
    const uint8_t* row = staged.data() + r * codec.row_bytes(kH);
    for (int64_t c = 0; c < kH; ++c) {
      float v = 0;
      switch (codec.dtype()) {
        case e3::DType::F32: std::memcpy(&v, row + 4 * c, 4); break;
        case e3::DType::BF16: v = e3::bf16_to_float(e3::load_unaligned<uint16_t>(row, static_cast<size_t>(c))); break;
        case e3::DType::F16: v = e3::fp16_to_float(e3::load_unaligned<uint16_t>(row, static_cast<size_t>(c))); break;
        case e3::DType::F8E4M3: {
          float scale;
          std::memcpy(&scale, row + kH, 4);
          v = e3::e4m3fn_to_float(row[c]) * scale;
          break;
        }
        default: FAIL() << "no storage dtype";
      }
      ref.add(v);
    }
  }
}

// A directory of `shards` shards of 3 samples each; `poison` puts NaN, +Inf and -Inf into
// sample 4's capture 1.
class StatsOutput : public ::testing::Test {
 protected:
  void build(const std::string& dtype, int64_t shards, bool poison = false) {
    fp_.model_fingerprint = "m";
    fp_.layer_ids = {0, 3};
    fp_.final_mode = "both";
    fp_.dtype = dtype;
    fp_.max_seq_len = 64;
    fp_.on_long = "skip";
    fp_.samples_per_shard = 3;
    fp_.plan_groups = 1;
    fp_.tool_version = "t";
    const e3::StorageCodec& codec = *e3::storage_codec_named(dtype);
    const auto attrs = e3::io::shard_attributes(
        fp_, {.model_type = "llama", .hidden_size = kH, .num_hidden_layers = 6, .model_path = "/m",
              .config_fingerprint = "c"});
    e3::io::Manifest m;
    m.fingerprint = fp_;
    m.data_fingerprint = "d";
    m.num_samples = shards * 3;
    m.num_shards = shards;
    m.complete = true;
    want_ = Expected{};
    want_.states.assign(4, Reference{});
    for (int64_t shard = 0; shard < shards; ++shard) {
      e3::io::ShardWriter w(out_, shard, attrs);
      for (int64_t s = shard * 3; s < shard * 3 + 3; ++s) {
        const int64_t T = length_of(s);
        std::vector<int32_t> ids(static_cast<size_t>(T), 5);
        std::vector<uint8_t> mask(static_cast<size_t>(T));
        for (int64_t t = 0; t < T; ++t) mask[static_cast<size_t>(t)] = s % 4 == 1 ? 0 : (t + s) % 3 != 0;
        want_.samples.add(mask.data(), mask.size());
        std::vector<std::vector<float>> states;
        for (uint64_t k = 0; k < 4; ++k) {
          states.push_back(e3::test::random_floats(static_cast<size_t>(T * kH), 31 * s + k));
          for (float& x : states.back()) x *= static_cast<float>(k + 1);
        }
        if (poison && s == 4) {
          states[1][2] = kNaN;
          states[1][5] = kInf;
          states[1][static_cast<size_t>(kH) + 1] = -kInf;
        }
        for (size_t k = 0; k < 4; ++k) add_stored(codec, states[k], want_.states[k]);
        const std::vector<const float*> layers{states[0].data(), states[1].data()};
        const std::vector<const float*> finals{states[2].data(), states[3].data()};
        e3::test::write_float_sample(w, s, nullptr, ids, mask, layers, finals);
      }
      m.shards.push_back(w.commit());
    }
    e3::io::write_manifest(out_, m);
  }

  e3::io::StatsReport stats(int threads, int rank = 0, int ranks = 1) {
    e3::io::StatsReport r = e3::io::collect_stats(out_, {.threads = threads, .rank = rank, .ranks = ranks});
    r.combine(r.partials);
    return r;
  }

  e3::test::TempDir dir_;
  fs::path out_ = dir_.path();  // where build() writes
  e3::io::RunFingerprint fp_;
  Expected want_;
};

TEST_F(StatsOutput, EveryStorageDtypeMatchesTheReference) {
  for (const char* dtype : {"fp32", "bf16", "fp16", "fp8"}) {
    SCOPED_TRACE(dtype);
    out_ = dir_ / dtype;
    fs::create_directory(out_);
    build(dtype, 3);
    const e3::io::StatsReport r = stats(2);
    ASSERT_EQ(r.state_names, (std::vector<std::string>{"hidden_states[:,0]", "hidden_states[:,1]",
                                                        "last_hidden_state", "last_hidden_state_prenorm"}));
    for (size_t k = 0; k < 4; ++k) expect_matches(r.states[k], want_.states[k], r.state_names[k]);
    EXPECT_EQ(std::memcmp(&r.samples, &want_.samples, sizeof(SampleStats)), 0);
    EXPECT_EQ(r.shards_listed, 3);
    EXPECT_TRUE(r.complete);
  }
}

TEST_F(StatsOutput, NonFiniteValuesAreCountedWhereTheyAre) {
  build("bf16", 2, /*poison=*/true);
  const e3::io::StatsReport r = stats(1);
  EXPECT_EQ(r.states[1].nan, 1u);
  EXPECT_EQ(r.states[1].pos_inf, 1u);
  EXPECT_EQ(r.states[1].neg_inf, 1u);
  for (size_t k : {0, 2, 3}) EXPECT_EQ(r.states[k].nan + r.states[k].pos_inf + r.states[k].neg_inf, 0u);
  expect_matches(r.states[1], want_.states[1], "capture 1");
}

TEST_F(StatsOutput, Fp8RowsHoldingANonFiniteValueDecodeAsNaN) {
  // The writer's encoding of a row with NaN or Inf: a non-finite scale; code x scale is then
  // NaN or an infinity in that whole row, which the counts show.
  build("fp8", 2, /*poison=*/true);
  const e3::io::StatsReport r = stats(1);
  expect_matches(r.states[1], want_.states[1], "capture 1");
  EXPECT_GT(r.states[1].nan + r.states[1].pos_inf + r.states[1].neg_inf, 0u);
}

TEST_F(StatsOutput, TheThreadAndRankCountsChangeNoBit) {
  build("bf16", 5);
  const e3::io::StatsReport one = stats(1);
  const e3::io::StatsReport many = stats(4);
  std::vector<e3::io::ShardStats> gathered;
  for (int rank = 0; rank < 2; ++rank) {
    const e3::io::StatsReport part = e3::io::collect_stats(out_, {.threads = 2, .rank = rank, .ranks = 2});
    gathered.insert(gathered.end(), part.partials.begin(), part.partials.end());
  }
  e3::io::StatsReport ranks = one;
  ranks.combine(gathered);  // rank 0's shards first, then rank 1's: combine puts them in order
  for (const e3::io::StatsReport* r : {&many, static_cast<const e3::io::StatsReport*>(&ranks)}) {
    ASSERT_EQ(r->states.size(), one.states.size());
    for (size_t k = 0; k < one.states.size(); ++k) EXPECT_TRUE(same_bits(r->states[k], one.states[k])) << k;
    EXPECT_EQ(e3::jobs::stats_table(*r), e3::jobs::stats_table(one));
    EXPECT_EQ(e3::jobs::stats_svg(*r), e3::jobs::stats_svg(one));
    EXPECT_EQ(e3::jobs::stats_json(*r), e3::jobs::stats_json(one));
  }
}

TEST_F(StatsOutput, ADamagedShardIsAVerifyErrorNamingIt) {
  build("bf16", 3);
  const fs::path shard = dir_ / "shard-000001.h5";
  fs::resize_file(shard, fs::file_size(shard) / 2);
  const auto e = e3::test::error_of([&] { stats(2); });
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->kind(), e3::ErrorKind::Verify);
  EXPECT_NE(std::string(e->what()).find("shard-000001.h5"), std::string::npos) << e->what();
}

TEST_F(StatsOutput, AMissingShardIsAVerifyErrorNamingIt) {
  build("bf16", 3);
  fs::remove(dir_ / "shard-000002.h5");
  const auto e = e3::test::error_of([&] { stats(1); });
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->kind(), e3::ErrorKind::Verify);
  EXPECT_NE(std::string(e->what()).find("shard-000002.h5"), std::string::npos) << e->what();
}

TEST(StatsDirectory, ADirectoryThatIsNoOutputIsAVerifyError) {
  e3::test::TempDir empty;
  const auto e = e3::test::error_of([&] { e3::io::collect_stats(empty.path()); });
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->kind(), e3::ErrorKind::Verify);
  EXPECT_NE(std::string(e->what()).find("not an eagle3_extract output directory"), std::string::npos) << e->what();
}

TEST_F(StatsOutput, TheSvgIsOneDocumentWithTheTablesNumbers) {
  build("fp16", 2);
  const e3::io::StatsReport r = stats(1);
  const std::string svg = e3::jobs::stats_svg(r), table = e3::jobs::stats_table(r);
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("</svg>\n"), std::string::npos);
  for (const e3::io::ValueStats& v : r.states) {
    const std::string rms = e3::jobs::stats_number(v.rms());
    EXPECT_NE(svg.find(fmt::format("data-rms=\"{}\"", rms)), std::string::npos) << rms;
    EXPECT_NE(table.find(" " + rms + " "), std::string::npos) << rms;
  }
  EXPECT_NE(svg.find(fmt::format("data-masked-fraction=\"{}\"", e3::jobs::stats_number(r.samples.masked_fraction()))),
            std::string::npos);
}

}  // namespace
