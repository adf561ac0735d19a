// The packing of samples into forward steps: the plan's step count per DP group (which every
// rank walks in lockstep) must equal the steps the extraction loop forms, or ranks hang in a
// collective; and the loop's steps hold every pending sample once, in order, within budget.
// Then StepLoop itself, on one rank with the CPU backend and a scripted model: what it feeds
// the model, what it commits and where, how a failure of each kind leaves it, and its counts.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "io/dataset.h"
#include "io/file_io.h"
#include "io/shard_reader.h"
#include "jobs/plan.h"
#include "jobs/step_loop.h"
#include "core/environment.h"
#include "parallel/communicator.h"
#include "parallel/mpi_env.h"
#include "support/step_rig.h"
#include "support/test_support.h"

namespace {

using e3::io::Dataset;
using e3::jobs::ShardLimits;
using e3::jobs::StepPacker;

Dataset write_dataset(const e3::test::TempDir& dir, const std::vector<int>& lengths, int64_t max_seq_len) {
  std::string text;
  for (size_t i = 0; i < lengths.size(); ++i) {
    text += "{\"id\": \"s" + std::to_string(i) + "\", \"input_ids\": [";
    for (int t = 0; t < lengths[i]; ++t) text += (t ? ", " : "") + std::to_string((t * 7 + static_cast<int>(i)) % 50);
    text += "]}\n";
  }
  e3::test::write_text(dir / "data.jsonl", text);
  e3::io::DatasetOptions opts;
  opts.vocab_size = 100;
  opts.max_seq_len = max_seq_len;
  opts.on_long = e3::io::OnLong::Skip;
  return Dataset::open(dir / "data.jsonl", opts);
}

TEST(StepLoop, FormsAsManyStepsAsThePlanCountsForRandomInputs) {
  std::mt19937_64 rng(20261201);
  const e3::test::TempDir dir;
  for (int trial = 0; trial < 200; ++trial) {
    const int n = std::uniform_int_distribution<int>(1, 40)(rng);
    const int64_t max_seq_len = std::uniform_int_distribution<int64_t>(1, 24)(rng);
    std::vector<int> lengths(static_cast<size_t>(n));
    for (int& len : lengths) len = std::uniform_int_distribution<int>(1, 30)(rng);  // some over max_seq_len: skipped
    const Dataset data = write_dataset(dir, lengths, max_seq_len);
    // The loop needs a whole sample to fit one step (--max-tokens-per-step >= --max-seq-len).
    const int64_t budget = max_seq_len + std::uniform_int_distribution<int64_t>(0, 60)(rng);
    const int dp = std::uniform_int_distribution<int>(1, 4)(rng);
    ShardLimits limits;
    limits.max_samples = std::uniform_int_distribution<int64_t>(1, 8)(rng);
    limits.plan_groups = dp;
    std::set<int64_t> committed;
    for (int64_t s = 0; s < n; ++s)
      if (rng() % 4 == 0) committed.insert(s);
    const e3::jobs::WorkPlan plan = e3::jobs::make_plan(data, limits, dp, committed);
    const std::vector<int64_t> planned = e3::jobs::steps_per_group(plan, data, dp, budget);
    ASSERT_EQ(planned.size(), static_cast<size_t>(dp));
    for (int g = 0; g < dp; ++g) {
      SCOPED_TRACE("trial " + std::to_string(trial) + " group " + std::to_string(g) + " budget " +
                   std::to_string(budget));
      // Every pending sample of the group, in order, as the loop must write them.
      std::vector<int64_t> want;
      for (const e3::jobs::ShardPlan* s : plan.pending_for(g))
        for (int64_t i = s->first_sample; i < s->end_sample; ++i)
          if (!data.samples()[static_cast<size_t>(i)].skipped) want.push_back(i);
      StepPacker packer(data.samples(), plan.pending_for(g), budget);
      e3::model::HostBatch batch;
      std::vector<e3::jobs::StepSample> step;
      std::vector<int64_t> got;
      int64_t steps = 0;
      while (e3::jobs::read_next_step(packer, data, batch, step)) {
        ++steps;
        EXPECT_LE(batch.num_tokens(), budget);
        int64_t offset = 0;
        for (const e3::jobs::StepSample& ss : step) {
          EXPECT_EQ(ss.offset, offset);
          EXPECT_EQ(static_cast<int64_t>(ss.ids.size()), ss.record->num_tokens);
          offset += ss.record->num_tokens;
          got.push_back(ss.record->index);
        }
        EXPECT_EQ(offset, batch.num_tokens());
        // Full: the next sample would not have fit.
        if (got.size() < want.size()) {
          EXPECT_GT(batch.num_tokens() + data.samples()[static_cast<size_t>(want[got.size()])].num_tokens, budget);
        }
      }
      EXPECT_EQ(steps, planned[static_cast<size_t>(g)]);
      EXPECT_EQ(got, want);
      EXPECT_FALSE(e3::jobs::read_next_step(packer, data, batch, step)) << "the packer restarted";
    }
  }
}

TEST(StepLoop, ASampleAsLongAsTheBudgetFillsAStepAlone) {
  const e3::test::TempDir dir;
  const Dataset data = write_dataset(dir, {4, 1, 4, 2, 2}, 4);
  ShardLimits limits;
  const e3::jobs::WorkPlan plan = e3::jobs::make_plan(data, limits, 1, {});
  StepPacker packer(data.samples(), plan.pending_for(0), 4);
  std::vector<std::vector<int64_t>> steps;
  for (auto items = packer.next(); !items.empty(); items = packer.next()) {
    steps.emplace_back();
    for (const auto& item : items) steps.back().push_back(item.record->index);
  }
  EXPECT_EQ(steps, (std::vector<std::vector<int64_t>>{{0}, {1}, {2}, {3, 4}}));
  EXPECT_EQ(e3::jobs::steps_per_group(plan, data, 1, 4), std::vector<int64_t>{4});
}

// ---------------------------------------------------------------- StepLoop

// The loop's Grid needs MPI: this process is a one-rank world of its own (MPI's singleton),
// started by the first StepLoop test and ended after the last test of the binary.
class OneRankMpi : public ::testing::Environment {
 public:
  static void start() {
    if (env_) return;
    // Open MPI makes its session directory racily (tests/e2e/lib.sh says how): a test process
    // started beside another under `ctest -j` gets a directory of its own.
    char dir[] = "/tmp/e3_ompi_XXXXXX";
    if (::mkdtemp(dir)) {
      session_dir_ = dir;
      ::setenv("OMPI_MCA_orte_tmpdir_base", dir, 1);
    }
    env_ = std::make_unique<e3::parallel::MpiEnv>(nullptr, nullptr, e3::Environment::of_process());
  }
  void TearDown() override {
    env_.reset();
    std::error_code ignored;
    if (!session_dir_.empty()) std::filesystem::remove_all(session_dir_, ignored);
  }

