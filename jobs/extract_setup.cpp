// The phases before the step loop: validation, the output plan, loading.
#include <algorithm>
#include <chrono>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "jobs/backend_select.h"
#include "jobs/extract_phases.h"
#include "jobs/tokenize_command.h"
#include "core/error.h"
#include "model/checkpoint_check.h"
#include "parallel/agreement.h"

namespace e3::jobs {
namespace {

using Clock = std::chrono::steady_clock;

// Leader only: what the manifest needs besides the shard list.
io::Manifest manifest_skeleton(const RunConfig& rc, const ValidatedRequest& req, const ShardLimits& limits,
                               const WorkPlan& plan) {
  const io::Dataset& data = req.data;
  io::Manifest m;
  for (const auto& [first, end] : shard_ranges(data, limits)) m.shard_starts.push_back(first);
  m.fingerprint = req.fingerprint;
  m.part = rc.part;
  m.model_path = req.model_attributes.model_path;
  m.data_path = std::filesystem::absolute(rc.data_path).string();
  m.data_fingerprint = data.shape_fingerprint();
  m.data_content_fingerprint = data.content_fingerprint();
  m.num_samples = static_cast<int64_t>(data.samples().size());
  m.num_shards = static_cast<int64_t>(plan.shards.size());
  for (const ShardPlan& s : plan.shards)  // this part's samples only
    for (int64_t i = s.first_sample; i < s.end_sample; ++i) {
      const io::SampleRecord& r = data.samples()[static_cast<size_t>(i)];
      if (r.skipped)
        m.skipped.push_back({r.index, r.line,
                             fmt::format("{} tokens > --max-seq-len {}", r.original_tokens, rc.max_seq_len)});
    }
  return m;
}

// Leader only: the plan groups that cut the input into shards. The run that first plans --out
// records its own (DP groups x parts); every later run and every other part keeps those, so
// that a shard index means the same samples whatever -np a resume has.
int64_t plan_groups_for(const RunConfig& rc, const parallel::Grid& grid) {
  const int64_t mine = static_cast<int64_t>(grid.dp_size()) * rc.part.count;
  const std::optional<int64_t> recorded = recorded_plan_groups(rc.out_dir, rc.part);
  if (!recorded) return mine;
  if (*recorded != mine)
    spdlog::info("keeping the shard plan of the first run: {} groups (this run has {} DP group{} x {} part{})",
                 *recorded, grid.dp_size(), grid.dp_size() == 1 ? "" : "s", rc.part.count,
                 rc.part.count == 1 ? "" : "s");
  return *recorded;
}

// Leader only: what the run is about to do, before the model is loaded.
void log_plan(const RunConfig& rc, const parallel::Grid& grid, const ValidatedRequest& req, const OutputPlan& out) {
  const model::ModelConfig& mc = req.config;
  const io::Dataset& data = req.data;
  spdlog::info("model {} ({}, {} layers, hidden {}), capture ids [{}], final {}, dtype {}", rc.model_dir.string(),
               model::family_name(mc.family), mc.num_hidden_layers, mc.hidden_size, fmt::join(req.layers, ", "),
               name_of(rc.final_mode), dtype_name(rc.dtype));
  if (model::distinct_ids(req.layers).size() != req.layers.size())
    spdlog::warn("capture ids [{}] repeat a layer; it is stored once per mention", fmt::join(req.layers, ", "));
  spdlog::info("data {}: {} samples, {} longer than --max-seq-len {} ({}: {} skipped, {} truncated)",
               rc.data_path.string(), data.samples().size(), data.num_skipped() + data.num_truncated(),
               rc.max_seq_len, name_of(rc.on_long), data.num_skipped(), data.num_truncated());
  if (data.chat())
    spdlog::info("data {}: {} lines of text tokenized with the tokenizer of {} and {}, --mask {}, checked in {:.1f} s",
                 rc.data_path.string(), data.num_text_lines(),
                 (rc.tokenizer_dir.empty() ? rc.model_dir : rc.tokenizer_dir).string(),
                 data.chat()->template_source().empty() ? "no chat template" : data.chat()->template_source(),
                 name_of(rc.mask), req.data_check_seconds);
  if (data.num_mask_all_zero() > 0)
    spdlog::warn("data {}: {} conversation{} train on no token (loss_mask all 0 under --mask {}: no assistant "
                 "reply); they are still computed and stored",
                 rc.data_path.string(), data.num_mask_all_zero(), data.num_mask_all_zero() == 1 ? "" : "s",
                 name_of(rc.mask));
  for (const io::SampleRecord& r : data.samples())
    if (r.skipped)
      spdlog::warn("skipping sample {} ({}:{}): {} tokens > --max-seq-len {}", r.index, rc.data_path.string(), r.line,
                   r.original_tokens, rc.max_seq_len);
  if (out.earlier.temps_removed) spdlog::info("removed {} partial files of an earlier run", out.earlier.temps_removed);
  if (rc.part.count > 1)
    spdlog::info("part {}/{}: the shards whose index % {} == {}, manifest {}", rc.part.index, rc.part.count,
                 rc.part.count, rc.part.index, io::manifest_name(rc.part));
  else if (const auto task = rc.env.get("SLURM_ARRAY_TASK_ID"); task && !rc.part_given)
    spdlog::warn("this is task {} of a Slurm array but no --part was given: it computes the whole dataset; give "
                 "--part slurm to split the dataset over the array",
                 *task);
  const WorkPlan& plan = out.plan;
  spdlog::info("plan: {} shards of up to {} samples and {:.1f} MiB (plan groups {}) over {} DP group{}; {} shards "
               "({} samples) already committed, {} samples ({} tokens) to compute, about {:.2f} GB to write",
               plan.shards.size(), rc.samples_per_shard, rc.shard_size / 1048576.0, out.limits.plan_groups,
               grid.dp_size(), grid.dp_size() == 1 ? "" : "s", out.committed_before, plan.samples_committed,
               plan.samples_pending, plan.tokens_pending, out.output_bytes / 1e9);
}

}  // namespace

ValidatedRequest validate_request(const RunConfig& rc, const parallel::Grid& grid) {
  ValidatedRequest req;
  parallel::agreed_phase(grid, [&] {
    E3_REQUIRE(rc.max_tokens_per_step >= rc.max_seq_len, ErrorKind::Usage,
               "--max-tokens-per-step {} is below --max-seq-len {}: a whole sample must fit one step",
               rc.max_tokens_per_step, rc.max_seq_len);
    model::ModelConfig& mc = req.config;
    mc = model::load_model_config(rc.model_dir);
    req.layers = rc.layers ? *rc.layers : model::default_capture_ids(mc);
    model::validate_capture_ids(req.layers, mc.num_hidden_layers);
    model::check_tensor_parallel(mc, grid.tp_size());
    check_backend_options(rc);
    req.checkpoint = std::make_unique<model::Checkpoint>(rc.model_dir);
    model::check_config_against_checkpoint(mc, *req.checkpoint);
    io::DatasetOptions data_options{mc.vocab_size, rc.max_seq_len, rc.on_long};
    const std::filesystem::path tokenizer_dir = rc.tokenizer_dir.empty() ? rc.model_dir : rc.tokenizer_dir;
    data_options.load_chat = [&] {
      return io::ChatEncoder::load(chat_options(tokenizer_dir, rc.chat_template, rc.mask));
    };
    // The ranks of a node check the input at once: they share its cores.
    data_options.threads = rc.threads > 0 ? rc.threads
                                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) /
                                                            std::max(1, grid.local_size()));
    const auto data_t0 = Clock::now();
    req.data = io::Dataset::open(rc.data_path, data_options);
    req.data_check_seconds = std::chrono::duration<double>(Clock::now() - data_t0).count();
    req.model_attributes = {.model_type = mc.model_type,
                            .hidden_size = mc.hidden_size,
                            .num_hidden_layers = mc.num_hidden_layers,
                            .tp = grid.tp_size(),
                            .model_path = std::filesystem::absolute(rc.model_dir).string(),
                            .config_fingerprint = mc.fingerprint,
                            .vocab_size = mc.vocab_size};
    io::RunFingerprint& fp = req.fingerprint;
    fp.model_fingerprint = req.model_attributes.config_fingerprint + "-" + req.checkpoint->fingerprint();
    fp.layer_ids.assign(req.layers.begin(), req.layers.end());
    fp.final_mode = name_of(rc.final_mode);
    fp.dtype = dtype_name(rc.dtype);
    fp.max_seq_len = rc.max_seq_len;
    fp.on_long = name_of(rc.on_long);
    fp.samples_per_shard = rc.samples_per_shard;
    fp.shard_size = rc.shard_size;
    fp.tool_version = E3_VERSION_STRING;
    if (req.data.chat()) fp.chat_fingerprint = req.data.chat()->fingerprint();
  });
  return req;
}

