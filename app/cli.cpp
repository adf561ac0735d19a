#include "app/cli.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "app/demo_dir.h"
#include "core/environment.h"
#include "core/error.h"
#include "core/named_enum.h"
#include "jobs/part.h"
#include "kernels/backend.h"

namespace e3::app {
namespace {

// An enum-valued option: CLI11 hands the value to parse_named, which checks it against the
// enum's name table (core/named_enum.h) and throws the usage error that lists the names; the
// help line shows them, "ENUM:{auto,cuda,cpu}=auto".
template <typename E>
CLI::Option* add_named_option(CLI::App* app, const std::string& name, E& target, const std::string& help) {
  const CLI::Validator names(
      [name](std::string& text) {
        text = std::to_string(static_cast<int>(parse_named<E>(text, name)));  // what CLI11 converts to the enum
        return std::string();
      },
      "{" + joined_names<E>(",", ",") + "}");
  return app->add_option(name, target, help)->transform(names)->default_str(std::string(name_of(target)));
}

// The first argument CLI11 could not place, said as a person would, with the name most likely
// meant: "unknown option '--layer': did you mean --layers?", "unknown command 'verfiy': did you
// mean verify?". (CLI11's own message lists the arguments in reverse order and guesses nothing.)
std::string unexpected_argument(const CLI::App& app) {
  const CLI::App* owner = &app;
  std::vector<std::string> extras = app.remaining(false);
  if (extras.empty())
    for (const CLI::App* sub : app.get_subcommands())
      if (!(extras = sub->remaining(false)).empty()) {
        owner = sub;
        break;
      }
  if (extras.empty()) return "unexpected arguments";
  const std::string& first = extras.front();
  const auto suggestion = [](const std::vector<std::string>& names, std::string_view text) -> std::string {
    const std::vector<std::string_view> views(names.begin(), names.end());
    const std::optional<std::string_view> guess = closest_name(text, views);
    return guess ? fmt::format(": did you mean {}?", *guess) : "";
  };
  if (first.size() > 1 && first.front() == '-') {
    const std::string option = first.substr(0, first.find('='));
    std::vector<std::string> names;
    for (const CLI::Option* o : owner->get_options())
      for (const std::string& name : o->get_lnames()) names.push_back("--" + name);
    return fmt::format("unknown option '{}'{}{}", printable(option),
                       owner == &app ? "" : fmt::format(" for {}", owner->get_name()), suggestion(names, option));
  }
  if (owner == &app) {
    std::vector<std::string> commands;
    for (const CLI::App* sub : app.get_subcommands({})) commands.push_back(sub->get_name());
    const std::string guess = suggestion(commands, first);
    if (!guess.empty()) return fmt::format("unknown command '{}'{}", printable(first), guess);
    return fmt::format("unexpected argument '{}': a run takes only options; the commands are {}", printable(first),
                       fmt::join(commands, ", "));
  }
  return fmt::format("{}: unexpected argument '{}'", owner->get_name(), printable(first));
}

// What one command registered on the command line: its (sub)command, and the step that
// completes the request once CLI11 has parsed it (the checks CLI11 cannot make, the values it
// does not convert). The state that step needs is shared between the two.
struct Registered {
  CLI::App* app;
  std::function<void(Request&)> finish;
};

// A run (no subcommand): the options of the top-level command.
Registered add_run_options(CLI::App& app, Request& req) {
  jobs::RunConfig& rc = req.run;
  struct Given {
    std::string model, data, out = "eagle3_out", shard_size = "4G", part;
    std::vector<std::string> layers;  // one item per value given; each a comma-separated list
    bool no_space_check = false;
    CLI::Option *layers_opt = nullptr, *tp_opt = nullptr, *threads_opt = nullptr, *writer_threads_opt = nullptr;
  };
  auto g = std::make_shared<Given>();
  app.add_option("--model", g->model, "HuggingFace checkpoint directory (config.json + *.safetensors)");
  app.add_option("--data", g->data,
                 "JSONL input, one sample per line: {\"messages\": [...]} (OpenAI), {\"conversations\": [...]} "
                 "(ShareGPT), {\"text\": ...}, or {\"input_ids\": [int], \"loss_mask\": [0|1]}; \"id\" optional");
  app.add_option("--tokenizer", rc.tokenizer_dir,
                 "directory of the tokenizer (tokenizer.json or tiktoken.model) for text lines; default: --model");
  app.add_option("--chat-template", rc.chat_template,
                 "a Jinja chat template file to use instead of the tokenizer's own");
  add_named_option(&app, "--mask", rc.mask,
                   "the tokens of a conversation trained on (loss_mask 1): every assistant reply, the last one, or all");
  app.add_option("--out", g->out, "output directory for shard-*.h5 and manifest.json; rerunning resumes")
      ->capture_default_str();
  g->layers_opt = app.add_option("--layers", g->layers,
                                 "comma-separated capture ids, HF output_hidden_states numbering (0 = embeddings, "
                                 "k = output of layer k-1); default: EAGLE-3 preset [2, L/2, L-3]");
  add_named_option(&app, "--final", rc.final_mode,
                   "also store the last layer (both: last_hidden_state post-norm and last_hidden_state_prenorm)");
  g->tp_opt = app.add_option("--tp", rc.tp, "tensor-parallel size; default: all ranks. DP = ranks / TP");
  add_named_option(&app, "--backend", rc.backend, "compute backend (auto = cuda if a GPU is visible)");
  add_named_option(&app, "--comm", rc.comm,
                   "TP communicator (auto = nccl when every rank has its own GPU, else mpi)");
  app.add_option("--collective-timeout", rc.collective_timeout_s,
                 "seconds one step may take before the watchdog ends the job (a stuck collective)")
      ->capture_default_str();
  add_named_option(&app, "--dtype", rc.dtype, "storage dtype of hidden states (fp8: e4m3fn + a scale per row)");
  app.add_option("--max-seq-len", rc.max_seq_len, "longest sample; longer ones follow --on-long")->capture_default_str();
  add_named_option(&app, "--on-long", rc.on_long, "what samples over --max-seq-len do");
  add_named_option(&app, "--on-nonfinite", rc.on_nonfinite,
                   "a sample whose captured states hold NaN/Inf: error (stop the job, naming it) or skip (leave it "
                   "out, list it in its shard and the manifest, count it)");
  app.add_option("--max-skipped-fraction", rc.max_skipped_fraction,
                 "at the end of a run (and of a rerun), exit 9 when more than this fraction of the samples (of "
                 "this --part) were left out for non-finite states by --on-nonfinite skip")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--max-tokens-per-step", rc.max_tokens_per_step,
                 "token budget of one packed forward step (at least --max-seq-len)")
      ->capture_default_str();
  app.add_option("--samples-per-shard", rc.samples_per_shard,
                 "most samples in one output shard file (--shard-size usually cuts first)")
      ->capture_default_str();
  app.add_option("--shard-size", g->shard_size,
                 "most bytes in one output shard file, estimated from token counts; suffix K, M or G (powers of "
                 "1024); a single larger sample gets a shard of its own")
      ->capture_default_str();
  add_named_option(&app, "--log-level", rc.log_level, "log level, the same on every rank");
  app.add_option("--log-dir", rc.log_dir,
                 "also write each rank's log lines to DIR/rank-NNNNN.log (appended; "
                 "part-IIII-of-PPPP.rank-NNNNN.log with --part)");
  g->threads_opt =
      app.add_option("--threads", rc.threads, "CPU backend threads per rank; default: cores on the node / ranks on it");
  g->writer_threads_opt = app.add_option(
      "--writer-threads", rc.writer_threads,
      "threads of each writing rank that check the states for NaN/Inf and write them; default: cores on the node / "
      "writing ranks on it, at most 8");
  app.add_option("--progress-interval", rc.progress_interval_s, "seconds between progress lines")->capture_default_str();
  add_named_option(&app, "--expert-dequant", rc.expert_dequant,
                   "quantized MoE experts on the GPU: gemm (Hopper: convert each weight tile inside the GEMM; no "
                   "buffer, so less memory; elsewhere as scratch) or scratch (dequantize a layer's experts into a "
                   "bf16 buffer, then the GEMMs)");
  app.add_flag("--resume-checksums", rc.resume_checksums,
               "on a rerun, read every shard this job committed before and compare it with the manifest's "
               "checksum (sizes only otherwise); one that differs is moved aside and written again. Reads the "
               "whole output: `verify` makes the same check without rewriting");
  app.add_flag("--no-space-check", g->no_space_check,
               "start even when the file system of --out has less free space than the estimated output");
  app.add_option("--part", g->part,
                 "I/P: compute only shards whose index % P == I (0 <= I < P), so that P jobs can share one --out; "
                 "'slurm' takes I and P from the Slurm array task (SLURM_ARRAY_TASK_ID, _MIN, _STEP, _COUNT)");
  return {&app, [g](Request& req) {
            jobs::RunConfig& rc = req.run;
            req.command = Command::Run;
            std::string model = g->model, data = g->data;
            if (model.empty()) {
              E3_REQUIRE(data.empty(), ErrorKind::Usage, "--data needs --model");
              req.embedded_demo = true;
              const auto demo = demo_dir();
              model = demo.string();
              data = (demo / "input.jsonl").string();
            }
            E3_REQUIRE(!data.empty(), ErrorKind::Usage, "--model needs --data (a JSONL file)");
            rc.model_dir = model;
            rc.data_path = data;
            rc.out_dir = g->out;
            if (g->layers_opt->count() > 0) {
              rc.layers.emplace();
              for (const std::string& list : g->layers) {
                const std::vector<int> ids = jobs::parse_capture_ids(list);
                rc.layers->insert(rc.layers->end(), ids.begin(), ids.end());
              }
            }
            // 0 stands for "not given" inside RunConfig; typed on the command line it is a mistake.
            E3_REQUIRE(g->tp_opt->count() == 0 || rc.tp > 0, ErrorKind::Usage, "--tp must be positive, not {}", rc.tp);
            E3_REQUIRE(g->threads_opt->count() == 0 || rc.threads > 0, ErrorKind::Usage,
                       "--threads must be positive, not {}", rc.threads);
            E3_REQUIRE(g->writer_threads_opt->count() == 0 || rc.writer_threads > 0, ErrorKind::Usage,
                       "--writer-threads must be positive, not {}", rc.writer_threads);
            E3_REQUIRE(rc.max_seq_len > 0, ErrorKind::Usage, "--max-seq-len must be positive");
            E3_REQUIRE(rc.max_tokens_per_step > 0, ErrorKind::Usage, "--max-tokens-per-step must be positive");
            E3_REQUIRE(rc.samples_per_shard > 0, ErrorKind::Usage, "--samples-per-shard must be positive");
            rc.shard_size = jobs::parse_byte_size(g->shard_size, "--shard-size");
            E3_REQUIRE(rc.progress_interval_s > 0, ErrorKind::Usage, "--progress-interval must be positive");
            E3_REQUIRE(rc.collective_timeout_s > 0, ErrorKind::Usage, "--collective-timeout must be positive");
            rc.space_check = !g->no_space_check;
            if (!g->part.empty()) {
              rc.part = jobs::parse_part(g->part, rc.env);
              rc.part_given = true;
            }
            rc.faults = jobs::fault_injection_from(rc.env);
          }};
}

Registered add_verify_options(CLI::App& app, Request& req) {
  auto* verify = app.add_subcommand("verify", "check an output directory; non-zero exit naming the first problem");
  auto dir = std::make_shared<std::string>();
  verify->add_option("DIR", *dir, "output directory")->required();
  verify->add_flag("--allow-incomplete", req.verify.allow_incomplete,
                   "pass (exit 0) on a run that is not complete yet, checking what is there; without it an "
                   "incomplete run exits 6");
  auto* threads =
      verify->add_option("--threads", req.verify.threads, "shard files read at once; default: the cores of the node");
  return {verify, [dir, threads](Request& req) {
            req.command = Command::Verify;
            req.verify.dir = *dir;
            E3_REQUIRE(threads->count() == 0 || req.verify.threads > 0, ErrorKind::Usage,
                       "verify --threads must be positive, not {}", req.verify.threads);
          }};
}

Registered add_stats_options(CLI::App& app, Request& req) {
  auto* stats = app.add_subcommand(
      "stats", "RMS, absolute maximum and NaN/Inf counts of every stored state, sample lengths and the loss mask");
  auto dir = std::make_shared<std::string>();
  stats->add_option("DIR", *dir, "output directory (finished, or a partial run: what is there)")->required();
  auto svg = std::make_shared<std::string>(req.stats.svg.string());
  stats->add_option("--svg", *svg, "the same figures drawn, an SVG file (not inside DIR)")->capture_default_str();
  auto json = std::make_shared<std::string>();
  stats->add_option("--json", *json, "also write the figures as JSON to this file (not inside DIR)");
  auto* threads =
      stats->add_option("--threads", req.stats.threads, "shard files read at once; default: the cores of the node");
  return {stats, [dir, svg, json, threads](Request& req) {
            req.command = Command::Stats;
            req.stats.dir = *dir;
            E3_REQUIRE(!svg->empty(), ErrorKind::Usage, "stats --svg needs a file name");
            req.stats.svg = *svg;
            req.stats.json = *json;
            E3_REQUIRE(threads->count() == 0 || req.stats.threads > 0, ErrorKind::Usage,
                       "stats --threads must be positive, not {}", req.stats.threads);
          }};
}

Registered add_info_options(CLI::App& app, Request& req) {
  auto* info = app.add_subcommand("info", "print the model config, default capture ids and memory per rank");
  auto dir = std::make_shared<std::string>();
  info->add_option("DIR", *dir, "HuggingFace checkpoint directory (only config.json is read)")->required();
  info->add_option("--tp", req.info.tp, "tensor-parallel size to plan for")->capture_default_str();
  info->add_option("--max-tokens-per-step", req.info.max_tokens_per_step, "token budget of one step")
      ->capture_default_str();
  info->add_option("--max-seq-len", req.info.max_seq_len, "longest sample")->capture_default_str();
  info->add_option("--gpu-memory-gib", req.info.gpu_memory_gib, "say whether a rank fits a GPU of this size");
  return {info, [dir](Request& req) {
            req.command = Command::Info;
            req.info.model_dir = *dir;
            E3_REQUIRE(req.info.tp > 0, ErrorKind::Usage, "info --tp must be positive");
          }};
}

Registered add_bench_options(CLI::App& app, Request& req) {
  auto* bench = app.add_subcommand("bench", "tokens/s and MFU of a model shape with random weights (no checkpoint)");
  jobs::BenchOptions& b = req.bench;
  bench->add_option("--config", b.config, "a config.json (e.g. shared/bench/configs/llama3_8b.json)")->required();
  bench->add_option("--batch", b.batch, "sequences per step")->capture_default_str();
  bench->add_option("--seq", b.seq, "tokens per sequence")->capture_default_str();
  bench->add_option("--iters", b.iters, "timed steps")->capture_default_str();
  bench->add_option("--warmup", b.warmup, "untimed steps first")->capture_default_str();
  bench->add_option("--num-layers", b.num_layers, "override num_hidden_layers");
  add_named_option(bench, "--backend", b.backend, "compute backend");
  add_named_option(bench, "--comm", b.comm, "TP communicator");
  add_named_option(bench, "--expert-dequant", b.expert_dequant, "quantized MoE experts on the GPU");
  add_named_option(bench, "--dtype", b.dtype, "storage dtype of the shards --out writes");
  bench->add_option("--out", b.out,
                    "also time end to end: the same steps with 3 ids + final written as --dtype shards under this directory");
  return {bench, [](Request& req) {
            req.command = Command::Bench;
            const jobs::BenchOptions& b = req.bench;
            E3_REQUIRE(b.batch > 0 && b.seq > 0 && b.iters > 0 && b.warmup >= 0, ErrorKind::Usage,
                       "bench: --batch, --seq and --iters must be positive");
          }};
}

Registered add_tokenize_options(CLI::App& app, Request& req) {
  auto* tokenize = app.add_subcommand(
      "tokenize", "the token-id lines the extraction computes from conversations or text (or --show one sample)");
  jobs::TokenizeOptions& t = req.tokenize;
  tokenize->add_option("--model", t.model_dir,
                       "HuggingFace model directory: its tokenizer, and its config.json's vocab_size the ids must fit");
  tokenize->add_option("--tokenizer", t.tokenizer_dir, "tokenizer directory; default: --model");
  tokenize->add_option("--chat-template", t.chat_template, "a Jinja chat template file instead of the tokenizer's");
  add_named_option(tokenize, "--mask", t.mask, "the tokens of a conversation trained on");
  tokenize->add_option("--data", t.data, "JSONL input (see the run's --data)")->required();
  auto* out = tokenize->add_option("--out", t.out, "the token-id JSONL to write (must not exist)");
  auto* show = tokenize->add_option("--show", t.show,
                                    "print sample N (0-based) with its token boundaries and trained-on tokens marked, "
                                    "instead of writing --out");
  add_named_option(tokenize, "--color", t.color, "--show in terminal colours (auto: when stdout is a terminal and "
                                                 "NO_COLOR is unset)");
  auto* threads = tokenize->add_option("--threads", t.threads, "lines tokenized at once; default: the cores of the node");
  return {tokenize, [out, show, threads](Request& req) {
            jobs::TokenizeOptions& t = req.tokenize;
            req.command = Command::Tokenize;
            t.env = req.run.env;
            E3_REQUIRE(!t.model_dir.empty() || !t.tokenizer_dir.empty(), ErrorKind::Usage,
                       "tokenize needs --model DIR (or --tokenizer DIR alone, the ids then checked against the "
                       "tokenizer's own vocabulary)");
            E3_REQUIRE((out->count() > 0) != (show->count() > 0), ErrorKind::Usage,
                       "tokenize needs exactly one of --out FILE and --show N");
            E3_REQUIRE(threads->count() == 0 || t.threads > 0, ErrorKind::Usage,
                       "tokenize --threads must be positive, not {}", t.threads);
          }};
}

Registered add_export_options(CLI::App& app, Request& req) {
  auto* exporter = app.add_subcommand(
      "export", "write a verified output directory as the per-sample files a trainer reads (docs/TRAINERS.md)");
  jobs::ExportOptions& o = req.export_options;
  // Required, so no default to show.
  add_named_option(exporter, "--format", o.format, "the trainer whose files to write")->required()->default_str("");
  struct Paths {
    std::string src, dest;
  };
  auto paths = std::make_shared<Paths>();
  exporter->add_option("SRC", paths->src, "output directory of a finished run")->required();
  exporter->add_option("DEST", paths->dest,
                       "new or empty directory to write into (an interrupted export into it resumes)")
      ->required();
  auto* threads =
      exporter->add_option("--threads", o.threads, "shard files exported at once; default: the cores of the node");
  auto* writers = exporter->add_option(
      "--writers", o.writers_per_shard,
      "threads writing each shard's files; default: the threads --threads leaves per shard exported at once, "
      "less its reader, 2 to 4");
  exporter->add_flag("--skip-verify", o.skip_verify,
                     "do not make verify's checks first (checksums and values of every shard): for a SRC that "
                     "`eagle3_extract verify` has just passed");
  auto no_space_check = std::make_shared<bool>(false);
  exporter->add_flag("--no-space-check", *no_space_check,
                     "start even when DEST's file system has less free space than the estimated export");
  auto vocab_size = std::make_shared<int64_t>(0);
  auto* vocab = exporter->add_option(
      "--draft-vocab-size", *vocab_size,
      "tokens of the draft model's vocabulary, the most frequent masked ones, whose mapping files are written; "
      "default: 32000, or the target's whole vocabulary when smaller");
  return {exporter, [paths, threads, writers, vocab, vocab_size, no_space_check](Request& req) {
            jobs::ExportOptions& o = req.export_options;
            req.command = Command::Export;
            o.space_check = !*no_space_check;
            o.src = paths->src;
            o.dest = paths->dest;
            E3_REQUIRE(threads->count() == 0 || o.threads > 0, ErrorKind::Usage,
                       "export --threads must be positive, not {}", o.threads);
            E3_REQUIRE(writers->count() == 0 || o.writers_per_shard > 0, ErrorKind::Usage,
                       "export --writers must be positive, not {}", o.writers_per_shard);
            if (vocab->count() > 0) {
              E3_REQUIRE(*vocab_size > 0, ErrorKind::Usage, "export --draft-vocab-size must be positive, not {}",
                         *vocab_size);
              o.draft_vocab_size = *vocab_size;
            }
          }};
}

}  // namespace

