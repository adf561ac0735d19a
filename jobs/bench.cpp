#include "jobs/bench.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "jobs/backend_select.h"
#include "jobs/step_writer.h"
#include "core/error.h"
#include "core/storage_codec.h"
#include "model/model.h"
#include "parallel/agreement.h"

namespace e3::jobs {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

json read_config(const std::filesystem::path& path, int64_t num_layers) {
  json doc = read_json_file(path, ErrorKind::Usage, "bench --config: ", "");
  if (num_layers > 0) doc["num_hidden_layers"] = num_layers;
  return doc;
}

double get(const json& c, const char* key, double fallback) {
  return c.contains(key) && c[key].is_number() ? c[key].get<double>() : fallback;
}

// Captures into device memory only: the compute-side cost of capture, without the copy out.
class DeviceCapture final : public model::CaptureSink {
 public:
  DeviceCapture(kernels::Backend& be, std::vector<int> ids, int64_t max_tokens, int64_t hidden)
      : be_(be), ids_(std::move(ids)) {
    // Captured states are fp32: the residual stream and the final norm's output.
    slot_bytes_ = static_cast<size_t>(max_tokens * hidden) * sizeof(float);
    buf_ = be.allocate((ids_.size() + 1) * slot_bytes_);
  }
  bool wants(int id) const override { return std::find(ids_.begin(), ids_.end(), id) != ids_.end(); }
  model::FinalMode final_mode() const override { return model::FinalMode::PostNorm; }
  void capture(int id, kernels::Tensor state) override {
    const auto slot = static_cast<size_t>(std::find(ids_.begin(), ids_.end(), id) - ids_.begin());
    be_.copy(state, buf_.view(state.dtype, state.rows, state.cols, slot * slot_bytes_));
  }
  void capture_final(model::FinalNorm, kernels::Tensor state) override {
    be_.copy(state, buf_.view(state.dtype, state.rows, state.cols, ids_.size() * slot_bytes_));
  }

 private:
  kernels::Backend& be_;
  std::vector<int> ids_;
  kernels::DeviceBuffer buf_;
  size_t slot_bytes_ = 0;
};

// bf16 GEMM rate of this device on 8192^3, timed as hf_baseline.py times its ceiling (3 warm-up
// products, then 10). Best of three trials, so that one trial caught while the clocks change does
// not set it: a single trial after a heavy run read 327 TFLOP/s on an H200 and put MFU above 1.
double matmul_ceiling_tflops(kernels::Backend& be) {
  const int64_t n = 8192;
  kernels::DeviceBuffer a = be.allocate(static_cast<size_t>(n * n) * 2), b = be.allocate(static_cast<size_t>(n * n) * 2),
                        c = be.allocate(static_cast<size_t>(n * n) * 2);
  kernels::Tensor ta = a.view(DType::BF16, n, n), tb = b.view(DType::BF16, n, n),
                  tc = c.view(DType::BF16, n, n);
  be.fill_random(ta, 1, 1.0f);
  be.fill_random(tb, 2, 1.0f);
  double best = 0;
  for (int trial = 0; trial < 3; ++trial) {
    for (int i = 0; i < 3; ++i) be.linear(ta, tb, nullptr, tc);
    be.synchronize();
    const auto t0 = Clock::now();
    const int reps = 10;
    for (int i = 0; i < reps; ++i) be.linear(ta, tb, nullptr, tc);
    be.synchronize();
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, reps * 2.0 * static_cast<double>(n) * n * n / secs / 1e12);
  }
  return best;
}

