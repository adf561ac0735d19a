// The one table of supported architecture families.
#include "model/arch.h"

namespace e3::model {

// Each defined in its arch_<family>.cpp.
const ArchDescriptor& llama_arch();
const ArchDescriptor& mistral_arch();
const ArchDescriptor& qwen2_arch();
const ArchDescriptor& qwen3_arch();
const ArchDescriptor& qwen3_moe_arch();
const ArchDescriptor& deepseek_v2_arch();
const ArchDescriptor& deepseek_v3_arch();
const ArchDescriptor& glm4_moe_arch();

ArchDescriptor shared_pieces_family(const char* family, std::vector<std::string_view> architectures,
                                    std::vector<std::string_view> model_types, AttentionKind attention,
                                    ConfigParser parse) {
  ArchDescriptor d;
  d.family = family;
  d.architectures = std::move(architectures);
  d.model_types = std::move(model_types);
  d.attention = attention;
  d.parse = parse;
  d.attention_block = attention == AttentionKind::Mla ? mla_attention_block : gqa_attention_block;
  return d;
}

std::span<const ArchDescriptor* const> arch_registry() {
  static const ArchDescriptor* const table[] = {
      &llama_arch(),       &mistral_arch(),     &qwen2_arch(),       &qwen3_arch(),
      &qwen3_moe_arch(),   &deepseek_v2_arch(), &deepseek_v3_arch(), &glm4_moe_arch(),
  };
  return table;
}

const ArchDescriptor* find_arch(std::string_view architecture, std::string_view model_type) {
  for (const ArchDescriptor* a : arch_registry())
    for (std::string_view name : a->architectures)
      if (name == architecture) return a;
  // An unrecognised architecture name with a known model_type is still that family.
  for (const ArchDescriptor* a : arch_registry())
    for (std::string_view name : a->model_types)
      if (name == model_type) return a;
  return nullptr;
}

std::string supported_model_types() {
  std::string out;
  for (const ArchDescriptor* a : arch_registry()) {
    out += (out.empty() ? "" : ", ") + std::string(a->family);
    std::string aliases;
    for (std::string_view t : a->model_types)
      if (t != a->family) aliases += (aliases.empty() ? "" : ", ") + std::string(t);
    if (!aliases.empty()) out += " (" + aliases + ")";
  }
  return out;
}

const char* family_name(const ArchDescriptor* family) { return family ? family->family : "?"; }

}  // namespace e3::model