OutputPlan plan_output(const RunConfig& rc, const parallel::Grid& grid, ValidatedRequest& req) {
  OutputPlan out;
  io::RunFingerprint& fp = req.fingerprint;
  // Only once every rank found the request sound: one job per directory (or part), and what
  // an earlier run left there.
  parallel::agreed_phase(grid, [&] {
    if (!grid.is_leader()) return;
    out.claim.emplace(OutputClaim::take(rc.out_dir, rc.part, {LockMethod::Auto, LockHolder::this_process(rc.env)}));
    fp.plan_groups = plan_groups_for(rc, grid);
    out.earlier = prepare_output_dir(rc.out_dir, fp, req.data.shape_fingerprint(), rc.part, rc.resume_checksums,
                                     req.data.content_fingerprint());
  });
  std::vector<int64_t> committed_idx;
  for (const auto& s : out.earlier.committed) committed_idx.push_back(s.shard_index);
  committed_idx = parallel::broadcast_indices(grid, committed_idx);
  out.committed_before = static_cast<int64_t>(committed_idx.size());
  fp.plan_groups = parallel::broadcast_indices(grid, {fp.plan_groups}).at(0);  // the shard attributes carry fp's digest
  const int64_t bytes_per_token = state_bytes_per_token(
      req.layers.size(), model::stored_finals(rc.final_mode).size(), req.config.hidden_size, rc.dtype);
  out.limits = ShardLimits{rc.samples_per_shard, rc.shard_size, bytes_per_token, fp.plan_groups};
  out.plan = make_plan(req.data, out.limits, grid.dp_size(),
                       std::set<int64_t>(committed_idx.begin(), committed_idx.end()), rc.part);
  for (const ShardPlan& s : out.plan.shards) out.shards_pending += s.committed ? 0 : 1;
  out.output_bytes =
      estimate_output_bytes(out.plan.tokens_pending, out.plan.samples_pending, out.shards_pending, bytes_per_token);
  parallel::agreed_phase(grid, [&] {
    if (grid.is_leader() && rc.space_check) check_free_space(rc.out_dir, out.output_bytes);
  });
  if (grid.is_leader()) {
    log_plan(rc, grid, req, out);
    out.manifest = manifest_skeleton(rc, req, out.limits, out.plan);
    out.manifest.shards = out.earlier.committed;
    out.manifest.weights_fingerprint = out.earlier.weights_fingerprint;  // until this run has loaded its own
  }
  return out;
}

