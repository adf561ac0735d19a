// tensor_file_writer safetensors|torch|torch-tensor|npy SPEC.json OUT: writes OUT with
// io::write_safetensors, io::write_torch_dict, io::write_torch_tensor or io::write_npy (the last
// two: the first entry's tensor) from a spec the Python checks (tests/python/) write, so that
// Python reads back what the C++ writers produce. SPEC:
//   {"entries": [{"key": K, "tensor": {"dtype": "BF16", "shape": [2, 3], "seed": 1}},
//                {"key": K, "string": "..."}, {"key": K, "int": 5}, ...],
//    "metadata": {"k": "v"}}                       (metadata: safetensors only)
// A tensor's bytes are pattern_byte(seed, k) (BOOL: its low bit), which the checks recompute.
// An error is printed as the program prints it, with its exit code.
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/npy_write.h"
#include "io/safetensors_write.h"
#include "io/torch_save.h"
#include "core/error.h"

namespace {

using e3::io::TensorElement;

uint8_t pattern_byte(uint64_t seed, uint64_t k) {
  return static_cast<uint8_t>(((k * 2654435761ull) + seed * 97ull) >> 11);
}

TensorElement element_of(const std::string& name) {
  static const std::map<std::string, TensorElement> kByName = {
      {"BF16", TensorElement::BF16}, {"F16", TensorElement::F16}, {"F32", TensorElement::F32},
      {"I64", TensorElement::I64},   {"I32", TensorElement::I32}, {"U8", TensorElement::U8},
      {"BOOL", TensorElement::Bool}};
  const auto it = kByName.find(name);
  if (it == kByName.end()) throw std::runtime_error("unknown dtype " + name);
  return it->second;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: tensor_file_writer safetensors|torch|torch-tensor|npy SPEC.json OUT\n");
    return 2;
  }
  const std::string format = argv[1];
  try {
    std::ifstream in(argv[2]);
    const nlohmann::json spec = nlohmann::json::parse(in);
    std::vector<std::vector<uint8_t>> buffers;
    buffers.reserve(spec.at("entries").size());
    std::vector<e3::io::TensorRef> tensors;
    std::vector<std::pair<std::string, e3::io::TorchValue>> entries;
    for (const auto& e : spec.at("entries")) {
      const std::string key = e.at("key");
      if (e.contains("tensor")) {
        const auto& t = e.at("tensor");
        e3::io::TensorRef ref{key, element_of(t.at("dtype")), t.at("shape").get<std::vector<int64_t>>(), nullptr};
        uint64_t bytes = e3::io::element_size(ref.element);
        for (const int64_t d : ref.shape) bytes *= static_cast<uint64_t>(d);
        auto& buf = buffers.emplace_back(bytes);
        for (uint64_t k = 0; k < bytes; ++k) {
          buf[k] = pattern_byte(t.at("seed").get<uint64_t>(), k);
          if (ref.element == TensorElement::Bool) buf[k] &= 1;
        }
        ref.data = buf.data();
        tensors.push_back(ref);
        entries.emplace_back(key, ref);
      } else if (e.contains("string")) {
        entries.emplace_back(key, e.at("string").get<std::string>());
      } else {
        entries.emplace_back(key, e.at("int").get<int64_t>());
      }
    }
    if (format == "safetensors") {
      e3::io::write_safetensors(argv[3], tensors,
                                spec.value("metadata", nlohmann::json::object()).get<std::map<std::string, std::string>>());
    } else if (format == "torch") {
      e3::io::write_torch_dict(argv[3], entries);
    } else if (format == "torch-tensor" || format == "npy") {
      if (tensors.empty()) throw std::runtime_error("the spec has no tensor");
      if (format == "npy") e3::io::write_npy(argv[3], tensors.front());
      else e3::io::write_torch_tensor(argv[3], tensors.front());
    } else {
      std::fprintf(stderr, "unknown format %s\n", format.c_str());
      return 2;
    }
  } catch (const e3::Error& e) {
    std::fprintf(stderr, "critical: %s\n", e.describe().c_str());
    return e3::exit_code(e.kind());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bad spec %s: %s\n", argv[2], e.what());
    return 2;
  }
  return 0;
}
