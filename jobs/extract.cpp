#include "jobs/extract.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "io/dataset.h"
#include "io/manifest.h"
#include "io/shard_writer.h"
#include "jobs/backend_select.h"
#include "jobs/output_dir.h"
#include "jobs/plan.h"
#include "jobs/progress.h"
#include "jobs/signals.h"
#include "jobs/step_writer.h"
#include "jobs/watchdog.h"
#include "kernels/error.h"
#include "model/model.h"
#include "parallel/agreement.h"
#include "parallel/mpi_check.h"

namespace e3::jobs {

namespace {

// The failure all ranks agreed was this rank's: rethrown as the one error the job reports
// (any other exception becomes an internal error carrying its message).
[[noreturn]] void rethrow_agreed(std::exception_ptr failure) {
  try {
    std::rethrow_exception(failure);
  } catch (Error& e) {
    e.set_agreed();
    throw;
  } catch (const std::exception& e) {
    Error err(ErrorKind::Internal, e.what(), __FILE__, __LINE__);
    err.set_agreed();
    throw err;
  }
}

}  // namespace

void agreed_phase(const parallel::Grid& grid, const std::function<void()>& setup) {
  std::exception_ptr failure;
  int code = 0;
  try {
    setup();
  } catch (const Error& e) {
    failure = std::current_exception();
    code = exit_code(e.kind());
  } catch (const std::exception& e) {
    failure = std::make_exception_ptr(Error(ErrorKind::Internal, e.what(), __FILE__, __LINE__));
    code = exit_code(ErrorKind::Internal);
  }
  const parallel::Failure f = parallel::agree_on_failure(grid.world(), failure != nullptr, code);
  if (f.rank < 0) return;
  if (f.rank == grid.world_rank()) rethrow_agreed(failure);
  if (failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const Error& e) {
      spdlog::debug("also failed here, reported by rank {}: {}", f.rank, e.what());
    }
  }
  throw parallel::PeerFailed{f.rank, f.code};
}