// `iters` steps written as o.dtype shards (3 ids + final) under o.out, one shard per step, through
// the same StagedCapture / AsyncStepWriter the extraction job uses. Returns seconds per step.
double run_end_to_end(const BenchOptions& o, const model::ModelConfig& cfg, kernels::Backend& backend,
                      model::Model& m, const model::HostBatch& batch, const std::vector<int>& ids,
                      const parallel::Grid& grid) {
  namespace fs = std::filesystem;
  const fs::path dir = o.out / fmt::format("rank{}", grid.world_rank());
  fs::create_directories(dir);
  const int steps = o.iters + o.warmup;
  std::vector<io::SampleRecord> records(static_cast<size_t>(steps * o.batch));
  std::vector<ShardPlan> shards(static_cast<size_t>(steps));
  std::vector<const ShardPlan*> todo;
  for (int s = 0; s < steps; ++s) {
    shards[static_cast<size_t>(s)] = {s, int64_t{s} * o.batch, int64_t{s + 1} * o.batch, 0, false, o.batch, o.batch * o.seq};
    todo.push_back(&shards[static_cast<size_t>(s)]);
  }
  for (size_t i = 0; i < records.size(); ++i) {
    records[i].index = static_cast<int64_t>(i);
    records[i].num_tokens = records[i].original_tokens = o.seq;
  }
  io::ShardAttributes attrs;
  attrs.layer_ids.assign(ids.begin(), ids.end());
  attrs.final_mode = "post-norm";
  attrs.model_type = cfg.model_type;
  attrs.hidden_size = cfg.hidden_size;
  attrs.num_hidden_layers = cfg.num_hidden_layers;
  attrs.dtype = o.dtype;
  attrs.tp = grid.tp_size();
  attrs.model_path = "bench:" + o.config.string();
  attrs.tool_version = E3_VERSION_STRING;
  const bool writes = grid.is_writer();
  model::StagedCapture capture(backend, ids, model::FinalMode::PostNorm, attrs.dtype, cfg.hidden_size,
                               batch.num_tokens(), 2);
  ShardCommitter committer(dir, attrs, todo, NonfiniteCheck{OnNonfinite::Error, "bench"}, {});
  AsyncStepWriter writer(committer, capture, backend);
  auto one_step = [&](int s) {
    const int slot = s % 2;
    std::vector<StepSample> samples;
    for (int b = 0; b < o.batch; ++b) {
      StepSample ss{&records[static_cast<size_t>(s * o.batch + b)], todo[static_cast<size_t>(s)], int64_t{b} * o.seq, {}, {}};
      ss.ids.assign(batch.tokens.begin() + b * o.seq, batch.tokens.begin() + (b + 1) * o.seq);
      ss.mask.assign(static_cast<size_t>(o.seq), 1);
      samples.push_back(std::move(ss));
    }
    if (writes) {
      writer.acquire(slot);
      capture.begin_step(slot, batch.num_tokens());
    }
    m.forward(batch, writes ? &capture : nullptr);
    if (writes) {
      capture.audit(grid.world_rank());
      writer.submit(s, slot, capture.finish_step(), std::move(samples));
    } else {
      backend.synchronize();
    }
  };
  for (int s = 0; s < o.warmup; ++s) one_step(s);
  if (writes) {
    writer.acquire(0);
    writer.acquire(1);
  }
  backend.synchronize();
  parallel::barrier(grid.world());
  const auto t0 = Clock::now();
  for (int s = o.warmup; s < steps; ++s) one_step(s);
  if (writes) writer.finish(true);
  backend.synchronize();
  parallel::barrier(grid.world());
  return std::chrono::duration<double>(Clock::now() - t0).count() / o.iters;
}

}  // namespace

double flops_per_token(const std::filesystem::path& config, int64_t num_layers, int64_t seq) {
  const json c = read_config(config, num_layers);
  const double H = get(c, "hidden_size", 0), L = get(c, "num_hidden_layers", 0), nh = get(c, "num_attention_heads", 0);
  double attn = 0, attn_sq = 0;
  const double s = static_cast<double>(seq);
  if (get(c, "kv_lora_rank", 0) > 0) {
    const double nope = get(c, "qk_nope_head_dim", 0), rope = get(c, "qk_rope_head_dim", 0), v = get(c, "v_head_dim", 0);
    const double qk = nope + rope, ql = get(c, "q_lora_rank", 0), kvl = get(c, "kv_lora_rank", 0);
    const double q = ql > 0 ? H * ql + ql * nh * qk : H * nh * qk;
    const double kv = H * (kvl + rope) + kvl * nh * (nope + v);
    attn = q + kv + nh * v * H;
    attn_sq = nh * (qk + v) * s / 2;
  } else {
    const double hd = get(c, "head_dim", 0) > 0 ? get(c, "head_dim", 0) : std::floor(H / nh);
    const double nkv = get(c, "num_key_value_heads", nh);
    attn = H * hd * (nh + 2 * nkv) + nh * hd * H;
    attn_sq = nh * hd * 2 * s / 2;
  }
  const double dense = 3 * H * get(c, "intermediate_size", 0);
  double mlp = L * dense;
  if (get(c, "n_routed_experts", 0) > 0) {
    const double k = get(c, "first_k_dense_replace", 0);
    const double moe = 3 * H * get(c, "moe_intermediate_size", 0) *
                           (get(c, "num_experts_per_tok", 0) + get(c, "n_shared_experts", 0)) +
                       H * get(c, "n_routed_experts", 0);
    mlp = k * dense + (L - k) * moe;
  } else if (get(c, "num_experts", 0) > 0) {
    mlp = L * (3 * H * get(c, "moe_intermediate_size", 0) * get(c, "num_experts_per_tok", 0) + H * get(c, "num_experts", 0));
  }
  return 2 * (L * attn + mlp) + 2 * L * attn_sq;
}

