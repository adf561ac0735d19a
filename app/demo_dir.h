// The embedded demo (a tiny checkpoint and its input.jsonl) that runs when no --model is given.
#pragma once

#include <filesystem>

namespace e3::app {

// The demo directory, found relative to the running binary (/proc/self/exe) at E3_DEMO_REL_DIR:
// an installed binary finds the installed copy, and the build tree holds a symlink at the same
// relative place, so no source path is compiled in. Throws a usage error naming the place looked
// at (and asking for --model) when it is not there.
std::filesystem::path demo_dir();

}  // namespace e3::app