namespace {

using Clock = std::chrono::steady_clock;

// Leader only: what the manifest needs besides the shard list.
io::Manifest manifest_skeleton(const RunConfig& rc, const io::RunFingerprint& fp, const io::Dataset& data,
                               const ShardLimits& limits, const WorkPlan& plan) {
  io::Manifest m;
  for (const auto& [first, end] : shard_ranges(data, limits)) m.shard_starts.push_back(first);
  m.fingerprint = fp;
  m.part = rc.part;
  m.model_path = std::filesystem::absolute(rc.model_dir).string();
  m.data_path = std::filesystem::absolute(rc.data_path).string();
  m.data_fingerprint = data.shape_fingerprint();
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

nlohmann::json shards_to_json(const std::vector<io::CommittedShard>& shards) {
  io::Manifest m;
  m.shards = shards;
  return io::to_json(m)["shards"];
}

// Writers send their newly committed shards to the leader.
std::vector<io::CommittedShard> gather_commits(const parallel::Grid& grid, const std::vector<io::CommittedShard>& mine) {
  const std::string text = shards_to_json(mine).dump();
  const MPI_Comm comm = grid.writers_comm();
  int size = 0, rank = 0;
  E3_MPI_CHECK(MPI_Comm_size(comm, &size));
  E3_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  const int len = static_cast<int>(text.size());
  std::vector<int> lens(static_cast<size_t>(size)), displs(static_cast<size_t>(size));
  E3_MPI_CHECK(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, comm));
  std::string all;
  if (rank == 0) {
    int total = 0;
    for (int i = 0; i < size; ++i) {
      displs[static_cast<size_t>(i)] = total;
      total += lens[static_cast<size_t>(i)];
    }
    all.resize(static_cast<size_t>(total));
  }
  E3_MPI_CHECK(MPI_Gatherv(text.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0, comm));
  std::vector<io::CommittedShard> out;
  if (rank != 0) return out;
  for (int i = 0; i < size; ++i) {
    const auto part = nlohmann::json::parse(all.substr(static_cast<size_t>(displs[static_cast<size_t>(i)]),
                                                       static_cast<size_t>(lens[static_cast<size_t>(i)])));
    nlohmann::json wrapper = io::to_json(io::Manifest{});
    wrapper["shards"] = part;
    for (auto& s : io::manifest_from_json(wrapper, "gathered shard list").shards) out.push_back(std::move(s));
  }
  return out;
}

std::vector<int64_t> broadcast_indices(const parallel::Grid& grid, std::vector<int64_t> values) {
  int64_t n = static_cast<int64_t>(values.size());
  E3_MPI_CHECK(MPI_Bcast(&n, 1, MPI_INT64_T, 0, grid.world()));
  values.resize(static_cast<size_t>(n));
  E3_MPI_CHECK(MPI_Bcast(values.data(), static_cast<int>(n), MPI_INT64_T, 0, grid.world()));
  return values;
}


struct StepAgreement {
  int stop_signal = 0;
  int failed_rank = -1;
  int code = 0;
  std::vector<int64_t> samples_by_group, tokens_by_group;
};

// One all-reduce (max) over the world at a step boundary: any stop signal, the lowest rank
// that failed (with its exit code), and each group's progress (reported by its writer).
StepAgreement agree_on_step(const parallel::Grid& grid, const std::exception_ptr& failure, int64_t samples,
                            int64_t tokens) {
  const auto dp = static_cast<size_t>(grid.dp_size());
  std::vector<int64_t> v(2 + 2 * dp, 0);
  v[0] = stop_signal();
  if (failure) {
    int code = exit_code(ErrorKind::Internal);
    try {
      std::rethrow_exception(failure);
    } catch (const Error& e) {
      code = exit_code(e.kind());
    } catch (...) {
    }
    v[1] = static_cast<int64_t>(grid.world_size() - grid.world_rank()) * 256 + code;  // max: the lowest rank
  }
  if (grid.is_writer()) {
    v[2 + static_cast<size_t>(grid.dp_rank())] = samples;
    v[2 + dp + static_cast<size_t>(grid.dp_rank())] = tokens;
  }
  E3_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_INT64_T, MPI_MAX, grid.world()));
  StepAgreement a;
  a.stop_signal = static_cast<int>(v[0]);
  if (v[1] > 0) {
    a.failed_rank = grid.world_size() - static_cast<int>(v[1] / 256);
    a.code = static_cast<int>(v[1] % 256);
  }
  a.samples_by_group.assign(v.begin() + 2, v.begin() + 2 + static_cast<std::ptrdiff_t>(dp));
  a.tokens_by_group.assign(v.begin() + 2 + static_cast<std::ptrdiff_t>(dp), v.end());
  return a;
}

// A test-only hook: E3_FAIL_AT_SAMPLE=k [E3_FAIL_ON_RANK=r] makes world rank r (default 0)
// fail before the step that holds sample k, mid-run, while its peers are in collectives.
struct InjectedFault {
  bool armed = false;
  int64_t sample = -1;
  int rank = 0;
};

InjectedFault injected_fault() {
  InjectedFault f;
  if (const char* s = std::getenv("E3_FAIL_AT_SAMPLE")) {
    f.armed = true;
    f.sample = std::atoll(s);
    if (const char* r = std::getenv("E3_FAIL_ON_RANK")) f.rank = std::atoi(r);
  }
  return f;
}

