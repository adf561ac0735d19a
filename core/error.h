// Errors: one exception type that knows which exit code it maps to, where it was raised
// and, once known, which rank raised it. Every failure reaches the user as one line.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace e3 {

// The exit codes are part of the user contract (README, "Exit codes").
enum class ErrorKind {
  Internal = 1,   // a bug or an unexpected library failure
  Usage = 2,      // bad command line
  Input = 3,      // bad JSONL data
  Model = 4,      // bad checkpoint, config, or a model that does not fit the request
  Output = 5,     // output directory problems: unwritable, fingerprint mismatch, HDF5 failure
  Verify = 6,     // `verify` found a problem
  Audit = 7,      // a capture audit failed: the forward pass did not produce what was asked
  Parallel = 8,   // MPI / NCCL failure
  NonFinite = 9,  // NaN/Inf in captured states under --on-nonfinite error
  Resumable = 75  // stopped early on a signal; rerun the same command to resume
};

int exit_code(ErrorKind kind);
const char* kind_name(ErrorKind kind);

// `text` as it may appear inside a log line or an error message: every control character (C0,
// DEL and the C1 range U+0080..U+009F) written as a JSON escape (\n, \t, \r, \u001b, \u009b)
// and every byte that is not part of valid UTF-8 as \xNN; all else as is. The one function that
// user text (ids, keys, names read from files) passes through on its way to a message, so that
// it can neither end the line (a fake "critical:" line after it) nor move a terminal's cursor.
std::string printable(std::string_view text);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message, const char* file, int line);

  ErrorKind kind() const { return kind_; }
  const char* file() const { return file_; }
  int line() const { return line_; }
  int rank() const { return rank_; }
  // Code that throws rarely knows its rank; the handler that does attaches it.
  void set_rank(int rank) { rank_ = rank; }
  // All ranks agreed on this failure and exit together: no MPI_Abort is needed.
  bool agreed() const { return agreed_; }
  void set_agreed() { agreed_ = true; }
  // "rank 3: input error: <message>". The place it was raised, " (model/loader.cpp:120)", is
  // added for internal errors, which are bugs, and when `with_place` (--log-level debug): a
  // user-facing error says what is wrong with the input, not where the code noticed.
  std::string describe(bool with_place = false) const;

 private:
  ErrorKind kind_;
  const char* file_;
  int line_;
  int rank_ = -1;
  bool agreed_ = false;
};

}  // namespace e3

#define E3_THROW(kind, ...) \
  throw ::e3::Error((kind), ::fmt::format(__VA_ARGS__), __FILE__, __LINE__)

#define E3_REQUIRE(cond, kind, ...)   \
  do {                                \
    if (!(cond)) E3_THROW(kind, __VA_ARGS__); \
  } while (0)
