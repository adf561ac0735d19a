// A rank reads only what it owns: with expert parallelism at TP = 4, loading rank r's slice
// of a MoE checkpoint brings into memory the pages of rank r's experts and never a page that
// lies wholly inside another rank's expert.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "model/model.h"
#include "support/test_support.h"

namespace e3 {
namespace {

constexpr int kTp = 4, kExperts = 16, kLayers = 2;
constexpr int64_t kHidden = 256, kInter = 512;

// Never called: loading needs the group's size and rank, not its collectives.
class SilentCommunicator final : public parallel::Communicator {
 public:
  SilentCommunicator(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "none"; }
  void all_reduce_sum(kernels::Tensor) override { FAIL() << "no collective during loading"; }

 private:
  int rank_, size_;
};

std::string expert_name(int layer, int expert, const char* proj) {
  return fmt::format("model.layers.{}.mlp.experts.{}.{}.weight", layer, expert, proj);
}

// A Qwen3-MoE checkpoint whose experts are large enough (256 KiB each) to span many pages.
void write_checkpoint(const std::filesystem::path& dir) {
  test::write_text(dir / "config.json", R"({"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
    "hidden_size": 256, "intermediate_size": 512, "moe_intermediate_size": 512, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 64, "vocab_size": 64, "num_experts": 16,
    "num_experts_per_tok": 2, "norm_topk_prob": true, "rope_theta": 10000.0})");
  std::vector<test::StTensor> t;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    t.push_back({name, "BF16", shape, test::bf16_bytes(test::random_floats(static_cast<size_t>(n), t.size()))});
  };
  add("model.embed_tokens.weight", {64, kHidden});
  add("model.norm.weight", {kHidden});
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    add(p + "input_layernorm.weight", {kHidden});
    add(p + "post_attention_layernorm.weight", {kHidden});
    for (const char* w : {"q_proj", "k_proj", "v_proj"}) add(p + "self_attn." + w + ".weight", {256, kHidden});
    add(p + "self_attn.o_proj.weight", {kHidden, 256});
    add(p + "self_attn.q_norm.weight", {64});
    add(p + "self_attn.k_norm.weight", {64});
    add(p + "mlp.gate.weight", {kExperts, kHidden});
    for (int e = 0; e < kExperts; ++e) {
      add(expert_name(l, e, "gate_proj"), {kInter, kHidden});
      add(expert_name(l, e, "up_proj"), {kInter, kHidden});
      add(expert_name(l, e, "down_proj"), {kHidden, kInter});
    }
  }
  test::write_safetensors(dir / "model.safetensors", t);
}

// Drops the file's pages from the page cache (they are clean after fsync).
void evict(const std::filesystem::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ::fdatasync(fd);
  ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  ::close(fd);
}

// Which pages of the file are in memory now.
std::vector<unsigned char> resident_pages(const std::filesystem::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY);
  const size_t size = std::filesystem::file_size(file);
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> vec((size + page - 1) / page);
  ::mincore(map, size, vec.data());
  ::munmap(map, size);
  for (auto& v : vec) v &= 1;
  return vec;
}

TEST(LazyLoading, ARankPagesInItsOwnExpertsAndNoOtherRanks) {
  test::TempDir dir;
  write_checkpoint(dir.path());
  const auto file = dir / "model.safetensors";
  const model::ModelConfig cfg = model::load_model_config(dir.path());
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));

  for (int rank = 0; rank < kTp; ++rank) {
    evict(file);
    const auto before = resident_pages(file);
    const size_t cached = static_cast<size_t>(std::count(before.begin(), before.end(), 1));
    ASSERT_LT(cached, before.size() / 50) << "the page cache kept the file; the measurement would mean nothing";

    const model::Checkpoint ckpt(dir.path());
    auto backend = kernels::make_cpu_backend(1);
    SilentCommunicator comm(rank, kTp);
    auto m = model::load_model(cfg, ckpt, *backend, comm, {rank, kTp, 64, 64});
    const auto after = resident_pages(file);

    const model::SafetensorsFile& st = ckpt.file_of(expert_name(0, 0, "up_proj"));
    const uint8_t* base = st.map().data();
    size_t own_pages = 0, own_resident = 0;
    for (int l = 0; l < kLayers; ++l)
      for (int e = 0; e < kExperts; ++e)
        for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
          const model::TensorInfo* info = st.find(expert_name(l, e, proj));
          const size_t begin = static_cast<size_t>(st.data(*info) - base), end = begin + (info->end - info->begin);
          const bool owned = e / (kExperts / kTp) == rank;
          // Pages wholly inside the tensor; boundary pages may be shared with a neighbour.
          for (size_t p = (begin + page - 1) / page; (p + 1) * page <= end; ++p) {
            if (owned) {
              ++own_pages;
              own_resident += after[p];
            } else {
              ASSERT_EQ(after[p], 0) << "rank " << rank << " paged in " << info->name << " (page " << p << ")";
            }
          }
        }
    EXPECT_EQ(own_resident, own_pages) << "rank " << rank << " did not read all of its experts";
    EXPECT_GT(own_pages, 0u);
  }
}