int run_bench(const BenchOptions& o, const parallel::Grid& grid) {
  const json doc = read_config(o.config, o.num_layers);
  const model::ModelConfig cfg = model::parse_model_config(doc, o.config);
  RunConfig rc;
  rc.backend = o.backend;
  rc.comm = o.comm;
  rc.expert_dequant = o.expert_dequant;
  rc.env = o.env;
  auto backend = make_backend(rc, grid);
  auto comm = make_communicator(rc, grid, *backend);
  // MFU is taken against the ceiling of the GPU before the model runs, as hf_baseline.py takes
  // its own, so the two MFUs compare; the ceiling after the timed steps (clocks lowered by the
  // load) is reported beside it.
  const bool on_gpu = backend->name() == "cuda";
  const double ceiling = on_gpu ? matmul_ceiling_tflops(*backend) : 0.0;
  const int64_t tokens = o.batch * o.seq;
  model::ModelOptions mo{grid.tp_rank(), grid.tp_size(), tokens, o.seq};
  const auto t_load = Clock::now();
  auto m = model::make_random_model(cfg, *backend, *comm, mo, 1234);
  backend->synchronize();
  spdlog::info("bench: {} ({} layers, hidden {}) with random weights on {}: {:.2f} GiB of weights, {:.2f} GiB "
               "workspace, built in {:.1f} s",
               o.config.string(), cfg.num_hidden_layers, cfg.hidden_size, backend->device_description(),
               m->weight_bytes() / 1073741824.0, m->workspace_bytes() / 1073741824.0,
               std::chrono::duration<double>(Clock::now() - t_load).count());

  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(cfg.vocab_size - 1));
  model::HostBatch batch;
  batch.clear();
  std::vector<int32_t> ids(static_cast<size_t>(o.seq));
  for (int b = 0; b < o.batch; ++b) {
    for (auto& t : ids) t = tok(rng);
    batch.add_sequence(ids.data(), o.seq);
  }
  const int L = static_cast<int>(cfg.num_hidden_layers);
  std::vector<int> capture_ids;
  for (int id : {2, L / 2, L - 3}) capture_ids.push_back(std::clamp(id, 0, L - 1));
  DeviceCapture sink(*backend, capture_ids, tokens, cfg.hidden_size);

  for (int i = 0; i < o.warmup; ++i) m->forward(batch, &sink);
  backend->synchronize();
  backend->profile_reset();
  parallel::barrier(grid.world());
  const auto t0 = Clock::now();
  for (int i = 0; i < o.iters; ++i) m->forward(batch, &sink);
  backend->synchronize();
  parallel::barrier(grid.world());
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count() / o.iters;
  const std::string profile = backend->profile_report();
  const double ceiling_after = on_gpu ? matmul_ceiling_tflops(*backend) : 0.0;

  // End to end: the same steps through the capture pipeline and the HDF5 writer thread.
  double e2e_secs = 0;
  if (!o.out.empty()) e2e_secs = run_end_to_end(o, cfg, *backend, *m, batch, capture_ids, grid);

  // Every DP group ran the same batch: the job's rate is dp x that, spread over all ranks.
  const double tok_s = static_cast<double>(tokens) * grid.dp_size() / secs;
  const double tflops = flops_per_token(o.config, o.num_layers, o.seq) * tok_s / 1e12;
  const double mfu = ceiling > 0 ? tflops / (ceiling * grid.world_size()) : 0.0;
  if (grid.is_leader()) {
    if (!profile.empty()) std::printf("GPU time by op over %d timed steps (warm-up excluded):\n%s", o.iters, profile.c_str());
    json line{{"config", o.config.string()},
                     {"model_type", cfg.model_type},
                     {"quantization", cfg.quant.describe()},
                     {"layers", L},
                     {"batch", o.batch},
                     {"seq", o.seq},
                     {"tp", grid.tp_size()},
                     {"dp", grid.dp_size()},
                     {"backend", backend->name()},
                     {"comm", comm->name()},
                     {"tokens_per_s", std::round(tok_s)},
                     {"tokens_per_s_per_gpu", std::round(tok_s / grid.world_size())},
                     {"step_ms", std::round(secs * 1e4) / 10},
                     {"tflops", std::round(tflops * 10) / 10},
                     {"matmul_ceiling_tflops", std::round(ceiling * 10) / 10},
                     {"matmul_ceiling_after_tflops", std::round(ceiling_after * 10) / 10},
                     {"mfu", std::round(mfu * 1000) / 1000},
                     {"gpu_mem_gb", std::round(backend->device_memory_used() / 1073741824.0 * 10) / 10}};
    if (e2e_secs > 0) {
      line["e2e_tokens_per_s"] = std::round(static_cast<double>(tokens) * grid.dp_size() / e2e_secs);
      line["e2e_vs_compute"] = std::round(secs / e2e_secs * 1000) / 1000;
      line["e2e_written_gb_per_s"] =
          std::round(static_cast<double>(tokens) * static_cast<double>(capture_ids.size() + 1) *
                     static_cast<double>(storage_codec(o.dtype).row_bytes(cfg.hidden_size)) /
                     e2e_secs / 1e7) / 100;
    }
    std::printf("%s\n", line.dump().c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace e3::jobs