// --max-skipped-fraction: the line that ends a run whose samples left out for non-finite
// states exceed the fraction of this part's samples, or "" when they do not. Samples over
// --max-seq-len do not count: they follow the user's own limit and are listed at the start;
// non-finite ones are the model's failure, and a run of mostly those is no training data.
std::string too_many_skipped_message(const RunConfig& rc, const WorkPlan& plan, int64_t nonfinite) {
  int64_t part_samples = 0;
  for (const ShardPlan& s : plan.shards) part_samples += s.end_sample - s.first_sample;
  if (static_cast<double>(nonfinite) <= rc.max_skipped_fraction * static_cast<double>(part_samples)) return {};
  return fmt::format(
      "{} of the {} samples{} ({:.1f}%) were left out (--on-nonfinite skip), more than --max-skipped-fraction {} "
      "allows: the output in {} is not usable training data as it is. The warnings above and the manifest's "
      "shards[].skipped name each sample; check the checkpoint, --dtype and the input, or rerun the same command "
      "with a larger --max-skipped-fraction to accept these samples left out",
      nonfinite, part_samples, rc.part.count > 1 ? " of this part" : "",
      100.0 * static_cast<double>(nonfinite) / static_cast<double>(std::max<int64_t>(part_samples, 1)),
      rc.max_skipped_fraction, rc.out_dir.string());
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

// A rerun with every shard of this part committed: says so without loading anything, after
// marking the manifest complete if the run that wrote the last shard could not.
void finish_without_work(const RunConfig& rc, const OutputState& out_state, const WorkPlan& plan,
                         io::Manifest& manifest, OutputClaim& claim) {
  if (!out_state.manifest_current) {
    manifest.complete = true;
    io::write_manifest(rc.out_dir, manifest);
    claim.keep();
  }
  int64_t nonfinite = 0;
  for (const auto& s : out_state.committed) nonfinite += static_cast<int64_t>(s.skipped.size());
  const auto too_long = static_cast<int64_t>(manifest.skipped.size());
  spdlog::info("nothing to do: all {} shards committed in {} ({}), the model is not loaded; done: 0 samples computed "
               "now, {} done before, {} skipped ({} over --max-seq-len, {} with non-finite states)",
               plan.shards.size(), rc.out_dir.string(), rc.part.count > 1 ? "this part complete" : "complete",
               plan.samples_committed - nonfinite, too_long + nonfinite, too_long, nonfinite);
  // Nothing to compute does not make the output usable: the verdict of the run that wrote it stands.
  const std::string too_many = too_many_skipped_message(rc, plan, nonfinite);
  E3_REQUIRE(too_many.empty(), ErrorKind::NonFinite, "{}", too_many);
}

}  // namespace

