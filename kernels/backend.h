// The compute primitives every model is written in. One interface, two implementations:
// CpuBackend (fp32, BLAS; the reference) and, when built, the CUDA backend (bf16).
// All tensors passed to an op live in that backend's memory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/buffer.h"
#include "kernels/cuda_options.h"
#include "kernels/quant.h"
#include "kernels/router_params.h"
#include "kernels/tensor.h"

namespace e3::kernels {

// A packed batch of variable-length sequences, as the attention and RoPE ops see it.
struct SequenceLayout {
  Tensor positions;              // [1, tokens] int32: position of each token inside its sequence
  Tensor cu_seqlens;             // [1, seqs + 1] int32: token offsets of the sequences
  const int32_t* cu_seqlens_host = nullptr;  // the same offsets in host memory
  int num_seqs = 0;
  int64_t num_tokens = 0;
  int64_t max_seqlen = 0;
};

// cos/sin of every position and frequency, with any attention factor already folded in.
struct RopeTable {
  Tensor cos;  // [max_positions, rot_dim / 2] fp32
  Tensor sin;  // [max_positions, rot_dim / 2] fp32
};

struct RopeParams {
  int num_heads = 0;
  int head_dim = 0;     // stride between heads inside a row
  int rot_offset = 0;   // first rotated column inside a head
  int rot_dim = 0;      // rotated columns per head
  bool interleaved = false;  // pairs (2i, 2i+1) instead of (i, i + rot_dim/2)
};

struct AttentionParams {
  int num_q_heads = 0;   // local heads on this rank
  int num_kv_heads = 0;  // local kv heads; q head h reads kv head h / (num_q_heads / num_kv_heads)
  int qk_head_dim = 0;
  int v_head_dim = 0;
  float scale = 1.0f;
  int64_t sliding_window = 0;  // 0: full causal; else key j is visible from query i iff i - j < window
};

// The routed experts one rank owns in one MoE layer, stacked: local expert e's gate is rows
// [2eI, 2eI + I) of gate_up and its up projection the next I rows; its down projection is
// rows [eH, (e+1)H) of down.
//
// Where the backend keeps experts quantized (keeps_weights_quantized), gate_up and down are
// unset and gate_up_q / down_q hold the checkpoint's form: matrix 2e of gate_up_q is expert
// e's gate [I, H] and matrix 2e + 1 its up; matrix e of down_q its down [H, I]. moe_experts
// then dequantizes them into its scratch for the call.
struct ExpertStack {
  Tensor gate_up;  // [num_experts * 2I, H]
  Tensor down;     // [num_experts * H, I]
  int first_expert = 0;  // global id of local expert 0
  int num_experts = 0;
  int64_t intermediate = 0;
  QuantStack gate_up_q;  // 2 * num_experts matrices [I, H]
  QuantStack down_q;     // num_experts matrices [H, I]
};

// The largest MoE layer a workspace must serve (for Backend::moe_scratch_bytes).
struct MoeScratchShape {
  int top_k = 0;
  int local_experts = 0;
  int64_t hidden = 0;
  int64_t intermediate = 0;
  bool quantized = false;  // room for the experts dequantized to bf16, too
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;                // "cpu" or "cuda"
  virtual std::string device_description() const = 0;  // for the startup line
  // Names the physical device, the same in every process that uses it (a GPU's PCI bus id),
  // however CUDA_VISIBLE_DEVICES numbers it; empty for the CPU.
  virtual std::string device_id() const { return {}; }
  // The dtype of weights and activations inside the forward pass.
  virtual DType compute_dtype() const = 0;

  virtual DeviceBuffer allocate(size_t bytes) = 0;
  // Host -> backend, converting from float to dst.dtype (dst must be contiguous).
  virtual void upload_float(Tensor dst, const float* host) = 0;
  // Host -> backend, raw bytes of the same dtype (dst must be contiguous).
  virtual void upload_raw(Tensor dst, const void* host) = 0;
  // Host -> backend, `bytes` raw bytes, on a side stream once all work issued so far is done;
  // returns a ticket for wait_ticket, until which `host` must stay untouched. From pinned
  // memory (allocate_host) the copy overlaps whatever the host does next. Here: at once.
  virtual uint64_t upload_raw_async(void* dst, const void* host, size_t bytes) {
    upload_raw(Tensor{dst, DType::U8, 1, static_cast<int64_t>(bytes)}, host);
    return 0;
  }
  // Whether allocate() returns host memory that the caller may write directly (the CPU).
  virtual bool memory_on_host() const { return false; }
  // Backend -> host as float, for any dtype and stride.
  virtual void download_float(Tensor src, float* host) = 0;
  // Waits until all work issued so far is done.
  virtual void synchronize() = 0;
  // The backend's native stream (cudaStream_t for CUDA), for communicators that enqueue on it.
  virtual void* stream_handle() const { return nullptr; }
  // Device memory in use now (all of this process's allocations), 0 where not known.
  virtual size_t device_memory_used() const { return 0; }
  // With CudaOptions::profile (E3_PROFILE=1), the CUDA backend times every op with events; this
  // returns the table (op, calls, total ms, share) of what ran so far, else "".
  virtual std::string profile_report() { return ""; }
  // Forgets the op times so far (the warm-up's include one-off costs such as lazy module loads).
  virtual void profile_reset() {}

