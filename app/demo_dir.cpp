#include "app/demo_dir.h"

#include <system_error>

#include "core/error.h"

namespace e3::app {

std::filesystem::path demo_dir() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  E3_REQUIRE(!ec, ErrorKind::Usage,
             "no --model given, and the embedded demo cannot be located: /proc/self/exe is unreadable ({}); pass "
             "--model DIR --data FILE.jsonl",
             ec.message());
  const fs::path dir = (exe.parent_path() / E3_DEMO_REL_DIR).lexically_normal();
  // These two say whether the demo is there at all; a missing or truncated model.safetensors is
  // the loader's to report, naming the file.
  E3_REQUIRE(fs::is_regular_file(dir / "config.json", ec) && fs::is_regular_file(dir / "input.jsonl", ec),
             ErrorKind::Usage,
             "no --model given, and the embedded demo is not at {} (looked up from the binary {}; it is installed "
             "by `cmake --install`); pass --model DIR --data FILE.jsonl",
             dir.string(), exe.string());
  return dir;
}

}  // namespace e3::app
