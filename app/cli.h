// The command line (CLI11) -> a validated request: a run, `verify DIR`, `info DIR`, `bench`, or
// `export SRC DEST`.
#pragma once

#include <optional>
#include <string>

#include "jobs/bench.h"
#include "jobs/export.h"
#include "jobs/info.h"
#include "jobs/run_config.h"

namespace e3::app {

enum class Command { Run, Verify, Info, Bench, Export, Help };

struct Request {
  Command command = Command::Run;
  jobs::RunConfig run;
  std::filesystem::path verify_dir;
  bool verify_allow_incomplete = false;  // verify --allow-incomplete: a partial run passes
  int verify_threads = 0;                // verify --threads: shards read at once (0: the cores)
  jobs::InfoOptions info;
  jobs::BenchOptions bench;
  jobs::ExportOptions export_options;
  std::string help_text;  // for Command::Help
  bool embedded_demo = false;  // no --model: the tiny checkpoint kept in the repository
};

// Throws e3::Error (usage) for anything invalid.
Request parse_command_line(int argc, char** argv);

}  // namespace e3::app
