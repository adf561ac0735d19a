// The step loop of an extraction: this rank's DP group's samples, packed into forward steps
// (StepPacker), computed, captured and handed to the writer thread, in lockstep with every
// rank of the job.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <vector>

#include "io/dataset.h"
#include "io/shard_writer.h"
#include "jobs/extract_phases.h"
#include "jobs/plan.h"
#include "jobs/progress.h"
#include "jobs/run_config.h"
#include "jobs/step_writer.h"
#include "jobs/watchdog.h"
#include "kernels/backend.h"
#include "model/capture.h"
#include "model/model.h"
#include "parallel/agreement.h"
#include "parallel/communicator.h"
#include "parallel/mpi_env.h"

namespace e3::jobs {

// Fills `batch` and `step` with the packer's next step, the token ids read from `data`.
// Returns false once the packer has nothing left.
bool read_next_step(StepPacker& packer, const io::Dataset& data, model::HostBatch& batch,
                    std::vector<StepSample>& step);

class StepLoop {
 public:
  // The writer (TP rank 0 of each group) commits shards with `attrs`; on the leader
  // `on_commit` keeps the manifest current with each of its own commits.
  StepLoop(const RunConfig& rc, const parallel::Grid& grid, const io::Dataset& data, const OutputPlan& out,
           const std::vector<int>& layers, int64_t hidden_size, LoadedModel& loaded, const io::ShardAttributes& attrs,
           ShardCommitter::OnCommit on_commit);
  ~StepLoop();
  StepLoop(const StepLoop&) = delete;
  StepLoop& operator=(const StepLoop&) = delete;

  // Every step, then the last writes. Throws the agreed failure (this rank's) or
  // parallel::PeerFailed (another's).
  StepOutcome run();

 private:
  static constexpr int kSlots = 2;  // steps in flight: one computing, one being written
  // Packs the next step and waits for its slot; what fails here is agreed on, not thrown.
  std::exception_ptr prepare_step(int slot);
  void compute_step(int64_t step_index, int slot);
  // The agreement of a step boundary; leaves (throws) when any rank failed.
  parallel::StepAgreement agree(const std::exception_ptr& pending);
  [[noreturn]] void leave_after_failure(const parallel::StepAgreement& agreed, const std::exception_ptr& pending);

  const parallel::Grid& grid_;
  const io::Dataset& data_;
  LoadedModel& loaded_;
  int64_t total_steps_ = 0;  // every rank walks the longest group's
  StepPacker packer_;
  Watchdog watchdog_;
  std::function<void(const std::vector<StepSample>&)> before_step_;  // fault injection, or empty
  std::chrono::milliseconds step_delay_;                            // E3_STEP_DELAY_MS, tests only
  std::unique_ptr<model::StagedCapture> capture_;
  std::unique_ptr<ShardCommitter> committer_;
  std::unique_ptr<AsyncStepWriter> writer_;
  std::unique_ptr<Progress> progress_;
  model::HostBatch batch_;
  std::vector<StepSample> step_;
  int64_t done_samples_ = 0, done_tokens_ = 0;  // this group's
  bool finishing_ = false;  // the last writes: the writer has been asked to finish once already
};

}  // namespace e3::jobs
