// The one list of supported architecture families: the families of each arch_<file>.cpp.
#include "model/arch.h"

namespace e3::model {

// Each defined in its arch_<file>.cpp.
std::vector<ArchDescriptor> arch_llama_families();
std::vector<ArchDescriptor> arch_deepseek_families();
std::vector<ArchDescriptor> arch_glm4_moe_families();

std::span<const ArchDescriptor> arch_registry() {
  static const std::vector<ArchDescriptor> table = [] {
    std::vector<ArchDescriptor> all;
    for (auto file : {arch_llama_families, arch_deepseek_families, arch_glm4_moe_families})
      for (ArchDescriptor& a : file()) all.push_back(std::move(a));
    return all;
  }();
  return table;
}

const ArchDescriptor* find_arch(std::string_view architecture, std::string_view model_type) {
  for (const ArchDescriptor& a : arch_registry())
    for (std::string_view name : a.architectures)
      if (name == architecture) return &a;
  // An unrecognised architecture name with a known model_type is still that family.
  for (const ArchDescriptor& a : arch_registry())
    for (std::string_view name : a.model_types)
      if (name == model_type) return &a;
  return nullptr;
}

std::string supported_model_types() {
  std::string out;
  for (const ArchDescriptor& a : arch_registry()) {
    out += (out.empty() ? "" : ", ") + std::string(a.family);
    std::string aliases;
    for (std::string_view t : a.model_types)
      if (t != a.family) aliases += (aliases.empty() ? "" : ", ") + std::string(t);
    if (!aliases.empty()) out += " (" + aliases + ")";
  }
  return out;
}

const char* family_name(const ArchDescriptor* family) { return family ? family->family : "?"; }

}  // namespace e3::model