  // dst = src (same shape; strides allowed; dtypes may differ: converted), on the device.
  virtual void copy(Tensor src, Tensor dst) = 0;

  // --dtype fp8: each row of src [rows, H] (fp32 or the compute dtype, strides allowed) encoded
  // into dst, U8 [rows, H + 4] contiguous, as encode_e4m3_row (core/e4m3.h) does, bit for bit.
  virtual void encode_e4m3_rows(Tensor src, Tensor dst) = 0;

  // The asynchronous path out of the device, for captured states. Host memory from
  // allocate_host is pinned on CUDA, so copies into it overlap compute.
  virtual DeviceBuffer allocate_host(size_t bytes) = 0;
  // Copies `bytes` device -> host once all work issued so far is done, on a side stream;
  // returns a ticket. On the CPU backend the copy happens at once.
  virtual uint64_t copy_to_host_async(const void* device_src, void* host_dst, size_t bytes) = 0;
  // Blocks the calling host thread until the ticket's copy is done.
  virtual void wait_ticket(uint64_t ticket) = 0;
  // Seconds from the start of ticket `first`'s copy to the end of ticket `last`'s (both waited
  // for), for the writer path's account; 0 where copies are not timed (the CPU copies at once).
  virtual double copy_seconds(uint64_t first, uint64_t last) { return 0; }
  // t = N(0, 1) * scale from a counter-based generator seeded by `seed` (benchmark weights).
  virtual void fill_random(Tensor t, uint64_t seed, float scale) = 0;
  // Random quantized values (never an FP8 NaN) and scales of about 1 / (8 sqrt(cols)), so
  // that the dequantized weights have a benchmark's usual size.
  virtual void fill_random_quant(const QuantStack& w, uint64_t seed) = 0;

  // Whether weights a checkpoint stores quantized stay in that form in this backend's memory
  // (routed experts: FP8 or INT4; other linear weights: FP8), dequantized for each use.
  virtual bool keeps_weights_quantized() const { return false; }
  // Whether moe_experts reads these kept-quantized experts directly (converting B tiles in its
  // GEMMs), so that its scratch needs no dequantized copy (MoeScratchShape::quantized false).
  virtual bool reads_quantized_experts(const ExpertStack&) const { return false; }
  // --expert-dequant gemm (the default): convert kept-quantized experts inside the GEMM where the
  // backend can (less memory), rather than dequantizing a layer's experts into scratch.
  // Set before the model is built: it sizes the workspace.
  virtual void set_quantized_experts_in_gemm(bool) {}
  // out [count * rows, cols] (compute dtype) = the bf16 values of every matrix of w.
  virtual void dequantize(const QuantStack& w, Tensor out) = 0;

  // out[i, :] = table[ids[i], :]
  virtual void embedding(Tensor ids, Tensor table, Tensor out) = 0;
  // y = x w^T (+ bias). x [M, K], w [N, K], bias [1, N] or null, y [M, N]. x and w share a
  // dtype (compute dtype, or fp32); y may be fp32 either way; bias has y's dtype.
  virtual void linear(Tensor x, Tensor w, const Tensor* bias, Tensor y) = 0;
  // out = x / rms(x) * weight, row by row. weight [1, cols]. out may alias x. x and out may
  // be fp32 or the compute dtype.
  virtual void rmsnorm(Tensor x, Tensor weight, float eps, Tensor out) = 0;
  // residual += x, then out = rmsnorm(residual): the step between two sub-layers. residual
  // and x are fp32 (the residual stream and a block's summed output); out has the compute
  // dtype; out_f32, if it has data, receives the same normalised values in fp32.
  virtual void add_rmsnorm(Tensor residual, Tensor x, Tensor weight, float eps, Tensor out, Tensor out_f32) = 0;
  // In place, each head_dim-wide chunk of every row normalised on its own (Qwen3's q/k norm).
  // weight [1, head_dim]; x may be a strided view.
  virtual void rmsnorm_heads(Tensor x, int head_dim, Tensor weight, float eps) = 0;
  // acc += x
  virtual void add_inplace(Tensor acc, Tensor x) = 0;
  // acc += bias broadcast over rows. bias [1, cols].
  virtual void add_bias(Tensor acc, Tensor bias) = 0;
  // Rotates x [tokens, num_heads * head_dim] in place.
  virtual void rope(Tensor x, const RopeParams& p, const RopeTable& table, const SequenceLayout& seqs) = 0;
  // Causal attention within each sequence of the packed batch.
  // q [tokens, hq * dqk], k [tokens, hkv * dqk], v [tokens, hkv * dv], out [tokens, hq * dv].
  virtual void attention(Tensor q, Tensor k, Tensor v, Tensor out, const AttentionParams& p,
                         const SequenceLayout& seqs) = 0;
  // out = silu(gate) * up, elementwise.
  virtual void silu_mul(Tensor gate, Tensor up, Tensor out) = 0;