void finish_without_work(const RunConfig& rc, const parallel::Grid& grid, OutputPlan& out) {
  parallel::agreed_phase(grid, [&] {
    if (!grid.is_leader()) return;
    // The run that wrote the last shard could not mark the manifest complete: this one does.
    if (!out.earlier.manifest_current) {
      out.manifest.complete = true;
      io::write_manifest(rc.out_dir, out.manifest);
      out.claim->keep();
    }
    int64_t nonfinite = 0;
    for (const auto& s : out.earlier.committed) nonfinite += static_cast<int64_t>(s.skipped.size());
    const auto too_long = static_cast<int64_t>(out.manifest.skipped.size());
    spdlog::info(
        "nothing to do: all {} shards committed in {} ({}), the model is not loaded; done: 0 samples computed "
        "now, {} done before, {} skipped ({} over --max-seq-len, {} with non-finite states)",
        out.plan.shards.size(), rc.out_dir.string(), rc.part.count > 1 ? "this part complete" : "complete",
        out.plan.samples_committed - nonfinite, too_long + nonfinite, too_long, nonfinite);
    // Nothing to compute does not make the output usable: the verdict of the run that wrote it stands.
    const std::string too_many = too_many_skipped_message(rc, out.plan, nonfinite);
    E3_REQUIRE(too_many.empty(), ErrorKind::NonFinite, "{}", too_many);
  });
}

