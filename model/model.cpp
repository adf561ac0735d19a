#include "model/model.h"

#include <optional>

#include "core/error.h"
#include "model/checkpoint_check.h"
#include "model/decoder.h"

namespace e3::model {

using kernels::Tensor;

void HostBatch::clear() {
  tokens.clear();
  positions.clear();
  cu_seqlens.assign(1, 0);
  max_seqlen = 0;
}

void HostBatch::add_sequence(const int32_t* ids, int64_t n) {
  if (cu_seqlens.empty()) cu_seqlens.push_back(0);
  tokens.insert(tokens.end(), ids, ids + n);
  for (int64_t i = 0; i < n; ++i) positions.push_back(static_cast<int32_t>(i));
  cu_seqlens.push_back(static_cast<int32_t>(tokens.size()));
  max_seqlen = std::max(max_seqlen, n);
}

namespace {

class DecoderModel final : public Model {
 public:
  DecoderModel(const ModelConfig& config, const Checkpoint* ckpt, kernels::Backend& backend,
               parallel::Communicator* comm, const ModelOptions& opt, std::optional<uint64_t> random_seed = {})
      : config_(config), backend_(backend), comm_(comm), opt_(opt) {
    E3_REQUIRE(opt.max_tokens > 0 && opt.max_seq_len > 0, ErrorKind::Internal, "model options unset");
    check_tensor_parallel(config_, opt.tp_size);
    WeightLoader loader(ckpt, backend_, store_, config_.tensor_prefix);
    loader.set_quantization(config_.quant);
    loader.set_load_threads(opt.load_threads);
    if (random_seed) loader.fill_random(*random_seed);  // the same on every rank: replicated weights agree
    TpSlice tp{opt.tp_rank, opt.tp_size};
    parts_ = build_decoder(config_, tp, loader);
    loader.finish();
    allocate_workspace();
    build_rope_table();
  }

  const ModelConfig& config() const override { return config_; }
  size_t weight_bytes() const override { return store_.bytes(); }
  size_t workspace_bytes() const override { return ws_.bytes() + rope_buffer_.bytes(); }

  void forward(const HostBatch& batch, CaptureSink* sink) override {
    const int64_t M = batch.num_tokens();
    const int B = batch.num_seqs();
    E3_REQUIRE(M > 0 && M <= opt_.max_tokens && batch.max_seqlen <= opt_.max_seq_len, ErrorKind::Internal,
               "step of {} tokens (longest {}) exceeds the budget of {} tokens (longest {})", M, batch.max_seqlen,
               opt_.max_tokens, opt_.max_seq_len);
    kernels::Backend& be = backend_;
    const DType dt = be.compute_dtype();
    const int64_t H = config_.hidden_size;

    Tensor ids = ws_.ids.view(DType::I32, 1, M);
    kernels::SequenceLayout seqs;
    seqs.positions = ws_.positions.view(DType::I32, 1, M);
    seqs.cu_seqlens = ws_.cu_seqlens.view(DType::I32, 1, B + 1);
    seqs.cu_seqlens_host = batch.cu_seqlens.data();
    seqs.num_seqs = B;
    seqs.num_tokens = M;
    seqs.max_seqlen = batch.max_seqlen;
    be.upload_raw(ids, batch.tokens.data());
    be.upload_raw(seqs.positions, batch.positions.data());
    be.upload_raw(seqs.cu_seqlens, batch.cu_seqlens.data());

    // The residual stream and the summed block outputs stay fp32 on every backend: bf16 there
    // would add a rounding per sub-layer to every captured state.
    Tensor x = ws_.residual.view(DType::F32, M, H);
    Tensor h = ws_.normed.view(dt, M, H);
    Tensor h32 = ws_.normed_f32.view(DType::F32, M, H);
    Tensor partial = ws_.partial.view(DType::F32, M, H);
    StepContext ctx{be, ws_, seqs, rope_, M};
    const float eps = static_cast<float>(config_.rms_norm_eps);
    const int L = static_cast<int>(parts_.layers.size());

    be.embedding(ids, parts_.embed, x);
    if (sink && sink->wants(0)) sink->capture(0, x);
    be.rmsnorm(x, parts_.layers[0].input_norm, eps, h);
    for (int l = 0; l < L; ++l) {
      DecoderLayer& layer = parts_.layers[static_cast<size_t>(l)];
      layer.attention->forward(h, partial, ctx);
      comm_->all_reduce_sum(partial);
      be.add_rmsnorm(x, partial, layer.post_attention_norm, eps, h, Tensor{});
      layer.ffn->forward(h, partial, ctx);
      comm_->all_reduce_sum(partial);
      // The residual add is fused with the next layer's input norm.
      if (l + 1 < L)
        be.add_rmsnorm(x, partial, parts_.layers[static_cast<size_t>(l + 1)].input_norm, eps, h, Tensor{});
      else
        be.add_inplace(x, partial);
      // Id l+1 is this layer's output; id L does not exist (the final state is separate).
      if (sink && l + 1 < L && sink->wants(l + 1)) sink->capture(l + 1, x);
    }
    // Checked by mode, not by listing stored_finals(): nothing allocates inside a step.
    if (sink && stores_final(sink->final_mode(), FinalNorm::Pre)) sink->capture_final(FinalNorm::Pre, x);
    if (sink && stores_final(sink->final_mode(), FinalNorm::Post)) {
      be.rmsnorm(x, parts_.final_norm, eps, h32);
      sink->capture_final(FinalNorm::Post, h32);
    }
  }

