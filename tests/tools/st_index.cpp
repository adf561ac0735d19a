// st_index FILE.safetensors [--drop NAME] [--extra NAME=SHARD]: prints a
// model.safetensors.index.json mapping every tensor of FILE to FILE's name, so that tests
// can build sharded or broken checkpoints from a real one.
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "model/safetensors.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: st_index FILE [--drop NAME] [--extra NAME=SHARD]\n");
    return 2;
  }
  const std::filesystem::path file = argv[1];
  const e3::model::SafetensorsFile st(file);
  nlohmann::json map = nlohmann::json::object();
  for (const auto& [name, info] : st.tensors()) map[name] = file.filename().string();
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string opt = argv[i], val = argv[i + 1];
    if (opt == "--drop") {
      map.erase(val);
    } else if (opt == "--extra") {
      const auto eq = val.find('=');
      map[val.substr(0, eq)] = val.substr(eq + 1);
    }
  }
  std::printf("%s\n", nlohmann::json{{"metadata", nlohmann::json::object()}, {"weight_map", map}}.dump(1).c_str());
  return 0;
}
