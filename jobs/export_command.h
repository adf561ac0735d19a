// `eagle3_extract export --format F SRC DEST` over the ranks of a job (jobs/export.h does the
// work of each rank).
#pragma once

#include "jobs/export.h"
#include "parallel/mpi_env.h"

namespace e3::jobs {

// Rank 0 prepares DEST, every rank exports its share of the shards (index % ranks), rank 0
// finishes. Each phase ends in an agreement (parallel::agreed_phase), so a failure on one rank
// ends every rank with that rank's message and exit code, and nobody waits in a collective.
// o.rank, o.ranks and (when 0) o.threads are filled in here. Returns 0 or throws.
int run_export(ExportOptions o, const parallel::MpiEnv& mpi);

}  // namespace e3::jobs
