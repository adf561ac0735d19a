#include "jobs/extract.h"

#include <chrono>

#include "jobs/extract_phases.h"
#include "jobs/step_loop.h"

namespace e3::jobs {

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
                  io::shard_attributes(req.fingerprint, req.model_attributes), std::move(on_commit));
    outcome = loop.run();
  }
  return finish_extract(rc, grid, out, outcome, started);
}

}  // namespace e3::jobs
