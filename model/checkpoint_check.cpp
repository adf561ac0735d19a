#include "model/checkpoint_check.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#include "model/arch.h"

namespace e3::model {
namespace {

// "layers 0 to 7" as the checkpoint's tensor names show them, for messages.
std::string layers_held(const Checkpoint& ckpt, const std::string& prefix, const TensorNames& n) {
  const std::string head = prefix + std::string(n.layers_prefix());
  int64_t count = 0;
  for (const std::string& name : ckpt.names()) {
    if (name.compare(0, head.size(), head) != 0) continue;
    int64_t layer = 0;
    size_t i = head.size();
    for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && layer < kMaxLayers * 16; ++i)
      layer = layer * 10 + (name[i] - '0');
    if (i > head.size()) count = std::max(count, layer + 1);
  }
  return count > 0 ? fmt::format("it holds layers 0 to {}", count - 1)
                   : fmt::format("it holds no {}* tensors", n.layers_prefix());
}

}  // namespace

void check_config_against_checkpoint(const ModelConfig& c, const Checkpoint& ckpt) {
  E3_REQUIRE(c.family != nullptr, ErrorKind::Internal, "{}: the config names no architecture", c.source.string());
  const TensorNames& n = *c.family->names;
  const std::string where = c.source.string();
  const std::string& p = c.tensor_prefix;
  auto file_of = [&](const std::string& name) { return ckpt.file_of(name).path().string(); };

  const std::string embed = p + n.embed;
  const TensorInfo& e = ckpt.require(embed);
  E3_REQUIRE(e.shape.size() == 2 && e.shape[1] == c.hidden_size, ErrorKind::Model,
             "{}: hidden_size is {}, but '{}' in {} has shape {} ([vocab_size, hidden_size])", where, c.hidden_size,
             embed, file_of(embed), e.shape_str());
  E3_REQUIRE(e.shape[0] == c.vocab_size, ErrorKind::Model,
             "{}: vocab_size is {}, but '{}' in {} has shape {} ([vocab_size, hidden_size])", where, c.vocab_size,
             embed, file_of(embed), e.shape_str());

  const std::string last = p + layer_name(n.input_norm, c.num_hidden_layers - 1);
  E3_REQUIRE(ckpt.contains(last), ErrorKind::Model, "{}: num_hidden_layers is {}, but the checkpoint has no '{}' ({})",
             where, c.num_hidden_layers, last, layers_held(ckpt, p, n));

  const auto& moe_layer = c.moe.layer_is_moe;
  auto is_moe = [&](int64_t l) { return c.moe.num_experts > 0 && moe_layer[static_cast<size_t>(l)]; };
  // Stored dense or FP8, a down projection has its logical shape; INT4 ones are checked by the loader.
  auto check_down = [&](const std::string& name, int64_t inner, const char* key) {
    if (!ckpt.contains(name)) return;
    const TensorInfo& t = ckpt.require(name);
    E3_REQUIRE(t.shape == std::vector<int64_t>({c.hidden_size, inner}), ErrorKind::Model,
               "{}: {} is {}, but '{}' in {} has shape {} ([hidden_size, {}])", where, key, inner, name, file_of(name),
               t.shape_str(), key);
  };
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (is_moe(l)) continue;
    check_down(p + layer_name(n.down, l) + ".weight", c.intermediate_size, "intermediate_size");
    break;
  }
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (!is_moe(l)) continue;
    const char* key = c.family->experts_key;
    const std::string base = p + expert_name(n.expert_down, l, c.moe.num_experts - 1);
    E3_REQUIRE(ckpt.contains(base + ".weight") || ckpt.contains(base + ".weight_packed"), ErrorKind::Model,
               "{}: {} is {}, but the checkpoint has no '{}.weight'", where, key, c.moe.num_experts, base);
    check_down(base + ".weight", c.moe.moe_intermediate_size, "moe_intermediate_size");
    break;
  }
}

}  // namespace e3::model