  // MoE router: logits [tokens, E] fp32 -> topk_ids [tokens, k] int32 and topk_weights
  // [tokens, k] fp32. correction_bias [1, E] fp32 is used by noaux_tc only (may be null).
  // Ties go to the lower expert id.
  virtual void moe_route(Tensor logits, const Tensor* correction_bias, const RouterParams& p, Tensor topk_ids,
                         Tensor topk_weights) = 0;
  // out [tokens, H] (fp32) = sum over the (token, slot) pairs routed to this rank's experts of
  // weight * down(silu(gate(x)) * up(x)), plus `shared` [tokens, H] (fp32, the shared experts'
  // output) where given: one rounding, as a separate add after the sum would make, without the
  // pass over out that such an add costs. out is overwritten, so `shared` must not be out. `scratch`
  // is a byte buffer of at least moe_scratch_bytes(tokens, ...) bytes.
  virtual void moe_experts(Tensor x, Tensor topk_ids, Tensor topk_weights, const ExpertStack& experts, Tensor out,
                           Tensor shared, Tensor scratch) = 0;
  virtual size_t moe_scratch_bytes(int64_t tokens, const MoeScratchShape& shape) const = 0;
  // MLA: kv [tokens, heads * (nope + v)] per head [k_nope | v], and the shared rotated key
  // k_rot [tokens, rope] -> k [tokens, heads * (nope + rope)] per head [k_nope | k_rot], and
  // v [tokens, heads * v].
  virtual void mla_expand_kv(Tensor kv, Tensor k_rot, int heads, int nope_dim, int v_dim, Tensor k, Tensor v) = 0;
};

// Threads: 0 means "choose from the cores available to this process".
std::unique_ptr<Backend> make_cpu_backend(int threads);
// A backend that only counts what would be allocated (for `info`); its ops must not run. For bf16 it
// stands for the CUDA backend with these options (E3_MOE_UNFUSED=1 carves more MoE scratch).
std::unique_ptr<Backend> make_planning_backend(DType compute_dtype, const CudaOptions& options = {});
// GPUs visible to this process; 0 when the build has no CUDA backend.
int cuda_device_count();
// Throws a usage error when the build has no CUDA backend.
std::unique_ptr<Backend> make_cuda_backend(int device, const CudaOptions& options = {});
// The L2 side (0 or 1) of each SM of GPU `device`, by %smid, where its L2 is two partitions
// joined by a link (H100, H200): from the latency of the same cold lines seen from each SM in
// turn (l2_sides_cuda.cu). Takes tens of milliseconds and a sweep buffer of three times L2: call
// at start-up. Throws a usage error when the build has no CUDA backend.
constexpr int kL2SideSlots = 256;
struct L2Sides {
  std::vector<uint8_t> side_of_sm;  // [kL2SideSlots]; all 0 where !found
  int sms[2] = {0, 0};              // SMs seen on each side
  double weakest = 0;               // the smallest |score| of an SM (a correlation, below)
  bool found = false;               // two sides, every SM clearly on one
  // What the sides were found from, for the tests' report: the SMs in the order they were timed,
  // each one's cycles per probe line [SMs, lines] and its score (+: side 0, -: side 1).
  std::vector<unsigned> sm_ids, cycles;
  std::vector<double> score;
};
L2Sides find_l2_sides(int device);
// What this binary can run on, for --version and the ready line: "CUDA backend for
// architectures ..." or "CPU-only build: no CUDA backend".
const char* build_description();

}  // namespace e3::kernels
