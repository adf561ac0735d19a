// --part I/P: which slice of the dataset this job computes when several jobs (a Slurm array,
// say) write into one output directory.
#pragma once

#include <string>

#include "core/environment.h"
#include "io/manifest.h"

namespace e3::jobs {

// "I/P" with 0 <= I < P, or "slurm": the position of this task in its Slurm array
// (SLURM_ARRAY_TASK_ID, _MIN, _MAX, _STEP, _COUNT of `env`). Throws a usage error otherwise.
io::Part parse_part(const std::string& text, const Environment& env);

}  // namespace e3::jobs
