#include "core/json_read.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace e3 {

using nlohmann::json;

namespace {

const char* file_type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

// The library's message without its "[json.exception.parse_error.101] " tag, clipped: it
// quotes the offending token, which can be as long as the input.
std::string library_message(const json::exception& e) {
  std::string_view m = e.what();
  if (!m.empty() && m.front() == '[') {
    const size_t end = m.find("] ");
    if (end != std::string_view::npos) m.remove_prefix(end + 2);
  }
  return clip(m, 200);
}

// Where the parser is in the document: one frame per open object or array.
struct Frame {
  bool array = false;
  std::string key;    // objects: the last key read
  int64_t count = 0;  // arrays: elements begun
};

std::string describe_path(const std::vector<Frame>& frames) {
  std::string out;
  for (size_t i = 0; i < frames.size(); ++i) {
    const Frame& f = frames[i];
    if (f.array) {
      // An element that failed before it began is the next one.
      const int64_t index = i + 1 == frames.size() ? f.count : f.count - 1;
      out += fmt::format("[{}]", index < 0 ? 0 : index);
    } else if (!f.key.empty() || i + 1 < frames.size()) {
      if (!out.empty()) out += '.';
      out += clip(f.key, 64);
    }
  }
  return clip(out, 160);
}

}  // namespace

RegularFile::RegularFile(const std::filesystem::path& path, ErrorKind kind, std::string_view prefix,
                         std::string_view hint) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, in the kernel,
  // deaf to SIGTERM. It changes nothing for a regular file.
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  E3_REQUIRE(fd_ >= 0, kind, "{}cannot read {}: {}{}", prefix, path.string(), std::strerror(errno), hint);
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    E3_THROW(kind, "{}cannot read {}: {}{}", prefix, path.string(), std::strerror(err), hint);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    E3_THROW(kind, "{}cannot read {}: it is {}, not a regular file{}", prefix, path.string(),
             file_type_name(st.st_mode), hint);
  }
  size_ = static_cast<uint64_t>(st.st_size);
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

RegularFile::RegularFile(RegularFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), size_(std::exchange(other.size_, 0)) {}

std::string RegularFile::read_all(const std::filesystem::path& path, ErrorKind kind) const {
  std::string out;
  out.resize(static_cast<size_t>(size_));
  size_t done = 0;
  // Read to end of file rather than to the size seen at open: a file may grow meanwhile.
  for (;;) {
    if (done == out.size()) out.resize(out.size() + 65536);
    const ssize_t n = ::read(fd_, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    E3_REQUIRE(n >= 0, kind, "cannot read {}: {}", path.string(), std::strerror(errno));
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return out;
}

bool is_plain_file_name(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

std::string clip(std::string_view text, size_t max_chars) {
  if (text.size() <= max_chars) return printable(text);
  size_t n = max_chars;  // never split a UTF-8 character
  while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  return fmt::format("{}... ({} bytes)", printable(text.substr(0, n)), text.size());
}

std::string json_excerpt(const json& value, size_t max_chars) {
  // Strings can be as long as the file; cut them before dumping, not after.
  if (value.is_string()) {
    const auto& s = value.get_ref<const std::string&>();
    if (s.size() > max_chars)
      return clip(json(s.substr(0, max_chars)).dump(-1, ' ', false, json::error_handler_t::replace), max_chars + 2);
  }
  // `replace`: a string cut inside a UTF-8 sequence must not make the message itself throw.
  return clip(value.dump(-1, ' ', false, json::error_handler_t::replace), max_chars);
}

json parse_json(std::string_view text, ErrorKind kind, const std::string& where, std::string_view label) {
  std::vector<Frame> frames;
  auto at = [&] {
    const std::string path = describe_path(frames);
    return path.empty() ? std::string() : fmt::format(" at key '{}'", path);
  };
  // The callback sees every container open before it is built, so the depth bound holds
  // before anything deep exists. `depth` counts the containers around the event.
  const json::parser_callback_t track = [&](int depth, json::parse_event_t event, json& parsed) {
    const auto d = static_cast<size_t>(depth);
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        frames.resize(d);
        if (d > 0 && frames[d - 1].array) ++frames[d - 1].count;
        E3_REQUIRE(depth < kMaxJsonDepth, kind, "{}: {}{}: nested deeper than {} levels", where, label, at(),
                   kMaxJsonDepth);
        frames.push_back(Frame{event == json::parse_event_t::array_start, {}, 0});
        break;
      case json::parse_event_t::key:
        frames.resize(d);
        if (d > 0) frames[d - 1].key = parsed.get<std::string>();
        break;
      case json::parse_event_t::value:
        frames.resize(d);
        if (d > 0 && frames[d - 1].array) ++frames[d - 1].count;
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        frames.resize(d);
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), track);
  } catch (const json::exception& e) {
    E3_THROW(kind, "{}: {}{}: {}", where, label, at(), library_message(e));
  }
}

json read_json_file(const std::filesystem::path& path, ErrorKind kind, std::string_view prefix,
                    std::string_view hint) {
  const RegularFile file(path, kind, prefix, hint);
  return parse_json(file.read_all(path, kind), kind, path.string());
}

}  // namespace e3
