// The command line (CLI11) -> a validated request: a run, `verify DIR`, or `info DIR`.
#pragma once

#include <optional>
#include <string>

#include "jobs/info.h"
#include "jobs/run_config.h"

namespace e3::app {

enum class Command { Run, Verify, Info, Help };

struct Request {
  Command command = Command::Run;
  jobs::RunConfig run;
  std::filesystem::path verify_dir;
  jobs::InfoOptions info;
  std::string help_text;  // for Command::Help
  bool embedded_demo = false;  // no --model: the tiny checkpoint kept in the repository
};

// Throws e3::Error (usage) for anything invalid.
Request parse_command_line(int argc, char** argv);

}  // namespace e3::app