Request parse_command_line(int argc, char** argv) {
  Request req;
  // The one look at the environment: every command reads the snapshot, never getenv.
  req.run.env = Environment::of_process();
  req.bench.env = req.run.env;
  req.info.env = req.run.env;
  CLI::App app{
      "eagle3_extract: runs a language model, tensor-parallel over MPI ranks, over a tokenized JSONL dataset and "
      "writes the hidden states of chosen layers per sample to HDF5 (EAGLE-3 draft-model training data).\n"
      "With no --model it runs the tiny demo checkpoint installed with it, writing ./eagle3_out."};
  app.set_help_all_flag("--help-all", "Show help for the subcommands too");
  app.set_version_flag("--version", std::string("eagle3_extract " E3_VERSION_STRING "\n") + kernels::build_description(),
                       "Print the version and what the build runs on, and exit");
  const Registered run = add_run_options(app, req);
  const Registered subcommands[] = {add_verify_options(app, req), add_info_options(app, req),
                                    add_bench_options(app, req), add_export_options(app, req),
                                    add_tokenize_options(app, req), add_stats_options(app, req)};
  app.require_subcommand(0, 1);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    req.command = Command::Help;
    req.help_text = app.help();
    return req;
  } catch (const CLI::CallForVersion& v) {
    req.command = Command::Help;
    req.help_text = std::string(v.what()) + "\n";
    return req;
  } catch (const CLI::CallForAllHelp&) {
    req.command = Command::Help;
    req.help_text = app.help("", CLI::AppFormatMode::All);
    return req;
  } catch (const CLI::ExtrasError&) {
    E3_THROW(ErrorKind::Usage, "{} (see --help)", unexpected_argument(app));
  } catch (const CLI::ParseError& e) {
    E3_THROW(ErrorKind::Usage, "{} (see --help)", e.what());
  } catch (const Error& e) {  // a named option's value (add_named_option)
    E3_THROW(e.kind(), "{} (see --help)", e.what());
  }
  for (const Registered& command : subcommands)
    if (command.app->parsed()) {
      command.finish(req);
      return req;
    }
  run.finish(req);
  return req;
}

}  // namespace e3::app
