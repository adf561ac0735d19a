#include "jobs/extract.h"

#include <chrono>
#include <filesystem>

#include "jobs/extract_phases.h"
#include "jobs/step_loop.h"

namespace e3::jobs {
namespace {

io::ShardAttributes shard_attributes(const RunConfig& rc, const parallel::Grid& grid, const ValidatedRequest& req) {
  io::ShardAttributes attrs;
  attrs.layer_ids.assign(req.layers.begin(), req.layers.end());
  attrs.final_mode = name_of(rc.final_mode);
  attrs.model_type = req.config.model_type;
  attrs.hidden_size = req.config.hidden_size;
  attrs.num_hidden_layers = req.config.num_hidden_layers;
  attrs.dtype = rc.dtype;
  attrs.tp = grid.tp_size();
  attrs.model_path = std::filesystem::absolute(rc.model_dir).string();
  attrs.config_fingerprint = req.config.fingerprint;
  attrs.run_fingerprint = req.fingerprint.digest();
  attrs.tool_version = E3_VERSION_STRING;
  return attrs;
}

}  // namespace

int run_extract(const RunConfig& rc, const parallel::Grid& grid) {
  const auto started = std::chrono::steady_clock::now();
  ValidatedRequest req = validate_request(rc, grid);
  OutputPlan out = plan_output(rc, grid, req);
  if (out.shards_pending == 0) {  // known alike on every rank: the plan is the same everywhere
    finish_without_work(rc, grid, out);
    return 0;
  }
  LoadedModel loaded = load_model_slice(rc, grid, req, out);
  ShardCommitter::OnCommit on_commit;
  if (grid.is_leader())  // the leader keeps manifest.json current with its own commits
    on_commit = [&](const io::CommittedShard& c) {
      out.manifest.shards.push_back(c);
      io::write_manifest(rc.out_dir, out.manifest);
    };
  StepOutcome outcome;
  {
    StepLoop loop(rc, grid, req.data, out, req.layers, req.config.hidden_size, loaded,
                  shard_attributes(rc, grid, req), std::move(on_commit));
    outcome = loop.run();
  }
  return finish_extract(rc, grid, out, outcome, started);
}

}  // namespace e3::jobs
