// Writing steps to shards on a thread of their own, so that HDF5 writes overlap the next
// steps on the device. At most `slots` steps are in flight: the loop acquires a slot before
// it computes into it, and the writer releases it once the step's samples are written.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "io/dataset.h"
#include "io/shard_writer.h"
#include "jobs/plan.h"
#include "jobs/run_config.h"
#include "kernels/backend.h"
#include "model/capture.h"

namespace e3::jobs {

// One sample inside a step.
struct StepSample {
  const io::SampleRecord* record;
  const ShardPlan* shard;
  int64_t offset;  // first token inside the step
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;
};

// Each sample's states are checked for NaN/Inf before they are written.
struct NonfiniteCheck {
  OnNonfinite mode = OnNonfinite::Error;
  std::string data_path;  // for messages: FILE:LINE of the sample
};

// The shard bookkeeping of one DP group: shards are written in plan order; a shard is
// committed (renamed into place) once its last sample is written (or skipped).
class ShardCommitter {
 public:
  using OnCommit = std::function<void(const io::CommittedShard&)>;
  // Runs on the publisher thread before each shard is renamed into place; what it throws fails
  // the writer as a failed rename would (fault injection).
  using BeforePublish = std::function<void(int64_t shard_index)>;
  ShardCommitter(std::filesystem::path out_dir, io::ShardAttributes attrs, std::vector<const ShardPlan*> todo,
                 NonfiniteCheck check, OnCommit on_commit, BeforePublish before_publish = {}, int threads = 1);
  // Where the writing time went, for the end-of-run account.
  io::WriteAccount& account() { return account_; }
  ~ShardCommitter();
  void write(const std::vector<StepSample>& samples, const model::StagedCapture& capture, int slot);
  // Waits for the commits under way. With `all_written` (the plan ran to its end) the
  // remaining shards, which hold only skipped samples by then, are committed too; without
  // (a stop or a failure) a partly written shard is dropped, to be redone on resume.
  void finish(bool all_written);
  const std::vector<io::CommittedShard>& committed() const { return committed_; }

 private:
  void commit_through(size_t upto);
  // One pass over a whole step's stored rows on the writer's threads: per token, whether any of its
  // states holds NaN or infinity; empty when none does (the common case).
  std::vector<uint8_t> nonfinite_tokens(const model::StagedCapture& capture, int slot, int64_t tokens) const;
  // Why the sample's rows cannot be stored ("NaN in capture id 4 at token 17 of 52"), if so.
  std::optional<std::string> nonfinite_reason(const std::vector<const void*>& rows,
                                              const std::vector<const void*>& final_rows, int64_t tokens) const;
  void publish_loop();
  void rethrow();
  std::filesystem::path out_dir_;
  io::ShardAttributes attrs_;
  std::vector<io::FinalDataset> finals_;  // of attrs_.final_mode
  std::vector<const ShardPlan*> todo_;
  NonfiniteCheck check_;
  int threads_;  // for the scan and each shard's writes
  OnCommit on_commit_;
  BeforePublish before_publish_;
  io::WriteAccount account_;
  std::unique_ptr<io::ShardWriter> writer_;
  size_t next_to_close_ = 0;
  std::vector<int64_t> written_;  // per todo entry
  std::vector<io::CommittedShard> committed_;
  // Closed shards wait here for their fsync and rename, in order, on their own thread.
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<io::ShardWriter>> to_publish_;
  bool publishing_ = false, stop_ = false;
  std::exception_ptr error_;
  std::thread publisher_;
};

// One line of per-layer statistics of a captured step: "id 2: rms 0.912 min -4.1 max 3.7; ...".
// For --log-level debug: a layer whose numbers drift or explode shows up before training.
std::string capture_stats(const model::StagedCapture& capture, int slot, int64_t tokens);

class AsyncStepWriter {
 public:
  AsyncStepWriter(ShardCommitter& committer, model::StagedCapture& capture, kernels::Backend& backend);
  ~AsyncStepWriter();  // stops the thread; does not commit (finish() does)
  AsyncStepWriter(const AsyncStepWriter&) = delete;
  AsyncStepWriter& operator=(const AsyncStepWriter&) = delete;

  // Blocks until the writer is done with `slot` (or has failed).
  void acquire(int slot);
  // The writer's failure, if any (it stops writing after one).
  std::exception_ptr error();
  void submit(int64_t step, int slot, uint64_t ticket, std::vector<StepSample> samples);
  // Waits for everything submitted, then ShardCommitter::finish; rethrows a writer error.
  void finish(bool all_written);

 private:
  struct Job {
    int64_t step;
    int slot;
    uint64_t ticket;
    std::vector<StepSample> samples;
  };
  void run();
  void rethrow_locked();
  ShardCommitter& committer_;
  model::StagedCapture& capture_;
  kernels::Backend& backend_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  std::vector<bool> busy_;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace e3::jobs