 private:
  static inline std::unique_ptr<e3::parallel::MpiEnv> env_;
  static inline std::string session_dir_;
};
[[maybe_unused]] ::testing::Environment* const kOneRankMpi = ::testing::AddGlobalTestEnvironment(new OneRankMpi);

using e3::test::kRigCaptureId;
using e3::test::kRigHidden;

constexpr int64_t kVocab = 1000, kMaxSeqLen = 8, kBudget = 8;
constexpr int32_t kFirstToken = 100;  // sample i starts with token 100 + i: the model tells samples apart by it

// Sample i's captured state at token t: a function of the token and its position, so that a
// row stored under the wrong sample or offset shows.
float state_value(int32_t token, int64_t position, int64_t column) {
  return static_cast<float>(token) * 16.0f + static_cast<float>(position) + static_cast<float>(column) / 8.0f;
}

// Stands in for a model: captures id kRigCaptureId as state_value of each token, NaN at
// token 1 of `nan_sample`, throws at step `fail_at_step`, and records the samples of each step.
class ScriptedModel final : public e3::model::Model {
 public:
  explicit ScriptedModel(e3::kernels::Backend& backend)
      : backend_(backend), state_(backend.allocate(static_cast<size_t>(kBudget * kRigHidden) * sizeof(float))) {}
  const e3::model::ModelConfig& config() const override { return config_; }
  size_t weight_bytes() const override { return 0; }
  size_t workspace_bytes() const override { return 0; }
  void forward(const e3::model::HostBatch& batch, e3::model::CaptureSink* sink) override {
    std::vector<int64_t> samples;
    std::vector<float> values;
    for (int s = 0; s < batch.num_seqs(); ++s) {
      const int64_t sample = batch.tokens[static_cast<size_t>(batch.cu_seqlens[static_cast<size_t>(s)])] - kFirstToken;
      samples.push_back(sample);
      for (int32_t t = batch.cu_seqlens[static_cast<size_t>(s)]; t < batch.cu_seqlens[static_cast<size_t>(s) + 1]; ++t) {
        const int64_t position = batch.positions[static_cast<size_t>(t)];
        for (int64_t c = 0; c < kRigHidden; ++c)
          values.push_back(sample == nan_sample && position == 1
                               ? std::numeric_limits<float>::quiet_NaN()
                               : state_value(batch.tokens[static_cast<size_t>(t)], position, c));
      }
    }
    steps.push_back(samples);
    if (static_cast<int64_t>(steps.size()) - 1 == fail_at_step)
      E3_THROW(e3::ErrorKind::Model, "scripted failure in step {}", fail_at_step);
    const e3::kernels::Tensor state = state_.view(e3::DType::F32, batch.num_tokens(), kRigHidden);
    backend_.upload_float(state, values.data());
    if (sink && sink->wants(kRigCaptureId)) sink->capture(kRigCaptureId, state);
  }

