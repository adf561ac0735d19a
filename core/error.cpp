#include "core/error.h"

#include <cstdint>

#include "core/utf8.h"

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

std::string Error::describe(bool with_place) const {
  const std::string where =
      with_place || kind_ == ErrorKind::Internal ? fmt::format(" ({}:{})", file_, line_) : std::string();
  if (rank_ >= 0) return fmt::format("rank {}: {}: {}{}", rank_, kind_name(kind_), what(), where);
  return fmt::format("{}: {}{}", kind_name(kind_), what(), where);
}

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7F) {
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    if (c < 0x80) {
      switch (c) {
        case '\n': out += "\\n"; break;
        case '\t': out += "\\t"; break;
        case '\r': out += "\\r"; break;
        default: out += fmt::format("\\u{:04x}", c);
      }
      ++i;
      continue;
    }
    char32_t cp = 0;
    const size_t n = decode_utf8_sequence(text, i, cp);
    if (n == 0) {
      out += fmt::format("\\x{:02x}", c);
      ++i;
    } else if (cp <= 0x9F) {
      out += fmt::format("\\u{:04x}", static_cast<uint32_t>(cp));  // C1: U+009B alone is a CSI to some terminals
      i += n;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

}  // namespace e3
