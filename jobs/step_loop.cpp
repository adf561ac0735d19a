#include "jobs/step_loop.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <system_error>
#include <thread>

#include <spdlog/spdlog.h>

#include "jobs/signals.h"
#include "core/error.h"

namespace e3::jobs {
namespace {

ShardCommitter::BeforePublish injected_publish_failure(const RunConfig& rc) {
  if (rc.faults.fail_publish_shard < 0) return {};
  return [shard = rc.faults.fail_publish_shard, out = rc.out_dir](int64_t index) {
    if (index == shard)
      throw std::filesystem::filesystem_error("injected failure publishing a shard (E3_FAIL_PUBLISH_SHARD)",
                                              out / io::shard_file_name(index),
                                              std::make_error_code(std::errc::io_error));
  };
}

// E3_FAIL_AT_SAMPLE: this rank fails before the step that holds the sample, while its peers
// are in the step's agreement.
std::function<void(const std::vector<StepSample>&)> injected_step_failure(const RunConfig& rc, int world_rank) {
  if (rc.faults.fail_at_sample < 0) return {};
  return [faults = rc.faults, world_rank](const std::vector<StepSample>& step) {
    for (const StepSample& ss : step)
      E3_REQUIRE(!faults.fails_before(ss.record->index, world_rank), ErrorKind::Internal,
                 "injected failure before the step holding sample {} (E3_FAIL_AT_SAMPLE)", ss.record->index);
  };
}

std::string describe(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

}  // namespace

bool read_next_step(StepPacker& packer, const io::Dataset& data, model::HostBatch& batch,
                    std::vector<StepSample>& step) {
  batch.clear();
  step.clear();
  for (const StepPacker::Item& item : packer.next()) {
    StepSample ss{item.record, item.shard, batch.num_tokens(), {}, {}};
    data.read(*item.record, ss.ids, ss.mask);
    batch.add_sequence(ss.ids.data(), static_cast<int64_t>(ss.ids.size()));
    step.push_back(std::move(ss));
  }
  return !step.empty();
}

StepLoop::StepLoop(const RunConfig& rc, const parallel::Grid& grid, const io::Dataset& data, const OutputPlan& out,
                   const std::vector<int>& layers, int64_t hidden_size, LoadedModel& loaded,
                   const io::ShardAttributes& attrs, ShardCommitter::OnCommit on_commit)
    : grid_(grid),
      data_(data),
      loaded_(loaded),
      packer_(data.samples(), out.plan.pending_for(grid.dp_rank()), rc.max_tokens_per_step),
      watchdog_(*loaded.comm, rc.collective_timeout_s, grid.world_rank()),
      before_step_(injected_step_failure(rc, grid.world_rank())),
      step_delay_(rc.faults.step_delay_ms) {
  const std::vector<int64_t> group_steps = steps_per_group(out.plan, data, grid.dp_size(), rc.max_tokens_per_step);
  total_steps_ = group_steps.empty() ? 0 : *std::max_element(group_steps.begin(), group_steps.end());
  // --log-level debug: every rank captures, and logs per-layer statistics of each step; equal
  // numbers across a TP group show that every rank computed the same residual stream.
  const bool stats_everywhere = spdlog::should_log(spdlog::level::debug);
  if (grid.is_writer() || stats_everywhere)
    capture_ = std::make_unique<model::StagedCapture>(*loaded.backend, layers, rc.final_mode, rc.dtype, hidden_size,
                                                      rc.max_tokens_per_step, kSlots);
  if (grid.is_writer()) {
    committer_ = std::make_unique<ShardCommitter>(rc.out_dir, attrs, out.plan.pending_for(grid.dp_rank()),
                                                  NonfiniteCheck{rc.on_nonfinite, rc.data_path.string()},
                                                  std::move(on_commit), injected_publish_failure(rc),
                                                  writer_thread_count(rc.writer_threads,
                                                                      static_cast<int>(std::thread::hardware_concurrency()),
                                                                      grid.local_size(), grid.tp_size()));
    writer_ = std::make_unique<AsyncStepWriter>(*committer_, *capture_, *loaded.backend);
  }
  std::vector<int64_t> group_tokens(static_cast<size_t>(grid.dp_size()), 0);
  for (const ShardPlan& s : out.plan.shards)
    if (!s.committed) group_tokens[static_cast<size_t>(s.dp_group)] += s.tokens_to_write;
  progress_ = std::make_unique<Progress>(grid.is_leader(), out.plan.samples_pending, group_tokens,
                                         out.limits.state_bytes_per_token, rc.progress_interval_s, total_steps_);
}

StepLoop::~StepLoop() = default;

std::exception_ptr StepLoop::prepare_step(int slot) {
  try {
    read_next_step(packer_, data_, batch_, step_);
    if (before_step_) before_step_(step_);
    if (writer_) {
      writer_->acquire(slot);
      if (auto e = writer_->error()) std::rethrow_exception(e);
    }
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

void StepLoop::compute_step(int64_t step_index, int slot) {
  if (step_.empty()) return;  // this group has no work left: it idles through the rest
  const int64_t step_samples = static_cast<int64_t>(step_.size()), step_tokens = batch_.num_tokens();
  if (capture_) capture_->begin_step(slot, step_tokens);
  // E3_STEP_DELAY_MS: the step takes that much longer, as a large model's does (the tests that
  // stop a run mid-step and that see progress between steps).
  if (step_delay_.count() > 0) std::this_thread::sleep_for(step_delay_);
  loaded_.model->forward(batch_, capture_.get());
  if (capture_) capture_->audit(grid_.world_rank());
  if (writer_) {
    writer_->submit(step_index, slot, capture_->finish_step(), std::move(step_));
    step_.clear();
  } else if (capture_) {
    loaded_.backend->wait_ticket(capture_->finish_step());
    spdlog::debug("step {} capture stats: {}", step_index, capture_stats(*capture_, slot, step_tokens));
  } else {
    loaded_.backend->synchronize();  // a rank without a writer keeps at most one step in flight
  }
  done_samples_ += step_samples;
  done_tokens_ += step_tokens;
}

void StepLoop::leave_after_failure(const parallel::StepAgreement& agreed, const std::exception_ptr& pending) {
  if (writer_ && !finishing_) {  // commit what is complete before leaving
    try {
      writer_->finish(false);
    } catch (...) {
      // The writer's failure may be the one agreed on; anything else is a second failure
      // behind the reported one: worth a line, but not the job's message.
      const std::exception_ptr second = std::current_exception();
      if (second != pending)
        spdlog::warn("also failed while committing what was complete: {}", describe(second));
    }
  }
  if (agreed.failed_rank == grid_.world_rank()) parallel::rethrow_agreed(pending);
  throw parallel::PeerFailed{agreed.failed_rank, agreed.code};
}

parallel::StepAgreement StepLoop::agree(const std::exception_ptr& pending) {
  const parallel::StepAgreement agreed =
      parallel::agree_on_step(grid_, stop_signal(), pending, done_samples_, done_tokens_);
  if (agreed.failed_rank >= 0) leave_after_failure(agreed, pending);
  progress_->update(agreed.samples_by_group, agreed.tokens_by_group);
  return agreed;
}

StepOutcome StepLoop::run() {
  StepOutcome outcome;
  // Each step starts with one small all-reduce over the world that agrees on stop signals and
  // on failures found outside the collectives, and carries every group's progress to the leader.
  for (int64_t step_index = 0; step_index < total_steps_; ++step_index) {
    watchdog_.step_begin(step_index);
    const int slot = static_cast<int>(step_index % kSlots);
    const parallel::StepAgreement agreed = agree(prepare_step(slot));
    if (agreed.stop_signal) {
      outcome.stopped_by = agreed.stop_signal;
      break;
    }
    progress_->step_started(step_index);
    compute_step(step_index, slot);
    watchdog_.step_end();
  }
  // The last writes: their failures (the publisher thread's, whatever their type) are agreed
  // like those of a step.
  watchdog_.step_begin(total_steps_);
  finishing_ = true;
  std::exception_ptr pending;
  try {
    if (writer_) writer_->finish(outcome.stopped_by == 0);
  } catch (...) {
    pending = std::current_exception();
  }
  agree(pending);
  watchdog_.step_end();
  progress_->finish(outcome.stopped_by != 0);
  // Which stage of the path to the files held the run back, if any (issue 21).
  if (committer_ && committer_->account().bytes() > 0)
    spdlog::info("writer path: {}", committer_->account().summary());
  outcome.samples_computed = progress_->samples();
  if (committer_) outcome.committed = committer_->committed();
  return outcome;
}

}  // namespace e3::jobs