// `case_name` from the golden oracle rewritten into `dir` with `extra` tensors added (large
// enough to span many pages), so that whether they were read shows in the page cache.
void rewrite_with(const std::string& case_name, const std::filesystem::path& dir, const std::vector<std::string>& extra) {
  const std::filesystem::path src = test::golden_case(case_name);
  std::filesystem::copy_file(src / "config.json", dir / "config.json");
  const model::SafetensorsFile file(src / "model.safetensors");
  std::vector<test::StTensor> t;
  for (const auto& [name, info] : file.tensors()) {
    const uint8_t* p = file.data(info);
    t.push_back({name, model::st_dtype_name(info.dtype), info.shape, std::vector<uint8_t>(p, p + (info.end - info.begin))});
  }
  for (const std::string& name : extra)
    t.push_back({name, "BF16", {512, 1024}, test::bf16_bytes(test::random_floats(512 * 1024, t.size()))});
  test::write_safetensors(dir / "model.safetensors", t);
}

// Pages wholly inside tensors whose name matches `skipped` must not be resident; returns how
// many such pages there were.
size_t check_never_read(const model::Checkpoint& ckpt, const std::filesystem::path& file, const std::string& skipped) {
  const auto resident = resident_pages(file);
  const model::SafetensorsFile& st = ckpt.file_of(ckpt.names().front());
  const uint8_t* base = st.map().data();
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  size_t pages = 0;
  for (const auto& [name, info] : st.tensors()) {
    if (name.find(skipped) == std::string::npos) continue;
    const size_t begin = static_cast<size_t>(st.data(info) - base), end = begin + (info.end - info.begin);
    for (size_t p = (begin + page - 1) / page; (p + 1) * page <= end; ++p, ++pages)
      EXPECT_EQ(resident[p], 0) << name << " was paged in (page " << p << ")";
  }
  return pages;
}

TEST(LazyLoading, VisionTowerAndExtraLayersAreNeverRead) {
  struct Case {
    std::string name;
    std::vector<std::string> extra;
    std::vector<std::string> skipped;
  };
  // Kimi-K2.5: the vision tower and projector; DeepSeek-V3: the next-token-prediction layer
  // model.layers.{num_hidden_layers}.* (5 here) that the checkpoint carries beyond the model.
  for (const Case& c : {Case{"dev_kimi_k25_int4", {"vision_tower.encoder.blocks.1.mlp.weight", "mm_projector.proj.2.weight"},
                             {"vision_tower.", "mm_projector."}},
                        Case{"dev_deepseek_v3_fp8", {"model.layers.5.mlp.down_proj.weight"}, {"model.layers.5."}},
                        Case{"dev_glm45", {"model.layers.4.mlp.up_proj.weight", "model.layers.4.mlp.down_proj.weight"},
                             {"model.layers.4."}}}) {
    SCOPED_TRACE(c.name);
    test::TempDir dir;
    rewrite_with(c.name, dir.path(), c.extra);
    const auto file = dir / "model.safetensors";
    evict(file);
    const model::ModelConfig cfg = model::load_model_config(dir.path());
    const model::Checkpoint ckpt(dir.path());
    auto backend = kernels::make_cpu_backend(1);
    SilentCommunicator comm(0, 1);
    auto m = model::load_model(cfg, ckpt, *backend, comm, {0, 1, 64, 64});
    size_t pages = 0;
    for (const std::string& skipped : c.skipped) pages += check_never_read(ckpt, file, skipped);
    EXPECT_GE(pages, 256u) << "the skipped tensors span too few pages to show anything";
    const auto resident = resident_pages(file);  // ...while the model's own weights were read
    EXPECT_GT(std::count(resident.begin(), resident.end(), 1), 100);
  }
}

}  // namespace
}  // namespace e3
