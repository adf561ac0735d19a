#include "core/error.h"

namespace e3 {

int exit_code(ErrorKind kind) { return static_cast<int>(kind); }

const char* kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::Internal: return "internal error";
    case ErrorKind::Usage: return "usage error";
    case ErrorKind::Input: return "input error";
    case ErrorKind::Model: return "model error";
    case ErrorKind::Output: return "output error";
    case ErrorKind::Verify: return "verify failed";
    case ErrorKind::Audit: return "capture audit failed";
    case ErrorKind::Parallel: return "parallel runtime error";
    case ErrorKind::NonFinite: return "non-finite hidden states";
    case ErrorKind::Resumable: return "stopped, resumable";
  }
  return "error";
}

Error::Error(ErrorKind kind, const std::string& message, const char* file, int line)
    : std::runtime_error(message), kind_(kind), file_(file), line_(line) {}

std::string Error::describe() const {
  std::string where = fmt::format("({}:{})", file_, line_);
  if (rank_ >= 0) return fmt::format("rank {}: {}: {} {}", rank_, kind_name(kind_), what(), where);
  return fmt::format("{}: {} {}", kind_name(kind_), what(), where);
}

}  // namespace e3