int run_extract(const RunConfig& rc, const parallel::Grid& grid) {
  const auto t_start = Clock::now();
  model::ModelConfig mc;
  std::vector<int> layers;
  std::unique_ptr<model::Checkpoint> ckpt;
  io::Dataset data;
  io::RunFingerprint fp;
  OutputState out_state;
  std::optional<OutputClaim> claim;  // the leader's, until the job ends however it ends

  // Phase 1: everything that can be wrong with the request, before any memory is committed
  // and before anything is created in --out.
  agreed_phase(grid, [&] {
    E3_REQUIRE(rc.max_tokens_per_step >= rc.max_seq_len, ErrorKind::Usage,
               "--max-tokens-per-step {} is below --max-seq-len {}: a whole sample must fit one step",
               rc.max_tokens_per_step, rc.max_seq_len);
    mc = model::load_model_config(rc.model_dir);
    layers = rc.layers ? *rc.layers : model::default_capture_ids(mc);
    model::validate_capture_ids(layers, mc.num_hidden_layers);
    model::check_tensor_parallel(mc, grid.tp_size());
    check_backend_options(rc);
    ckpt = std::make_unique<model::Checkpoint>(rc.model_dir);
    model::check_config_against_checkpoint(mc, *ckpt);
    data = io::Dataset::open(rc.data_path, {mc.vocab_size, rc.max_seq_len, rc.on_long});
    fp.model_fingerprint = mc.fingerprint + "-" + ckpt->fingerprint();
    fp.layer_ids.assign(layers.begin(), layers.end());
    fp.final_mode = model::final_mode_name(rc.final_mode);
    fp.dtype = kernels::dtype_name(rc.dtype);
    fp.max_seq_len = rc.max_seq_len;
    fp.on_long = io::on_long_name(rc.on_long);
    fp.samples_per_shard = rc.samples_per_shard;
    fp.shard_size = rc.shard_size;
    fp.tool_version = E3_VERSION_STRING;
  });
  // Only once every rank found the request sound: one job per directory (or part), and what
  // an earlier run left there.
  agreed_phase(grid, [&] {
    if (!grid.is_leader()) return;
    claim.emplace(OutputClaim::take(rc.out_dir, rc.part));
    fp.plan_groups = plan_groups_for(rc, grid);
    out_state = prepare_output_dir(rc.out_dir, fp, data.shape_fingerprint(), rc.part, rc.resume_checksums);
  });

  std::vector<int64_t> committed_idx;
  for (const auto& s : out_state.committed) committed_idx.push_back(s.shard_index);
  committed_idx = broadcast_indices(grid, committed_idx);
  fp.plan_groups = broadcast_indices(grid, {fp.plan_groups}).at(0);  // the shard attributes carry fp's digest
  const int64_t bytes_per_token =
      state_bytes_per_token(layers.size(), model::stored_finals(rc.final_mode).size(), mc.hidden_size, rc.dtype);
  const ShardLimits limits{rc.samples_per_shard, rc.shard_size, bytes_per_token, fp.plan_groups};
  const WorkPlan plan = make_plan(data, limits, grid.dp_size(),
                                  std::set<int64_t>(committed_idx.begin(), committed_idx.end()), rc.part);
  int64_t shards_pending = 0;
  for (const ShardPlan& s : plan.shards) shards_pending += s.committed ? 0 : 1;
  const uint64_t output_bytes =
      estimate_output_bytes(plan.tokens_pending, plan.samples_pending, shards_pending, bytes_per_token);
  agreed_phase(grid, [&] {
    if (grid.is_leader() && rc.space_check) check_free_space(rc.out_dir, output_bytes);
  });

  io::Manifest manifest;
  if (grid.is_leader()) {
    spdlog::info("model {} ({}, {} layers, hidden {}), capture ids [{}], final {}, dtype {}", rc.model_dir.string(),
                 model::family_name(mc.family), mc.num_hidden_layers, mc.hidden_size, fmt::join(layers, ", "),
                 model::final_mode_name(rc.final_mode), kernels::dtype_name(rc.dtype));
    if (model::distinct_ids(layers).size() != layers.size())
      spdlog::warn("capture ids [{}] repeat a layer; it is stored once per mention", fmt::join(layers, ", "));
    spdlog::info("data {}: {} samples, {} longer than --max-seq-len {} ({}: {} skipped, {} truncated)",
                 rc.data_path.string(), data.samples().size(), data.num_skipped() + data.num_truncated(),
                 rc.max_seq_len, io::on_long_name(rc.on_long), data.num_skipped(), data.num_truncated());
    for (const io::SampleRecord& r : data.samples())
      if (r.skipped)
        spdlog::warn("skipping sample {} ({}:{}): {} tokens > --max-seq-len {}", r.index, rc.data_path.string(),
                     r.line, r.original_tokens, rc.max_seq_len);
    if (out_state.temps_removed) spdlog::info("removed {} partial files of an earlier run", out_state.temps_removed);
    if (rc.part.count > 1)
      spdlog::info("part {}/{}: the shards whose index % {} == {}, manifest {}", rc.part.index, rc.part.count,
                   rc.part.count, rc.part.index, io::manifest_name(rc.part));
    else if (std::getenv("SLURM_ARRAY_TASK_ID") && !rc.part_given)
      spdlog::warn("this is task {} of a Slurm array but no --part was given: it computes the whole dataset; give "
                   "--part slurm to split the dataset over the array",
                   std::getenv("SLURM_ARRAY_TASK_ID"));
    spdlog::info("plan: {} shards of up to {} samples and {:.1f} MiB (plan groups {}) over {} DP group{}; {} shards "
                 "({} samples) already committed, {} samples ({} tokens) to compute, about {:.2f} GB to write",
                 plan.shards.size(), rc.samples_per_shard, rc.shard_size / 1048576.0, fp.plan_groups, grid.dp_size(),
                 grid.dp_size() == 1 ? "" : "s",
                 committed_idx.size(), plan.samples_committed, plan.samples_pending, plan.tokens_pending,
                 output_bytes / 1e9);
    manifest = manifest_skeleton(rc, fp, data, limits, plan);
    manifest.shards = out_state.committed;
  }
  if (shards_pending == 0) {  // known alike on every rank: the plan is the same everywhere
    agreed_phase(grid, [&] {
      if (grid.is_leader()) finish_without_work(rc, out_state, plan, manifest, *claim);
    });
    return 0;
  }

  // Phase 2: the backend and this rank's slice of the weights.
  std::unique_ptr<kernels::Backend> backend;
  std::unique_ptr<parallel::Communicator> comm;
  std::unique_ptr<model::Model> model;
  model::ModelOptions mo{grid.tp_rank(), grid.tp_size(), rc.max_tokens_per_step, rc.max_seq_len};
  agreed_phase(grid, [&] {
    backend = make_backend(rc, grid);
    comm = make_communicator(rc, grid, *backend);
    const auto t0 = Clock::now();
    const uint64_t read0 = ckpt->bytes_read();
    model = model::load_model(mc, *ckpt, *backend, *comm, mo);
    const double load_s = std::chrono::duration<double>(Clock::now() - t0).count();
    const std::string held =
        mc.quant.method == model::QuantConfig::Method::None ? ""
        : backend->keeps_weights_quantized()              ? fmt::format(" ({} held quantized)", mc.quant.describe())
                                                           : fmt::format(" ({} dequantized at load)", mc.quant.describe());
    spdlog::info("ready on {}: {:.1f} MiB of weights{} loaded in {:.2f} s ({:.3g} GB read at {:.2f} GB/s), "
                 "workspace {:.1f} MiB", backend->device_description(), model->weight_bytes() / 1048576.0, held,
                 load_s, (ckpt->bytes_read() - read0) / 1e9, (ckpt->bytes_read() - read0) / 1e9 / std::max(load_s, 1e-9),
                 model->workspace_bytes() / 1048576.0);
  });
  // Every check has passed: from here on the directory holds this run.
  agreed_phase(grid, [&] {
    if (!grid.is_leader()) return;
    check_plan_groups_unchanged(rc.out_dir, rc.part, fp.plan_groups);
    io::write_manifest(rc.out_dir, manifest);
    claim->keep();
  });

  Watchdog watchdog(*comm, rc.collective_timeout_s, grid.world_rank());

  // Phase 3: the steps of this DP group. Every TP rank forms the same batches; the writer
  // (TP rank 0) copies the captured states out and writes them on its own thread while the
  // device computes the next step.
  const std::vector<const ShardPlan*> todo = plan.pending_for(grid.dp_rank());
  constexpr int kSlots = 2;  // steps in flight: one computing, one being written
  std::unique_ptr<model::StagedCapture> capture;
  std::unique_ptr<ShardCommitter> committer;
  std::unique_ptr<AsyncStepWriter> writer;
  // --log-level debug: every rank captures, and logs per-layer statistics of each step; equal
  // numbers across a TP group show that every rank computed the same residual stream.
  const bool stats_everywhere = spdlog::should_log(spdlog::level::debug);
  if (grid.is_writer() || stats_everywhere)
    capture = std::make_unique<model::StagedCapture>(*backend, layers, rc.final_mode, rc.dtype, mc.hidden_size,
                                                     rc.max_tokens_per_step, kSlots);
  if (grid.is_writer()) {
    io::ShardAttributes attrs;
    attrs.layer_ids.assign(layers.begin(), layers.end());
    attrs.final_mode = model::final_mode_name(rc.final_mode);
    attrs.model_type = mc.model_type;
    attrs.hidden_size = mc.hidden_size;
    attrs.num_hidden_layers = mc.num_hidden_layers;
    attrs.dtype = rc.dtype;
    attrs.tp = grid.tp_size();
    attrs.model_path = std::filesystem::absolute(rc.model_dir).string();
    attrs.config_fingerprint = mc.fingerprint;
    attrs.run_fingerprint = fp.digest();
    attrs.tool_version = E3_VERSION_STRING;
    ShardCommitter::OnCommit on_commit;
    if (grid.is_leader())  // the leader keeps manifest.json current with its own commits
      on_commit = [&](const io::CommittedShard& c) {
        manifest.shards.push_back(c);
        io::write_manifest(rc.out_dir, manifest);
      };
    committer = std::make_unique<ShardCommitter>(rc.out_dir, attrs, todo,
                                                 NonfiniteCheck{rc.on_nonfinite, rc.data_path.string()}, on_commit);
    writer = std::make_unique<AsyncStepWriter>(*committer, *capture, *backend);
  }

  // Every rank walks the same number of steps (the longest group's); a group with no work left
  // idles through the rest. Each step starts with one small all-reduce over the world that
  // agrees on stop signals and on failures found outside the collectives, and carries the
  // progress of every group to the leader.
  const std::vector<int64_t> group_steps = steps_per_group(plan, data, grid.dp_size(), rc.max_tokens_per_step);
  const int64_t total_steps = group_steps.empty() ? 0 : *std::max_element(group_steps.begin(), group_steps.end());
  std::vector<int64_t> group_tokens(static_cast<size_t>(grid.dp_size()), 0);
  for (const ShardPlan& s : plan.shards)
    if (!s.committed) group_tokens[static_cast<size_t>(s.dp_group)] += s.tokens_to_write;
  Progress progress(grid.is_leader(), plan.samples_pending, group_tokens, bytes_per_token, rc.progress_interval_s);
  const InjectedFault fault = injected_fault();
  model::HostBatch batch;
  std::vector<StepSample> step;
  size_t shard_pos = 0;
  int64_t sample_pos = todo.empty() ? 0 : todo[0]->first_sample;
  int64_t done_samples = 0, done_tokens = 0;  // this group's
  const auto& records = data.samples();
  int stopped_by = 0;
  for (int64_t step_index = 0; step_index < total_steps; ++step_index) {
    watchdog.step_begin(step_index);
    const int slot = static_cast<int>(step_index % kSlots);
    std::exception_ptr pending;
    batch.clear();
    step.clear();
    try {
      // Fill one step with whole samples, in order, up to the token budget.
      while (shard_pos < todo.size()) {
        const ShardPlan* s = todo[shard_pos];
        if (sample_pos >= s->end_sample) {
          if (++shard_pos < todo.size()) sample_pos = todo[shard_pos]->first_sample;
          continue;
        }
        const io::SampleRecord& r = records[static_cast<size_t>(sample_pos)];
        if (r.skipped) {
          ++sample_pos;
          continue;
        }
        if (batch.num_tokens() > 0 && batch.num_tokens() + r.num_tokens > rc.max_tokens_per_step) break;
        StepSample ss{&r, s, batch.num_tokens(), {}, {}};
        data.read(r, ss.ids, ss.mask);
        batch.add_sequence(ss.ids.data(), static_cast<int64_t>(ss.ids.size()));
        step.push_back(std::move(ss));
        ++sample_pos;
      }
      if (fault.armed && fault.rank == grid.world_rank())
        for (const StepSample& ss : step)
          E3_REQUIRE(ss.record->index != fault.sample, ErrorKind::Internal,
                     "injected failure before the step holding sample {} (E3_FAIL_AT_SAMPLE)", fault.sample);
      if (writer) {
        writer->acquire(slot);
        if (auto e = writer->error()) std::rethrow_exception(e);
      }
    } catch (...) {
      pending = std::current_exception();
    }
    const StepAgreement agreed = agree_on_step(grid, pending, done_samples, done_tokens);
    if (agreed.failed_rank >= 0) {
      if (writer) {  // commit what is complete before leaving
        try {
          writer->finish(false);
        } catch (...) {
        }
      }
      if (agreed.failed_rank == grid.world_rank()) rethrow_agreed(pending);
      throw parallel::PeerFailed{agreed.failed_rank, agreed.code};
    }
    progress.update(agreed.samples_by_group, agreed.tokens_by_group);
    if (agreed.stop_signal) {
      stopped_by = agreed.stop_signal;
      break;
    }
    if (!step.empty()) {
      const int64_t step_samples = static_cast<int64_t>(step.size()), step_tokens = batch.num_tokens();
      if (capture) capture->begin_step(slot, batch.num_tokens());
      model->forward(batch, capture.get());
      if (capture) capture->audit(grid.world_rank());
      if (writer) {
        writer->submit(step_index, slot, capture->finish_step(), std::move(step));
      } else if (capture) {
        backend->wait_ticket(capture->finish_step());
        spdlog::debug("step {} capture stats: {}", step_index, capture_stats(*capture, slot, step_tokens));
      } else {
        backend->synchronize();  // a rank without a writer keeps at most one step in flight
      }
      done_samples += step_samples;
      done_tokens += step_tokens;
    }
    watchdog.step_end();
  }
  // The last writes: failures here are agreed like those of a step.
  {
    watchdog.step_begin(total_steps);
    std::exception_ptr pending;
    try {
      if (writer) writer->finish(stopped_by == 0);
    } catch (...) {
      pending = std::current_exception();
    }
    const StepAgreement agreed = agree_on_step(grid, pending, done_samples, done_tokens);
    watchdog.step_end();
    if (agreed.failed_rank >= 0) {
      if (agreed.failed_rank == grid.world_rank()) {
        try {
          std::rethrow_exception(pending);
        } catch (Error& e) {
          e.set_agreed();
          throw;
        }
      }
      throw parallel::PeerFailed{agreed.failed_rank, agreed.code};
    }
    progress.update(agreed.samples_by_group, agreed.tokens_by_group);
  }
  progress.finish(stopped_by != 0);
  const std::vector<io::CommittedShard> committed_now = committer ? committer->committed() : std::vector<io::CommittedShard>{};

  // The leader collects every group's commits and writes the final manifest.
  const auto gathered = grid.is_writer() ? gather_commits(grid, committed_now) : std::vector<io::CommittedShard>{};
  int too_many_skipped = 0;  // the leader's verdict on --max-skipped-fraction, shared below
  std::string skipped_message;
  if (grid.is_leader()) {
    std::map<int64_t, io::CommittedShard> all;
    for (const auto& s : out_state.committed) all[s.shard_index] = s;
    for (const auto& s : gathered) all[s.shard_index] = s;
    manifest.shards.clear();
    for (auto& [idx, s] : all) manifest.shards.push_back(s);
    manifest.complete = static_cast<int64_t>(all.size()) == manifest.num_shards;
    io::write_manifest(rc.out_dir, manifest);
    const double secs = std::chrono::duration<double>(Clock::now() - t_start).count();
    int64_t computed = 0, nonfinite_now = 0, nonfinite_before = 0;
    for (const auto& s : gathered) {
      computed += static_cast<int64_t>(s.samples.size());
      nonfinite_now += static_cast<int64_t>(s.skipped.size());
    }
    for (const auto& s : out_state.committed) nonfinite_before += static_cast<int64_t>(s.skipped.size());
    const int64_t too_long = static_cast<int64_t>(manifest.skipped.size());
    spdlog::info("done: {} samples computed now, {} done before, {} skipped ({} over --max-seq-len, {} with non-finite "
                 "states); {} shards in {} ({}); {:.1f} s",
                 computed, plan.samples_committed - nonfinite_before, too_long + nonfinite_now + nonfinite_before,
                 too_long, nonfinite_now + nonfinite_before, manifest.shards.size(), rc.out_dir.string(),
                 manifest.complete ? (rc.part.count > 1 ? "this part complete" : "complete") : "INCOMPLETE", secs);
    // Last, so that it is the line a user reads, whatever code the launcher returns.
    if (stopped_by)
      spdlog::warn("stopped by signal {} after the current step ({}); what was complete is committed. The run is "
                   "resumable: rerun the same command to continue (exit code {}; an mpirun that was signalled "
                   "itself returns 1)",
                   stopped_by, stop_signal_name(stopped_by), exit_code(ErrorKind::Resumable));
    else
      skipped_message = too_many_skipped_message(rc, plan, nonfinite_now + nonfinite_before);
    too_many_skipped = skipped_message.empty() ? 0 : 1;
  }
  E3_MPI_CHECK(MPI_Bcast(&too_many_skipped, 1, MPI_INT, 0, grid.world()));
  if (too_many_skipped) {
    if (!grid.is_leader()) throw parallel::PeerFailed{0, exit_code(ErrorKind::NonFinite)};
    Error e(ErrorKind::NonFinite, skipped_message, __FILE__, __LINE__);
    e.set_agreed();
    throw e;
  }
  return stopped_by ? exit_code(ErrorKind::Resumable) : 0;
}

}  // namespace e3::jobs
