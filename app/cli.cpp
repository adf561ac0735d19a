#include "app/cli.h"

#include <cstdlib>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "app/demo_dir.h"
#include "io/dataset.h"
#include "jobs/option_names.h"
#include "jobs/part.h"
#include "core/error.h"
#include "model/capture.h"

namespace e3::app {
namespace {

// CLI11 checks the value against the option's name table (jobs/option_names.h) and stores it
// as the enum; the error lists the valid names, the help shows them.
template <typename E>
CLI::Validator one_of_names() {
  std::string names;
  for (const auto& n : jobs::name_table(E{})) names += (names.empty() ? "" : ",") + std::string(n.name);
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const std::optional<E> value = jobs::value_named<E>(text);
        if (!value) return fmt::format("must be {}, not '{}'", jobs::valid_names<E>(), text);
        text = std::to_string(static_cast<int>(*value));  // what CLI11 converts to the enum
        return {};
      },
      "{" + names + "}");
}

template <typename E>
CLI::Option* add_named_option(CLI::App* app, const std::string& name, E& target, const std::string& help) {
  return app->add_option(name, target, help)->transform(one_of_names<E>())->default_str(std::string(jobs::name_of(target)));
}

}  // namespace

Request parse_command_line(int argc, char** argv) {
  const Environment env = Environment::of_process();  // the one look at the environment
  Request req;
  jobs::RunConfig& rc = req.run;
  CLI::App app{
      "eagle3_extract: runs a language model, tensor-parallel over MPI ranks, over a tokenized JSONL dataset and "
      "writes the hidden states of chosen layers per sample to HDF5 (EAGLE-3 draft-model training data).\n"
      "With no --model it runs the tiny demo checkpoint installed with it, writing ./eagle3_out."};
  app.set_help_all_flag("--help-all", "Show help for the subcommands too");
  app.set_version_flag("--version", "eagle3_extract " E3_VERSION_STRING, "Print the version and exit");

  std::string model, data, out = "eagle3_out", final_mode = "post-norm", dtype = "bf16", on_long = "skip",
              on_nonfinite = "error";
  std::vector<std::string> layers;  // one item per value given; each a comma-separated list
  app.add_option("--model", model, "HuggingFace checkpoint directory (config.json + *.safetensors)");
  app.add_option("--data", data, "JSONL input: {\"id\": str, \"input_ids\": [int], \"loss_mask\": [0|1]} per line");
  app.add_option("--out", out, "output directory for shard-*.h5 and manifest.json; rerunning resumes")
      ->capture_default_str();
  auto* layers_opt = app.add_option("--layers", layers,
                                    "comma-separated capture ids, HF output_hidden_states numbering (0 = embeddings, "
                                    "k = output of layer k-1); default: EAGLE-3 preset [2, L/2, L-3]");
  app.add_option("--final", final_mode, "also store the last layer: post-norm | pre-norm | both | none (both: last_hidden_state post-norm and last_hidden_state_prenorm)")->capture_default_str();
  auto* tp_opt = app.add_option("--tp", rc.tp, "tensor-parallel size; default: all ranks. DP = ranks / TP");
  add_named_option(&app, "--backend", rc.backend, "auto | cuda | cpu (auto = cuda if a GPU is visible)");
  add_named_option(&app, "--comm", rc.comm,
                   "TP communicator: auto | nccl | mpi (auto = nccl when every rank has its own GPU, else mpi)");
  app.add_option("--collective-timeout", rc.collective_timeout_s,
                 "seconds one step may take before the watchdog ends the job (a stuck collective)")
      ->capture_default_str();
  app.add_option("--dtype", dtype, "storage dtype of hidden states: bf16 | fp16 | fp32 | fp8 (e4m3fn + a scale per row)")->capture_default_str();
  app.add_option("--max-seq-len", rc.max_seq_len, "longest sample; longer ones follow --on-long")->capture_default_str();
  app.add_option("--on-long", on_long, "samples over --max-seq-len: skip | truncate | error")->capture_default_str();
  app.add_option("--on-nonfinite", on_nonfinite,
                 "a sample whose captured states hold NaN/Inf: error (stop the job, naming it) | skip (leave it out, "
                 "list it in its shard and the manifest, count it)")
      ->capture_default_str();
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
  std::string shard_size = "4G";
  app.add_option("--shard-size", shard_size,
                 "most bytes in one output shard file, estimated from token counts; suffix K, M or G (powers of "
                 "1024); a single larger sample gets a shard of its own")
      ->capture_default_str();
  add_named_option(&app, "--log-level", rc.log_level, "trace | debug | info | warn | error, the same on every rank");
  app.add_option("--log-dir", rc.log_dir,
                 "also write each rank's log lines to DIR/rank-NNNNN.log (appended; "
                 "part-IIII-of-PPPP.rank-NNNNN.log with --part)");
  auto* threads_opt = app.add_option("--threads", rc.threads,
                                     "CPU backend threads per rank; default: cores on the node / ranks on it");
  app.add_option("--progress-interval", rc.progress_interval_s, "seconds between progress lines")->capture_default_str();
  add_named_option(&app, "--expert-dequant", rc.expert_dequant,
                   "quantized MoE experts on the GPU: scratch (dequantize a layer's experts into a bf16 buffer, "
                   "then the GEMMs; faster) | gemm (Hopper: convert each weight tile inside the GEMM; no buffer, "
                   "so less memory)");
  app.add_flag("--resume-checksums", rc.resume_checksums,
               "on a rerun, read every shard this job committed before and compare it with the manifest's "
               "checksum (sizes only otherwise); one that differs is moved aside and written again. Reads the "
               "whole output: `verify` makes the same check without rewriting");
  bool no_space_check = false;
  app.add_flag("--no-space-check", no_space_check,
               "start even when the file system of --out has less free space than the estimated output");
  std::string part;
  app.add_option("--part", part,
                 "I/P: compute only shards whose index % P == I (0 <= I < P), so that P jobs can share one --out; "
                 "'slurm' takes I and P from the Slurm array task (SLURM_ARRAY_TASK_ID, _MIN, _STEP, _COUNT)");

  auto* verify = app.add_subcommand("verify", "check an output directory; non-zero exit naming the first problem");
  std::string verify_dir;
  verify->add_option("DIR", verify_dir, "output directory")->required();
  verify->add_flag("--allow-incomplete", req.verify_allow_incomplete,
                   "pass (exit 0) on a run that is not complete yet, checking what is there; without it an "
                   "incomplete run exits 6");
  auto* verify_threads_opt =
      verify->add_option("--threads", req.verify_threads, "shard files read at once; default: the cores of the node");

  auto* info = app.add_subcommand("info", "print the model config, default capture ids and memory per rank");
  std::string info_dir;
  info->add_option("DIR", info_dir, "HuggingFace checkpoint directory (only config.json is read)")->required();
  info->add_option("--tp", req.info.tp, "tensor-parallel size to plan for")->capture_default_str();
  info->add_option("--max-tokens-per-step", req.info.max_tokens_per_step, "token budget of one step")
      ->capture_default_str();
  info->add_option("--max-seq-len", req.info.max_seq_len, "longest sample")->capture_default_str();
  info->add_option("--gpu-memory-gib", req.info.gpu_memory_gib, "say whether a rank fits a GPU of this size");
  auto* bench = app.add_subcommand("bench", "tokens/s and MFU of a model shape with random weights (no checkpoint)");
  bench->add_option("--config", req.bench.config, "a config.json (e.g. shared/bench/configs/llama3_8b.json)")->required();
  bench->add_option("--batch", req.bench.batch, "sequences per step")->capture_default_str();
  bench->add_option("--seq", req.bench.seq, "tokens per sequence")->capture_default_str();
  bench->add_option("--iters", req.bench.iters, "timed steps")->capture_default_str();
  bench->add_option("--warmup", req.bench.warmup, "untimed steps first")->capture_default_str();
  bench->add_option("--num-layers", req.bench.num_layers, "override num_hidden_layers");
  add_named_option(bench, "--backend", req.bench.backend, "auto | cuda | cpu");
  add_named_option(bench, "--comm", req.bench.comm, "auto | nccl | mpi");
  add_named_option(bench, "--expert-dequant", req.bench.expert_dequant, "scratch | gemm (quantized experts)");
  bench->add_option("--dtype", req.bench.dtype, "storage dtype of the shards --out writes: bf16 | fp16 | fp32 | fp8")
      ->capture_default_str();
  bench->add_option("--out", req.bench.out,
                    "also time end to end: the same steps with 3 ids + final written as --dtype shards under this directory");
  auto* exporter = app.add_subcommand(
      "export", "write a verified output directory as the per-sample files a trainer reads (docs/TRAINERS.md)");
  std::string export_format, export_src, export_dest;
  exporter->add_option("--format", export_format, "speculators | specforge | modelopt")->required();
  exporter->add_option("SRC", export_src, "output directory of a finished run")->required();
  exporter->add_option("DEST", export_dest,
                       "new or empty directory to write into (an interrupted export into it resumes)")
      ->required();
  auto* export_threads_opt = exporter->add_option(
      "--threads", req.export_options.threads, "shard files exported at once; default: the cores of the node");
  exporter->add_flag("--skip-verify", req.export_options.skip_verify,
                     "do not make verify's checks first (checksums and values of every shard): for a SRC that "
                     "`eagle3_extract verify` has just passed");
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
  } catch (const CLI::ParseError& e) {
    E3_THROW(ErrorKind::Usage, "{} (see --help)", e.what());
  }

  if (verify->parsed()) {
    req.command = Command::Verify;
    req.verify_dir = verify_dir;
    E3_REQUIRE(verify_threads_opt->count() == 0 || req.verify_threads > 0, ErrorKind::Usage,
               "verify --threads must be positive, not {}", req.verify_threads);
    return req;
  }
  if (exporter->parsed()) {
    req.command = Command::Export;
    req.export_options.format = jobs::parse_export_format(export_format);
    req.export_options.src = export_src;
    req.export_options.dest = export_dest;
    E3_REQUIRE(export_threads_opt->count() == 0 || req.export_options.threads > 0, ErrorKind::Usage,
               "export --threads must be positive, not {}", req.export_options.threads);
    return req;
  }
  if (bench->parsed()) {
    req.command = Command::Bench;
    req.bench.env = env;
    E3_REQUIRE(req.bench.batch > 0 && req.bench.seq > 0 && req.bench.iters > 0 && req.bench.warmup >= 0,
               ErrorKind::Usage, "bench: --batch, --seq and --iters must be positive");
    return req;
  }
  if (info->parsed()) {
    req.command = Command::Info;
    req.info.model_dir = info_dir;
    E3_REQUIRE(req.info.tp > 0, ErrorKind::Usage, "info --tp must be positive");
    return req;
  }

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
  rc.out_dir = out;
  if (layers_opt->count() > 0) {
    rc.layers.emplace();
    for (const std::string& list : layers) {
      const std::vector<int> ids = jobs::parse_capture_ids(list);
      rc.layers->insert(rc.layers->end(), ids.begin(), ids.end());
    }
  }
  rc.final_mode = model::parse_final_mode(final_mode);
  rc.dtype = parse_storage_dtype(dtype);
  rc.on_long = io::parse_on_long(on_long);
  rc.on_nonfinite = jobs::parse_on_nonfinite(on_nonfinite);
  // 0 stands for "not given" inside RunConfig; typed on the command line it is a mistake.
  E3_REQUIRE(tp_opt->count() == 0 || rc.tp > 0, ErrorKind::Usage, "--tp must be positive, not {}", rc.tp);
  E3_REQUIRE(threads_opt->count() == 0 || rc.threads > 0, ErrorKind::Usage, "--threads must be positive, not {}",
             rc.threads);
  E3_REQUIRE(rc.max_seq_len > 0, ErrorKind::Usage, "--max-seq-len must be positive");
  E3_REQUIRE(rc.max_tokens_per_step > 0, ErrorKind::Usage, "--max-tokens-per-step must be positive");
  E3_REQUIRE(rc.samples_per_shard > 0, ErrorKind::Usage, "--samples-per-shard must be positive");
  rc.shard_size = jobs::parse_byte_size(shard_size, "--shard-size");
  E3_REQUIRE(rc.progress_interval_s > 0, ErrorKind::Usage, "--progress-interval must be positive");
  E3_REQUIRE(rc.collective_timeout_s > 0, ErrorKind::Usage, "--collective-timeout must be positive");
  rc.space_check = !no_space_check;
  rc.env = env;
  if (!part.empty()) {
    rc.part = jobs::parse_part(part, env);
    rc.part_given = true;
  }
  rc.faults = jobs::fault_injection_from(env);
  return req;
}

}  // namespace e3::app
