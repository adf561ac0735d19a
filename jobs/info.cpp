#include "jobs/info.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/dtype.h"
#include "core/error.h"
#include "core/storage_codec.h"
#include "model/model.h"

namespace e3::jobs {
namespace {

std::string gib(size_t bytes) { return fmt::format("{:.3f} GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024)); }

}  // namespace

std::string model_info(const InfoOptions& o) {
  const model::ModelConfig c = model::load_model_config(o.model_dir);
  std::string out;
  auto line = [&](const std::string& s) { out += s + "\n"; };
  line(fmt::format("model            {}", o.model_dir.string()));
  line(fmt::format("architecture     {} (model_type {}, family {})", c.architecture.empty() ? "-" : c.architecture,
                   c.model_type, model::family_name(c.family)));
  line(fmt::format("layers           {}", c.num_hidden_layers));
  line(fmt::format("hidden size      {}", c.hidden_size));
  line(fmt::format("intermediate     {}", c.intermediate_size));
  if (c.is_mla()) {
    const model::MlaConfig& m = c.mla;
    line(fmt::format("attention        MLA, {} heads, q_lora_rank {}, kv_lora_rank {}, qk {} + {} (rope{}), v {}, "
                     "softmax scale {:.6g}",
                     c.num_attention_heads, m.q_lora_rank ? std::to_string(m.q_lora_rank) : "none (q_proj)",
                     m.kv_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim, m.rope_interleave ? ", interleaved" : "",
                     m.v_head_dim, m.softmax_scale));
  } else {
    line(fmt::format("attention        {} heads, {} kv heads, head_dim {}{}{}", c.num_attention_heads,
                     c.num_key_value_heads, c.head_dim, c.qkv_bias ? ", qkv bias" : "", c.qk_norm ? ", q/k norm" : ""));
  }
  if (c.moe.num_experts > 0) {
    const model::MoeConfig& m = c.moe;
    const auto moe_layers = std::count(m.layer_is_moe.begin(), m.layer_is_moe.end(), true);
    line(fmt::format("moe              {} of {} layers: {} experts ({} per token, intermediate {}), {} shared; "
                     "router {} {}, groups {}/{}, norm_topk_prob {}, scaling {}",
                     moe_layers, c.num_hidden_layers, m.num_experts, m.experts_per_token, m.moe_intermediate_size,
                     m.n_shared_experts, name_of(m.scoring), name_of(m.topk_method),
                     m.topk_group, m.n_group, m.norm_topk_prob, m.routed_scaling_factor));
  }
  if (c.quant.method != model::QuantConfig::Method::None)
    line(fmt::format("quantization     {}: held quantized on the GPU (routed experts, and FP8 linear weights; "
                     "dequantized into scratch for each use, or the experts converted inside the GEMM on Hopper "
                     "with --expert-dequant gemm; the workspace below is the scratch case's); dequantized to bf16 "
                     "at load on the CPU",
                     c.quant.describe()));
  line(fmt::format("vocab            {}", c.vocab_size));
  std::string rope = fmt::format("{}, theta {}", c.rope.type, c.rope.theta);
  if (c.rope.type != "default") rope += fmt::format(", factor {}", c.rope.factor);
  if (c.rope.partial_rotary_factor < 1.0)
    rope += fmt::format(", partial_rotary_factor {} (the first {} of {} dims of each head)", c.rope.partial_rotary_factor,
                        static_cast<int64_t>(static_cast<double>(c.head_dim) * c.rope.partial_rotary_factor), c.head_dim);
  if (c.rope.original_max_position_embeddings)
    rope += fmt::format(", original_max_position_embeddings {}", c.rope.original_max_position_embeddings);
  line(fmt::format("rope             {}", rope));
  int64_t sliding = 0;
  for (int64_t w : c.sliding_window) sliding = std::max(sliding, w);
  if (sliding) line(fmt::format("sliding window   {}", sliding));
  line(fmt::format("config hash      {}", c.fingerprint));
  if (c.num_hidden_layers >= 4) {
    line(fmt::format("default layers   [{}]  (EAGLE-3 preset [2, L/2, L-3], HF output_hidden_states ids)",
                     fmt::join(model::default_capture_ids(c), ", ")));
    // What a shard holds per token with those ids and the final state, by --dtype.
    const auto rows = static_cast<double>(model::default_capture_ids(c).size() + 1);
    auto per_token = [&](DType t) {
      return fmt::format("{} {:.1f} KiB", dtype_name(t),
                         rows * static_cast<double>(storage_codec(t).row_bytes(c.hidden_size)) / 1024.0);
    };
    line(fmt::format("output per token {}, {}, {} (default layers and the final state)",
                     per_token(DType::BF16), per_token(DType::F8E4M3),
                     per_token(DType::F32)));
  } else {
    line("default layers   none: fewer than 4 layers, pass --layers");
  }
  try {
    model::check_tensor_parallel(c, o.tp);
  } catch (const Error& e) {
    line(fmt::format("tp {}             does not fit: {}", o.tp, e.what()));
    return out;
  }
  model::ModelOptions mo{0, o.tp, o.max_tokens_per_step, o.max_seq_len};
  const model::MemoryPlan gpu = model::plan_memory(c, DType::BF16, mo, kernels::cuda_options_from(o.env));
  const model::MemoryPlan cpu = model::plan_memory(c, DType::F32, mo);
  line(fmt::format("memory per rank  at --tp {}, --max-tokens-per-step {}, --max-seq-len {}:", o.tp,
                   o.max_tokens_per_step, o.max_seq_len));
  line(fmt::format("  cuda (bf16)    weights {}, workspace {}, total {}", gib(gpu.weight_bytes),
                   gib(gpu.workspace_bytes), gib(gpu.weight_bytes + gpu.workspace_bytes)));
  line(fmt::format("  cpu (fp32)     weights {}, workspace {}, total {}", gib(cpu.weight_bytes),
                   gib(cpu.workspace_bytes), gib(cpu.weight_bytes + cpu.workspace_bytes)));
  if (o.gpu_memory_gib > 0) {
    const double need = static_cast<double>(gpu.weight_bytes + gpu.workspace_bytes) / (1024.0 * 1024 * 1024);
    line(fmt::format("  fits {:.0f} GiB   {} ({:.1f} GiB needed per GPU)", o.gpu_memory_gib,
                     need <= o.gpu_memory_gib ? "yes" : "NO", need));
  }
  return out;
}

}  // namespace e3::jobs