  std::vector<std::vector<int64_t>> steps;  // the sample indices of each forward call
  int64_t nan_sample = -1;
  int64_t fail_at_step = -1;

 private:
  e3::kernels::Backend& backend_;
  e3::kernels::DeviceBuffer state_;  // [kBudget, kRigHidden] fp32
  e3::model::ModelConfig config_;
};

// The lines logged while it lives.
class LogCapture {
 public:
  LogCapture() : previous_(spdlog::default_logger()) {
    auto logger = std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::ostream_sink_mt>(text_));
    logger->set_pattern("%v");
    spdlog::set_default_logger(logger);
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  std::string text() const { return text_.str(); }

 private:
  std::ostringstream text_;
  std::shared_ptr<spdlog::logger> previous_;
};

// Samples 0..11 of these lengths; sample 8 is over --max-seq-len and skipped. Three to a shard:
// shard 2 holds the skipped one. The budget of 8 tokens packs them into the steps
// {0, 1}, {2, 3, 4}, {5, 6}, {7, 9}, {10}, {11}.
const std::vector<int> kLengths = {3, 5, 2, 4, 1, 6, 2, 3, 12, 2, 4, 7};
constexpr int64_t kSamplesPerShard = 3;

class LoopRig {
 public:
  explicit LoopRig(const std::set<int64_t>& committed = {}) {
    OneRankMpi::start();
    grid_ = std::make_unique<e3::parallel::Grid>(1);
    std::string text;
    for (size_t i = 0; i < kLengths.size(); ++i) {
      text += "{\"id\": \"s" + std::to_string(i) + "\", \"input_ids\": [" + std::to_string(kFirstToken + i);
      for (int t = 1; t < kLengths[i]; ++t) text += ", " + std::to_string((static_cast<int>(i) * 7 + t) % 50 + 1);
      text += "]}\n";
    }
    e3::test::write_text(dir_ / "data.jsonl", text);
    rc.data_path = dir_ / "data.jsonl";
    rc.out_dir = dir_ / "out";
    std::filesystem::create_directories(rc.out_dir);
    rc.final_mode = e3::model::FinalMode::None;
    rc.dtype = e3::DType::F32;
    rc.max_seq_len = kMaxSeqLen;
    rc.max_tokens_per_step = kBudget;
    rc.progress_interval_s = 1e9;  // only the last line
    data_ = e3::io::Dataset::open(rc.data_path, {kVocab, kMaxSeqLen, e3::io::OnLong::Skip});
    out_.limits = {kSamplesPerShard, UINT64_MAX, e3::jobs::state_bytes_per_token(1, 0, kRigHidden, e3::DType::F32), 1};
    out_.plan = e3::jobs::make_plan(data_, out_.limits, 1, committed);
    loaded_.backend = e3::kernels::make_cpu_backend(1);
    loaded_.comm = e3::parallel::make_mpi_communicator(grid_->tp_comm(), *loaded_.backend);
    auto model = std::make_unique<ScriptedModel>(*loaded_.backend);
    model_ = model.get();
    loaded_.model = std::move(model);
  }