 private:
  void allocate_workspace() {
    kernels::Backend& be = backend_;
    const size_t e = dtype_size(be.compute_dtype());
    const auto M = static_cast<size_t>(opt_.max_tokens);
    const auto H = static_cast<size_t>(config_.hidden_size);
    ws_.ids = be.allocate(M * 4);
    ws_.positions = be.allocate(M * 4);
    ws_.cu_seqlens = be.allocate((M + 1) * 4);
    ws_.residual = be.allocate(M * H * 4);
    ws_.normed = be.allocate(M * H * e);
    ws_.normed_f32 = be.allocate(M * H * 4);
    ws_.partial = be.allocate(M * H * 4);
    for (size_t s = 0; s < ws_.scratch.size(); ++s) {
      const size_t per_token = parts_.needs.bytes_per_token[s];
      if (per_token) ws_.scratch[s] = be.allocate(M * per_token);
    }
    if (parts_.needs.dequant_elems > 0) ws_.dequant = be.allocate(static_cast<size_t>(parts_.needs.dequant_elems) * e);
    if (parts_.needs.moe.local_experts > 0) {
      const size_t bytes = be.moe_scratch_bytes(opt_.max_tokens, parts_.needs.moe);
      auto& slot = ws_.scratch[static_cast<size_t>(Scratch::MoeWork)];
      slot = be.allocate(bytes);
      ws_.moe_work = slot.view(DType::I32, 1, static_cast<int64_t>(bytes / 4));
    }
  }

  void build_rope_table() {
    std::vector<float> cos_t, sin_t;
    fill_rope_tables(parts_.rope, opt_.max_seq_len, cos_t, sin_t);
    const int64_t half = static_cast<int64_t>(parts_.rope.inv_freq.size());
    const size_t table_bytes = cos_t.size() * sizeof(float);
    rope_buffer_ = backend_.allocate(2 * table_bytes);
    rope_.cos = rope_buffer_.view(DType::F32, opt_.max_seq_len, half);
    rope_.sin = rope_buffer_.view(DType::F32, opt_.max_seq_len, half, table_bytes);
    backend_.upload_raw(rope_.cos, cos_t.data());
    backend_.upload_raw(rope_.sin, sin_t.data());
  }

  ModelConfig config_;
  kernels::Backend& backend_;
  parallel::Communicator* comm_;
  ModelOptions opt_;
  WeightStore store_;
  DecoderParts parts_;
  Workspace ws_;
  kernels::DeviceBuffer rope_buffer_;
  kernels::RopeTable rope_;
};

}  // namespace

std::unique_ptr<Model> load_model(const ModelConfig& config, const Checkpoint& ckpt, kernels::Backend& backend,
                                  parallel::Communicator& comm, const ModelOptions& options) {
  E3_REQUIRE(comm.size() == options.tp_size && comm.rank() == options.tp_rank, ErrorKind::Internal,
             "communicator {}/{} does not match TP {}/{}", comm.rank(), comm.size(), options.tp_rank,
             options.tp_size);
  check_config_against_checkpoint(config, ckpt);
  return std::make_unique<DecoderModel>(config, &ckpt, backend, &comm, options);
}

std::unique_ptr<Model> make_random_model(const ModelConfig& config, kernels::Backend& backend,
                                         parallel::Communicator& comm, const ModelOptions& options, uint64_t seed) {
  return std::make_unique<DecoderModel>(config, nullptr, backend, &comm, options, seed);
}

MemoryPlan plan_memory(const ModelConfig& config, DType compute_dtype, const ModelOptions& options,
                       const kernels::CudaOptions& cuda) {
  auto planner = kernels::make_planning_backend(compute_dtype, cuda);
  DecoderModel model(config, nullptr, *planner, nullptr, options);
  return {model.weight_bytes(), model.workspace_bytes()};
}

}  // namespace e3::model
