// Hostile model directories: config.json nested without end, numbers past double, sizes no
// model has, sizes that disagree with the checkpoint, and model files that are FIFOs or
// directories. Each must end in one model error naming the file and the key, never a crash, a
// hang, an exit code 1 or an allocation sized from the lie.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "kernels/backend.h"
#include "model/config.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "support/test_support.h"

namespace e3 {
namespace {

using nlohmann::json;
using test::Contains;
using test::error_of;
using test::TempDir;

// Never called: loading needs the group's size and rank, not its collectives.
class NoCommunicator final : public parallel::Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "none"; }
  void all_reduce_sum(kernels::Tensor) override { FAIL() << "no collective during loading"; }
};

json tiny_config() {
  std::ifstream in(test::golden_case("tiny_llama_default") / "config.json");
  return json::parse(in);
}

std::filesystem::path write_config(const TempDir& dir, const std::string& text) {
  test::write_text(dir / "config.json", text);
  return dir / "config.json";
}

// Expects load_model_config(dir) to fail with a model error naming config.json and each of `parts`.
void expect_load_error(const TempDir& dir, std::initializer_list<std::string> parts) {
  const auto err = error_of([&] { model::load_model_config(dir.path()); });
  ASSERT_TRUE(err.has_value()) << "no error";
  EXPECT_EQ(err->kind(), ErrorKind::Model);
  EXPECT_TRUE(Contains(err->what(), (dir / "config.json").string()));
  for (const std::string& p : parts) EXPECT_TRUE(Contains(err->what(), p));
  EXPECT_LT(std::string(err->what()).size(), 1000u) << "the message quotes unbounded input";
}

std::string nested(char open, char close, size_t depth, const std::string& inner = "1") {
  return std::string(depth, open) + inner + std::string(depth, close);
}

// ---------------------------------------------------------------------------------------------
// Nesting and numbers

TEST(ConfigHostile, DeepNestingIsRefusedWhileParsing) {
  TempDir dir;
  json doc = tiny_config();
  std::string text = doc.dump();
  text.insert(1, "\"deep\": " + nested('[', ']', 100000) + ", ");
  write_config(dir, text);
  expect_load_error(dir, {"nested deeper than 64 levels", "deep"});
}

TEST(ConfigHostile, DeepNestingInAKeyThatIsQuotedInMessages) {
  TempDir dir;
  std::string chain;
  for (int i = 0; i < 100000; ++i) chain += "{\"a\":";
  chain += "1" + std::string(100000, '}');
  std::string text = tiny_config().dump();
  const std::string key = "\"hidden_size\":128";
  ASSERT_NE(text.find(key), std::string::npos) << text;
  text.replace(text.find(key), key.size(), "\"hidden_size\":" + chain);
  write_config(dir, text);
  expect_load_error(dir, {"nested deeper than 64 levels", "hidden_size.a.a"});
}

TEST(ConfigHostile, NumberOverflowNamesFileAndKey) {
  TempDir dir;
  std::string text = tiny_config().dump();
  const std::string key = "\"rope_theta\":10000.0";
  ASSERT_NE(text.find(key), std::string::npos) << text;
  text.replace(text.find(key), key.size(), "\"rope_theta\":1e400");
  write_config(dir, text);
  expect_load_error(dir, {"rope_theta", "1e400"});
}

TEST(ConfigHostile, NumberOverflowInsideAnArrayNamesTheElement) {
  TempDir dir;
  std::string text = tiny_config().dump();
  text.insert(1, "\"layer_types\": [\"full_attention\", 1e400], ");
  write_config(dir, text);
  expect_load_error(dir, {"layer_types[1]"});
}

TEST(ConfigHostile, HugeTokenInAnErrorIsClipped) {
  TempDir dir;
  write_config(dir, "{\"hidden_size\": 1" + std::string(1 << 20, '7') + "}");
  expect_load_error(dir, {"invalid JSON", "hidden_size", "number overflow"});
  write_config(dir, "{\"model_type\": \"" + std::string(1 << 20, 'q'));
  expect_load_error(dir, {"invalid JSON", "model_type"});
}

TEST(ConfigHostile, HugeStringValueIsClippedInTheMessage) {
  TempDir dir;
  json doc = tiny_config();
  doc["hidden_act"] = std::string(1 << 20, 'g');
  write_config(dir, doc.dump());
  expect_load_error(dir, {"'hidden_act' is a string of 1048576 bytes"});
  doc = tiny_config();
  doc["hidden_size"] = std::string(1 << 20, '9');
  write_config(dir, doc.dump());
  expect_load_error(dir, {"'hidden_size' must be an integer"});
}