  // Runs a StepLoop to its end (or its throw) and destroys it.
  e3::jobs::StepOutcome run() {
    e3::jobs::StepLoop loop(rc, *grid_, data_, out_, {kRigCaptureId}, kRigHidden, loaded_,
                            e3::test::rig_shard_attributes(), [this](const e3::io::CommittedShard& c) {
                              on_commit.push_back(c.shard_index);
                            });
    return loop.run();
  }

  // Every pending sample that is not skipped, in plan order; those of shard `index` alone.
  std::vector<int64_t> pending_samples(int64_t index = -1) const {
    std::vector<int64_t> out;
    for (const e3::jobs::ShardPlan* s : out_.plan.pending_for(0))
      for (int64_t i = s->first_sample; i < s->end_sample; ++i)
        if ((index < 0 || s->index == index) && !data_.samples()[static_cast<size_t>(i)].skipped) out.push_back(i);
    return out;
  }
  int64_t tokens_of(const std::vector<int64_t>& samples) const {
    int64_t n = 0;
    for (int64_t i : samples) n += data_.samples()[static_cast<size_t>(i)].num_tokens;
    return n;
  }
  std::filesystem::path shard_file(int64_t index) const { return rc.out_dir / e3::io::shard_file_name(index); }
  std::vector<std::string> files_in_out() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(rc.out_dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  // Checks the file of shard `index`: it holds `samples`, each with the states the model
  // computed for that sample's own tokens.
  void expect_shard_holds(int64_t index, const std::vector<int64_t>& samples) const {
    SCOPED_TRACE("shard " + std::to_string(index));
    const e3::io::ShardLayout layout = e3::io::read_shard_layout(shard_file(index));
    std::vector<int64_t> stored;
    for (const e3::io::StoredSample& s : layout.samples) stored.push_back(s.index);
    ASSERT_EQ(stored, samples);
    const e3::io::Fd fd(::open(shard_file(index).c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_GE(fd.get(), 0);
    for (const e3::io::StoredSample& s : layout.samples) {
      std::vector<int32_t> ids;
      std::vector<uint8_t> mask;
      data_.read(data_.samples()[static_cast<size_t>(s.index)], ids, mask);
      const e3::io::StoredDataset* states = s.find("hidden_states");
      ASSERT_NE(states, nullptr);
      ASSERT_EQ(states->dims, (std::vector<uint64_t>{ids.size(), 1, static_cast<uint64_t>(kRigHidden)}));
      std::vector<float> got(ids.size() * static_cast<size_t>(kRigHidden));
      e3::io::read_stored_bytes(fd.get(), *states, got.data(), "test");
      std::vector<float> want;
      for (size_t t = 0; t < ids.size(); ++t)
        for (int64_t c = 0; c < kRigHidden; ++c) want.push_back(state_value(ids[t], static_cast<int64_t>(t), c));
      EXPECT_EQ(got, want) << "sample " << s.index;
    }
  }

  e3::jobs::RunConfig rc;
  std::vector<int64_t> on_commit;  // the publisher thread's, read once the loop is gone
  ScriptedModel& model() { return *model_; }

 private:
  e3::test::TempDir dir_;
  std::unique_ptr<e3::parallel::Grid> grid_;
  e3::io::Dataset data_;
  e3::jobs::OutputPlan out_;
  e3::jobs::LoadedModel loaded_;
  ScriptedModel* model_ = nullptr;
};

using Steps = std::vector<std::vector<int64_t>>;

TEST(StepLoop, FeedsTheModelEverySampleInOrderAndCommitsEachShardWithItsOwnSamples) {
  LoopRig rig;
  const LogCapture log;
  const e3::jobs::StepOutcome outcome = rig.run();
  EXPECT_EQ(rig.model().steps, (Steps{{0, 1}, {2, 3, 4}, {5, 6}, {7, 9}, {10}, {11}}));
  EXPECT_EQ(outcome.stopped_by, 0);
  ASSERT_EQ(outcome.committed.size(), 4u);
  for (int64_t index = 0; index < 4; ++index) {
    const e3::io::CommittedShard& c = outcome.committed[static_cast<size_t>(index)];
    EXPECT_EQ(c.shard_index, index);
    EXPECT_EQ(c.file, e3::io::shard_file_name(index));
    EXPECT_EQ(c.samples, rig.pending_samples(index));
    EXPECT_EQ(c.num_tokens, rig.tokens_of(rig.pending_samples(index)));
    EXPECT_TRUE(c.skipped.empty());
    rig.expect_shard_holds(index, rig.pending_samples(index));
  }
  EXPECT_EQ(outcome.committed[2].samples, (std::vector<int64_t>{6, 7})) << "the skipped sample 8 is in no shard";
  EXPECT_EQ(rig.on_commit, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(rig.files_in_out(), (std::vector<std::string>{e3::io::shard_file_name(0), e3::io::shard_file_name(1),
                                                          e3::io::shard_file_name(2), e3::io::shard_file_name(3)}));
  const std::vector<int64_t> all = rig.pending_samples();
  ASSERT_EQ(all.size(), 11u);
  const std::string counts = fmt::format("finished: 11/11 samples (100.0%), {0}/{0} tokens", rig.tokens_of(all));
  EXPECT_TRUE(e3::test::Contains(log.text(), counts)) << log.text();
}

TEST(StepLoop, LeavesCommittedShardsAloneAndCountsOnlyThePendingOnes) {
  LoopRig rig({1});
  const LogCapture log;
  const e3::jobs::StepOutcome outcome = rig.run();
  EXPECT_EQ(rig.model().steps, (Steps{{0, 1}, {2, 6, 7}, {9, 10}, {11}}));
  ASSERT_EQ(outcome.committed.size(), 3u);
  EXPECT_EQ(outcome.committed[0].shard_index, 0);
  EXPECT_EQ(outcome.committed[1].shard_index, 2);
  EXPECT_EQ(outcome.committed[2].shard_index, 3);
  EXPECT_FALSE(std::filesystem::exists(rig.shard_file(1)));
  rig.expect_shard_holds(2, {6, 7});
  const std::string counts =
      fmt::format("finished: 8/8 samples (100.0%), {0}/{0} tokens", rig.tokens_of(rig.pending_samples()));
  EXPECT_TRUE(e3::test::Contains(log.text(), counts)) << log.text();
}

TEST(StepLoop, ANonFiniteSampleUnderSkipIsLeftOutOfItsShardAndListed) {
  LoopRig rig;
  rig.rc.on_nonfinite = e3::jobs::OnNonfinite::Skip;
  rig.model().nan_sample = 3;
  const e3::jobs::StepOutcome outcome = rig.run();
  ASSERT_EQ(outcome.committed.size(), 4u);
  const e3::io::CommittedShard& c = outcome.committed[1];
  EXPECT_EQ(c.samples, (std::vector<int64_t>{4, 5}));
  ASSERT_EQ(c.skipped.size(), 1u);
  EXPECT_EQ(c.skipped[0].index, 3);
  EXPECT_EQ(c.skipped[0].line, 4);
  EXPECT_TRUE(e3::test::Contains(c.skipped[0].reason, "NaN in capture id 1 at token 1 of 4")) << c.skipped[0].reason;
  rig.expect_shard_holds(1, {4, 5});
  rig.expect_shard_holds(2, {6, 7});
}

TEST(StepLoop, AWriterFailureIsAgreedAndEndsTheLoopWithTheCompleteShardsCommitted) {
  LoopRig rig;
  rig.model().nan_sample = 3;  // --on-nonfinite error: the writer fails on it
  const auto e = e3::test::error_of([&] { rig.run(); });
  ASSERT_TRUE(e.has_value()) << "the loop ran through a NaN";
  EXPECT_EQ(e->kind(), e3::ErrorKind::NonFinite);
  EXPECT_TRUE(e->agreed()) << "every rank must leave the loop together";
  EXPECT_TRUE(e3::test::Contains(e->what(), "sample 3 (" + rig.rc.data_path.string() + ":4, id \"s3\"): NaN"))
      << e->what();
  // Shard 0 was complete before the failure; shard 1, partly written, is dropped.
  EXPECT_EQ(rig.on_commit, std::vector<int64_t>{0});
  EXPECT_EQ(rig.files_in_out(), std::vector<std::string>{e3::io::shard_file_name(0)});
  rig.expect_shard_holds(0, {0, 1, 2});
}

TEST(StepLoop, AnInjectedFailureBeforeAStepIsAgreedAndNamesTheSample) {
  LoopRig rig;
  rig.rc.faults.fail_at_sample = 6;  // in the third step, with sample 5, the last of shard 1
  const auto e = e3::test::error_of([&] { rig.run(); });
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->kind(), e3::ErrorKind::Internal);
  EXPECT_TRUE(e->agreed());
  EXPECT_TRUE(e3::test::Contains(e->what(), "injected failure before the step holding sample 6 (E3_FAIL_AT_SAMPLE)"))
      << e->what();
  EXPECT_EQ(rig.model().steps, (Steps{{0, 1}, {2, 3, 4}})) << "the failing step must not be computed";
  EXPECT_EQ(rig.on_commit, std::vector<int64_t>{0});
  EXPECT_EQ(rig.files_in_out(), std::vector<std::string>{e3::io::shard_file_name(0)});
}

TEST(StepLoop, AFailureInsideTheForwardStepLeavesTheLoopAsThatError) {
  LoopRig rig;
  rig.model().fail_at_step = 2;
  const auto e = e3::test::error_of([&] { rig.run(); });
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->kind(), e3::ErrorKind::Model);
  EXPECT_TRUE(e3::test::Contains(e->what(), "scripted failure in step 2")) << e->what();
  // Not agreed: a rank that fails inside the step may leave its peers in a collective, so the
  // job is aborted rather than ended together.
  EXPECT_FALSE(e->agreed());
  EXPECT_EQ(rig.model().steps.size(), 3u);
  // The steps handed to the writer before are still written: shard 0, complete, is committed;
  // shard 1, partly written, leaves nothing behind.
  EXPECT_EQ(rig.on_commit, std::vector<int64_t>{0});
  EXPECT_EQ(rig.files_in_out(), std::vector<std::string>{e3::io::shard_file_name(0)});
  rig.expect_shard_holds(0, {0, 1, 2});
}

}  // namespace
