// --part I/P: which slice of the dataset this job computes when several jobs (a Slurm array,
// say) write into one output directory.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "io/manifest.h"

namespace e3::jobs {

using Getenv = std::function<std::optional<std::string>(const char*)>;

// "I/P" with 0 <= I < P, or "slurm": the position of this task in its Slurm array
// (SLURM_ARRAY_TASK_ID, _MIN, _MAX, _STEP, _COUNT). Throws a usage error otherwise.
io::Part parse_part(const std::string& text, const Getenv& getenv);

}  // namespace e3::jobs