TEST(ConfigHostile, WrongTypeInsideALayerListIsAModelError) {
  json doc = tiny_config();
  doc["architectures"] = {"Qwen3MoeForCausalLM"};
  doc["model_type"] = "qwen3_moe";
  doc["mlp_only_layers"] = {0, "one"};
  const auto err = error_of([&] { model::parse_model_config(doc, "/m/config.json"); });
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->kind(), ErrorKind::Model);
  EXPECT_TRUE(Contains(err->what(), "mlp_only_layers"));
}

TEST(ConfigHostile, IntegerPastInt64IsNotWrapped) {
  json doc = tiny_config();
  doc["head_dim"] = 18446744073709551584ull;  // as int64: -32
  auto err = error_of([&] { model::parse_model_config(doc, "/m/config.json"); });
  ASSERT_TRUE(err.has_value());
  EXPECT_TRUE(Contains(err->what(), "'head_dim' must be an integer"));
  doc = tiny_config();
  doc["num_key_value_heads"] = 1e300;  // a whole number as a double, far past int64
  err = error_of([&] { model::parse_model_config(doc, "/m/config.json"); });
  ASSERT_TRUE(err.has_value());
  EXPECT_TRUE(Contains(err->what(), "'num_key_value_heads' must be an integer"));
}

// ---------------------------------------------------------------------------------------------
// Sizes

TEST(ConfigHostile, AbsurdSizesNameTheKey) {
  const std::pair<const char*, int64_t> cases[] = {{"num_hidden_layers", 1000000000},
                                                    {"vocab_size", 1000000000000},
                                                    {"intermediate_size", int64_t{1} << 62},
                                                    {"hidden_size", int64_t{1} << 31},
                                                    {"num_attention_heads", int64_t{1} << 40}};
  for (const auto& [key, value] : cases) {
    json doc = tiny_config();
    doc[key] = value;
    const auto err = error_of([&] { model::parse_model_config(doc, "/m/config.json"); });
    ASSERT_TRUE(err.has_value()) << key;
    EXPECT_EQ(err->kind(), ErrorKind::Model) << key;
    EXPECT_TRUE(Contains(err->what(), fmt::format("'{}' is {}", key, value)));
  }
}

TEST(ConfigHostile, SizesEachPlausibleButTogetherAbsurdAreRefused) {
  // Every size below its own bound; the experts alone would be 2^14 * 2^16 * 3 * 2^20 * 2^22.
  json doc = tiny_config();
  doc["architectures"] = {"Qwen3MoeForCausalLM"};
  doc["model_type"] = "qwen3_moe";
  doc["num_hidden_layers"] = 16384;
  doc["hidden_size"] = 1 << 20;
  doc["num_experts"] = 65536;
  doc["num_experts_per_tok"] = 8;
  doc["moe_intermediate_size"] = 1 << 22;
  const auto err = error_of([&] { model::parse_model_config(doc, "/m/config.json"); });
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->kind(), ErrorKind::Model);
  EXPECT_TRUE(Contains(err->what(), "num_hidden_layers 16384"));
  EXPECT_TRUE(Contains(err->what(), "65536 experts of moe_intermediate_size 4194304"));
}

TEST(ConfigHostile, TheLargestPublishedModelsAreWithinBounds) {
  const json llama405b = json::parse(R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 16384, "intermediate_size": 53248, "num_hidden_layers": 126, "num_attention_heads": 128,
    "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072, "rope_theta": 500000.0})");
  const json kimi_k2 = json::parse(R"({"architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2",
    "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
    "num_attention_heads": 64, "num_key_value_heads": 64, "vocab_size": 163840, "n_routed_experts": 384,
    "num_experts_per_tok": 8, "n_shared_experts": 1, "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1,
    "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "max_position_embeddings": 131072, "rope_theta": 50000.0})");
  EXPECT_EQ(model::parse_model_config(llama405b, "/m/config.json").hidden_size, 16384);
  EXPECT_EQ(model::parse_model_config(kimi_k2, "/m/config.json").moe.num_experts, 384);
}

// The tiny golden checkpoint with one config key changed, loaded through the model API: the
// config is checked against the tensors before anything is allocated from it.
std::optional<Error> load_with(const char* key, int64_t value) {
  TempDir dir;
  json doc = tiny_config();
  doc[key] = value;
  write_config(dir, doc.dump());
  std::filesystem::create_symlink(test::golden_case("tiny_llama_default") / "model.safetensors",
                                  dir / "model.safetensors");
  return error_of([&] {
    const model::ModelConfig cfg = model::load_model_config(dir.path());
    const model::Checkpoint ckpt(dir.path());
    auto backend = kernels::make_cpu_backend(1);
    NoCommunicator comm;
    model::load_model(cfg, ckpt, *backend, comm, {0, 1, 64, 64});
  });
}

