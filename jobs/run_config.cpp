#include "jobs/run_config.h"

#include "kernels/error.h"

namespace e3::jobs {

OnNonfinite parse_on_nonfinite(const std::string& s) {
  if (s == "skip") return OnNonfinite::Skip;
  if (s == "error") return OnNonfinite::Error;
  E3_THROW(ErrorKind::Usage, "--on-nonfinite '{}': expected skip or error", s);
}

const char* on_nonfinite_name(OnNonfinite o) { return o == OnNonfinite::Skip ? "skip" : "error"; }

}  // namespace e3::jobs