LoadedModel load_model_slice(const RunConfig& rc, const parallel::Grid& grid, const ValidatedRequest& req,
                             OutputPlan& out) {
  LoadedModel loaded;
  const model::ModelConfig& mc = req.config;
  const model::ModelOptions mo{grid.tp_rank(), grid.tp_size(), rc.max_tokens_per_step, rc.max_seq_len};
  parallel::agreed_phase(grid, [&] {
    loaded.backend = make_backend(rc, grid);
    loaded.comm = make_communicator(rc, grid, *loaded.backend);
    const auto t0 = Clock::now();
    const uint64_t read0 = req.checkpoint->bytes_read();
    loaded.model = model::load_model(mc, *req.checkpoint, *loaded.backend, *loaded.comm, mo);
    const double load_s = std::chrono::duration<double>(Clock::now() - t0).count();
    const double read_gb = static_cast<double>(req.checkpoint->bytes_read() - read0) / 1e9;
    const std::string held =
        mc.quant.method == model::QuantConfig::Method::None ? ""
        : loaded.backend->keeps_weights_quantized() ? fmt::format(" ({} held quantized)", mc.quant.describe())
                                                     : fmt::format(" ({} dequantized at load)", mc.quant.describe());
#ifdef E3_HAVE_CUDA
    const std::string build_note;
#else
    // So that a binary without the GPU backend is never run on a GPU cluster unawares.
    const std::string build_note = fmt::format("; {}", kernels::build_description());
#endif
    spdlog::info("ready on {}: {:.1f} MiB of weights{} loaded in {:.2f} s ({:.3g} GB read at {:.2f} GB/s), "
                 "workspace {:.1f} MiB{}",
                 loaded.backend->device_description(), loaded.model->weight_bytes() / 1048576.0, held, load_s,
                 read_gb, read_gb / std::max(load_s, 1e-9), loaded.model->workspace_bytes() / 1048576.0, build_note);
  });
  // Every rank has loaded its slice: the fingerprint of what they all read, the same on each.
  const model::WeightFingerprint& read = req.checkpoint->weights();
  const std::string weights = read.digest(parallel::sum_to_all(grid.world(), read.partial_sums()));
  // Every check has passed: from here on the directory holds this run.
  parallel::agreed_phase(grid, [&] {
    if (!grid.is_leader()) return;
    spdlog::debug("weights fingerprint {}", weights);
    check_weights_unchanged(rc.out_dir, weights);
    out.manifest.weights_fingerprint = weights;
    check_plan_groups_unchanged(rc.out_dir, rc.part, out.limits.plan_groups);
    io::write_manifest(rc.out_dir, out.manifest);
    out.claim->keep();
  });
  return loaded;
}

}  // namespace e3::jobs