TEST(ConfigHostile, SizesThatDisagreeWithTheCheckpointNameTheKey) {
  const std::pair<const char*, int64_t> cases[] = {
      {"hidden_size", 256}, {"vocab_size", 1 << 20}, {"num_hidden_layers", 12}, {"intermediate_size", 1 << 20}};
  for (const auto& [key, value] : cases) {
    const auto err = load_with(key, value);
    ASSERT_TRUE(err.has_value()) << key;
    EXPECT_EQ(err->kind(), ErrorKind::Model) << key;
    EXPECT_TRUE(Contains(err->what(), fmt::format("{} is {}", key, value)));
  }
  const auto layers = load_with("num_hidden_layers", 12);
  ASSERT_TRUE(layers.has_value());
  EXPECT_TRUE(Contains(layers->what(), "it holds layers 0 to 7"));
}

// ---------------------------------------------------------------------------------------------
// Files that are not regular files

// The error `f` throws, which it must throw without blocking on `fifo`. A reader stuck in open()
// is released after a generous deadline by opening the write end, so that the test fails
// instead of hanging.
template <typename F>
std::optional<Error> error_without_blocking(const std::filesystem::path& fifo, F f) {
  auto result = std::async(std::launch::async, [&] { return error_of(f); });
  if (result.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    ADD_FAILURE() << "blocked on the FIFO " << fifo;
    while (result.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
      const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) ::close(fd);
    }
  }
  return result.get();
}

void expect_refused(const std::optional<Error>& err, const std::filesystem::path& path, const std::string& what) {
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->kind(), ErrorKind::Model);
  EXPECT_TRUE(Contains(err->what(), path.string()));
  EXPECT_TRUE(Contains(err->what(), what));
}

TEST(ModelFilesHostile, FifoConfigIsRefusedWithoutBlocking) {
  TempDir dir;
  ASSERT_EQ(::mkfifo((dir / "config.json").c_str(), 0600), 0);
  expect_refused(error_without_blocking(dir / "config.json", [&] { model::load_model_config(dir.path()); }),
                 dir / "config.json", "a FIFO, not a regular file");
}

TEST(ModelFilesHostile, FifoSafetensorsIsRefusedWithoutBlocking) {
  TempDir dir;
  ASSERT_EQ(::mkfifo((dir / "model.safetensors").c_str(), 0600), 0);
  expect_refused(error_without_blocking(dir / "model.safetensors", [&] { model::Checkpoint ckpt(dir.path()); }),
                 dir / "model.safetensors", "a FIFO, not a regular file");
}

TEST(ModelFilesHostile, FifoIndexAndFifoShardAreRefusedWithoutBlocking) {
  TempDir dir;
  ASSERT_EQ(::mkfifo((dir / "model.safetensors.index.json").c_str(), 0600), 0);
  expect_refused(
      error_without_blocking(dir / "model.safetensors.index.json", [&] { model::Checkpoint ckpt(dir.path()); }),
      dir / "model.safetensors.index.json", "a FIFO, not a regular file");

  TempDir dir2;
  test::write_text(dir2 / "model.safetensors.index.json", R"({"weight_map": {"a": "shard.safetensors"}})");
  ASSERT_EQ(::mkfifo((dir2 / "shard.safetensors").c_str(), 0600), 0);
  expect_refused(error_without_blocking(dir2 / "shard.safetensors", [&] { model::Checkpoint ckpt(dir2.path()); }),
                 dir2 / "shard.safetensors", "a FIFO, not a regular file");
}

TEST(ModelFilesHostile, DirectoryInPlaceOfAFileIsRefused) {
  TempDir dir;
  std::filesystem::create_directory(dir / "config.json");
  std::filesystem::create_directory(dir / "model.safetensors");
  expect_refused(error_of([&] { model::load_model_config(dir.path()); }), dir / "config.json", "a directory");
  expect_refused(error_of([&] { model::Checkpoint ckpt(dir.path()); }), dir / "model.safetensors", "a directory");
}

TEST(ModelFilesHostile, SymlinksToRegularFilesStillLoad) {
  TempDir dir;
  const auto src = test::golden_case("tiny_llama_default");
  std::filesystem::create_symlink(src / "config.json", dir / "config.json");
  std::filesystem::create_symlink(src / "model.safetensors", dir / "model.safetensors");
  EXPECT_EQ(model::load_model_config(dir.path()).hidden_size, 128);
  const model::Checkpoint ckpt(dir.path());
  EXPECT_TRUE(ckpt.contains("model.embed_tokens.weight"));
}

}  // namespace
}  // namespace e3
