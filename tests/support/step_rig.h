// A writer's world in miniature for the ShardCommitter and AsyncStepWriter tests: the CPU
// backend, a staged capture of one id, shards planned by hand, and steps filled with known
// values (or a NaN). The StepLoop tests run the same model shape (rig_shard_attributes).
#pragma once

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "io/dataset.h"
#include "io/manifest.h"
#include "io/shard_writer.h"
#include "jobs/plan.h"
#include "jobs/step_writer.h"
#include "kernels/backend.h"
#include "model/capture.h"
#include "support/test_support.h"

namespace e3::test {

// The rigs' run: one capture id (1) of kRigHidden columns, no final state, stored as fp32.
inline constexpr int kRigCaptureId = 1;
inline constexpr int64_t kRigHidden = 4;
inline io::ShardAttributes rig_shard_attributes() {
  io::RunFingerprint run;
  run.layer_ids = {kRigCaptureId};
  run.final_mode = "none";
  run.dtype = "fp32";
  run.tool_version = "test";
  return io::shard_attributes(run, {.model_type = "llama",
                                    .hidden_size = kRigHidden,
                                    .num_hidden_layers = 2,
                                    .model_path = "model",
                                    .config_fingerprint = "config"});
}

class StepRig {
 public:
  static constexpr int64_t kHidden = kRigHidden, kMaxTokens = 32;
  static constexpr int kSlots = 2;

  // Shards of `samples_per_shard` samples of `tokens` tokens each, `shards` of them.
  StepRig(int shards, int samples_per_shard, int64_t tokens) {
    const int n = shards * samples_per_shard;
    records_.resize(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      io::SampleRecord& r = records_[static_cast<size_t>(i)];
      r.index = i;
      r.line = i + 1;
      r.num_tokens = r.original_tokens = tokens;
    }
    plans_.resize(static_cast<size_t>(shards));
    for (int s = 0; s < shards; ++s) {
      jobs::ShardPlan& p = plans_[static_cast<size_t>(s)];
      p.index = s;
      p.first_sample = s * samples_per_shard;
      p.end_sample = p.first_sample + samples_per_shard;
      p.dp_group = 0;
      p.samples_to_write = samples_per_shard;
      p.tokens_to_write = samples_per_shard * tokens;
    }
  }

  std::vector<const jobs::ShardPlan*> todo() const {
    std::vector<const jobs::ShardPlan*> out;
    for (const jobs::ShardPlan& p : plans_) out.push_back(&p);
    return out;
  }
  const io::ShardAttributes& attrs() const { return attrs_; }
  const std::filesystem::path& out() const { return dir_.path(); }
  kernels::Backend& backend() { return *backend_; }
  model::StagedCapture& capture() { return capture_; }
  std::filesystem::path shard_file(int64_t index) const { return dir_ / io::shard_file_name(index); }

  // Samples [first, first + count) as one step in `slot`, their states computed into the
  // capture: sample i's values are i + 0.25 * column, NaN at token 1 of sample `nan_sample`.
  // Returns the samples and the ticket of the copy to the host.
  std::pair<std::vector<jobs::StepSample>, uint64_t> step(int slot, int64_t first, int count,
                                                           int64_t nan_sample = -1) {
    std::vector<jobs::StepSample> samples;
    std::vector<float> values;
    int64_t tokens = 0;
    for (int64_t i = first; i < first + count; ++i) {
      const io::SampleRecord& r = records_[static_cast<size_t>(i)];
      const jobs::ShardPlan* shard = nullptr;
      for (const jobs::ShardPlan& p : plans_)
        if (i >= p.first_sample && i < p.end_sample) shard = &p;
      jobs::StepSample ss{&r, shard, tokens, std::vector<int32_t>(static_cast<size_t>(r.num_tokens), 7),
                          std::vector<uint8_t>(static_cast<size_t>(r.num_tokens), 1)};
      for (int64_t t = 0; t < r.num_tokens; ++t)
        for (int64_t c = 0; c < kHidden; ++c)
          values.push_back(i == nan_sample && t == 1 ? std::numeric_limits<float>::quiet_NaN()
                                                     : static_cast<float>(i) + 0.25f * static_cast<float>(c));
      tokens += r.num_tokens;
      samples.push_back(std::move(ss));
    }
    kernels::DeviceBuffer buf = backend_->allocate(values.size() * sizeof(float));
    const kernels::Tensor state = buf.view(DType::F32, tokens, kHidden);
    backend_->upload_float(state, values.data());
    capture_.begin_step(slot, tokens);
    capture_.capture(kRigCaptureId, state);
    const uint64_t ticket = capture_.finish_step();
    backend_->wait_ticket(ticket);  // the staging buffer goes with `buf`
    return {std::move(samples), ticket};
  }

 private:
  TempDir dir_;
  std::unique_ptr<kernels::Backend> backend_ = kernels::make_cpu_backend(1);
  model::StagedCapture capture_{*backend_, {kRigCaptureId}, model::FinalMode::None, DType::F32, kHidden, kMaxTokens,
                                kSlots};
  std::vector<io::SampleRecord> records_;
  std::vector<jobs::ShardPlan> plans_;
  io::ShardAttributes attrs_ = rig_shard_attributes();
};

// Polls `done` until it holds or `limit` passes: tests wait for a state, not for a time.
template <typename Pred>
bool eventually(Pred done, std::chrono::seconds limit = std::chrono::seconds(20)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace e3::test
