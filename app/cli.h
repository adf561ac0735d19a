// The command line (CLI11) -> a validated request: a run, `verify DIR`, `stats DIR`, `info DIR`, `bench`, or
// `export SRC DEST`, or `tokenize`.
#pragma once

#include <string>

#include "jobs/bench.h"
#include "jobs/export.h"
#include "jobs/info.h"
#include "jobs/run_config.h"
#include "jobs/stats_command.h"
#include "jobs/tokenize_command.h"
#include "jobs/verify_command.h"

namespace e3::app {

enum class Command { Run, Verify, Stats, Info, Bench, Export, Tokenize, Help };

struct Request {
  Command command = Command::Run;
  jobs::RunConfig run;
  jobs::VerifyCommandOptions verify;
  jobs::StatsCommandOptions stats;
  jobs::InfoOptions info;
  jobs::BenchOptions bench;
  jobs::ExportOptions export_options;
  jobs::TokenizeOptions tokenize;
  std::string help_text;  // for Command::Help
  bool embedded_demo = false;  // no --model: the tiny checkpoint kept in the repository
};

// Throws e3::Error (usage) for anything invalid.
Request parse_command_line(int argc, char** argv);

}  // namespace e3::app
