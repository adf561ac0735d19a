// `eagle3_extract tokenize`: the token-id lines the extraction computes from a file of
// conversations or text (with the model's tokenizer and chat template), written as JSONL, or one
// sample shown with its token boundaries and its trained-on tokens marked (--show N).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

#include "core/environment.h"
#include "core/named_enum.h"
#include "io/chat_encoder.h"
#include "parallel/mpi_env.h"

namespace e3::jobs {

// --color: whether --show marks tokens with terminal colours.
enum class ColorMode { Auto, Always, Never };
inline constexpr NamedValue<ColorMode> kColorModeNames[] = {
    {ColorMode::Auto, "auto"}, {ColorMode::Always, "always"}, {ColorMode::Never, "never"}};
constexpr const auto& name_table(ColorMode) { return kColorModeNames; }

struct TokenizeOptions {
  std::filesystem::path model_dir;      // its config.json gives the vocabulary the ids must fit; may be empty
                                        // with tokenizer_dir given (the tokenizer's vocabulary then)
  std::filesystem::path tokenizer_dir;  // empty: model_dir
  std::filesystem::path chat_template;  // empty: the tokenizer's
  io::MaskMode mask = io::MaskMode::Assistant;
  std::filesystem::path data;
  std::filesystem::path out;            // OUT.jsonl; empty with --show
  std::optional<int64_t> show;          // --show N: print sample N instead of writing
  ColorMode color = ColorMode::Auto;
  int threads = 0;                      // 0: the cores of the node / ranks on it
  Environment env;                      // NO_COLOR
};

// The chat encoder options of a tokenizer directory and template (shared with the extraction,
// so that both compute the same ids).
io::ChatOptions chat_options(const std::filesystem::path& tokenizer_dir, const std::filesystem::path& chat_template,
                             io::MaskMode mask);

// Runs on rank 0 (one output, whatever the launcher); every rank returns the exit code.
int run_tokenize(const TokenizeOptions& options, const parallel::MpiEnv& mpi);

}  // namespace e3::jobs
