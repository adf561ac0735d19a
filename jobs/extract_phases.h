// The phases of an extraction, in the order run_extract calls them: validate the request,
// plan the output, load the model, run the steps (jobs/step_loop.h), finish. Each phase that
// can fail on one rank ends in an agreement, so every rank leaves it together.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "io/dataset.h"
#include "io/manifest.h"
#include "io/shard_writer.h"
#include "jobs/output_dir.h"
#include "jobs/plan.h"
#include "jobs/run_config.h"
#include "kernels/backend.h"
#include "model/config.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "parallel/communicator.h"
#include "parallel/mpi_env.h"

namespace e3::jobs {

// Everything that can be wrong with the request, found before any memory is committed and
// before anything is created in --out.
struct ValidatedRequest {
  model::ModelConfig config;
  std::vector<int> layers;  // capture ids
  std::unique_ptr<model::Checkpoint> checkpoint;
  io::Dataset data;
  double data_check_seconds = 0;   // checking (and tokenizing) the input
  io::RunFingerprint fingerprint;  // plan_groups filled in by plan_output
  io::ModelAttributes model_attributes;  // what the shards say of the model, beside the fingerprint
};
ValidatedRequest validate_request(const RunConfig& rc, const parallel::Grid& grid);

// The output directory claimed (leader), what an earlier run left there, and the same plan
// on every rank.
struct OutputPlan {
  OutputState earlier;                // leader only: the shards kept from earlier runs
  std::optional<OutputClaim> claim;   // leader only, until the job ends however it ends
  ShardLimits limits;
  WorkPlan plan;
  int64_t shards_pending = 0;
  int64_t committed_before = 0;       // shards
  uint64_t output_bytes = 0;          // estimated, of this run
  io::Manifest manifest;              // leader only
};
OutputPlan plan_output(const RunConfig& rc, const parallel::Grid& grid, ValidatedRequest& req);

// A rerun with every shard of this part committed: says so without loading anything.
void finish_without_work(const RunConfig& rc, const parallel::Grid& grid, OutputPlan& out);

// The backend, the TP group's communicator and this rank's slice of the weights; then, once
// every rank is ready, the manifest that marks --out as this run's.
struct LoadedModel {
  std::unique_ptr<kernels::Backend> backend;
  std::unique_ptr<parallel::Communicator> comm;
  std::unique_ptr<model::Model> model;
};
LoadedModel load_model_slice(const RunConfig& rc, const parallel::Grid& grid, const ValidatedRequest& req,
                             OutputPlan& out);

// What the step loop leaves for the last phase.
struct StepOutcome {
  int stopped_by = 0;                         // the signal that stopped the run early, or 0
  std::vector<io::CommittedShard> committed;  // by this rank's writer, in this run
  int64_t samples_computed = 0;               // by every group in this run, as the last agreement counted them
};

// The leader collects every group's commits, writes the final manifest and the "done" line;
// --max-skipped-fraction is judged there and shared. Returns the exit code.
int finish_extract(const RunConfig& rc, const parallel::Grid& grid, const OutputPlan& out,
                   const StepOutcome& outcome, std::chrono::steady_clock::time_point started);

// --max-skipped-fraction: the line that ends a run whose samples left out for non-finite
// states exceed the fraction of this part's samples, or "" when they do not.
std::string too_many_skipped_message(const RunConfig& rc, const WorkPlan& plan, int64_t nonfinite);

}  // namespace e3::jobs
