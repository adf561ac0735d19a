// The string-typed options as enums, each with one table of its names: the CLI validates a
// value against the table, messages list the table, and logs print a value by it.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace e3::jobs {

template <typename E>
struct NamedValue {
  E value;
  std::string_view name;
};

enum class BackendKind { Auto, Cuda, Cpu };
inline constexpr NamedValue<BackendKind> kBackendNames[] = {
    {BackendKind::Auto, "auto"}, {BackendKind::Cuda, "cuda"}, {BackendKind::Cpu, "cpu"}};
constexpr std::span<const NamedValue<BackendKind>> name_table(BackendKind) { return kBackendNames; }

enum class CommKind { Auto, Nccl, Mpi };
inline constexpr NamedValue<CommKind> kCommNames[] = {
    {CommKind::Auto, "auto"}, {CommKind::Nccl, "nccl"}, {CommKind::Mpi, "mpi"}};
constexpr std::span<const NamedValue<CommKind>> name_table(CommKind) { return kCommNames; }

// How kept-quantized MoE experts reach the GEMM on the GPU.
enum class ExpertDequant { Scratch, Gemm };
inline constexpr NamedValue<ExpertDequant> kExpertDequantNames[] = {
    {ExpertDequant::Scratch, "scratch"}, {ExpertDequant::Gemm, "gemm"}};
constexpr std::span<const NamedValue<ExpertDequant>> name_table(ExpertDequant) { return kExpertDequantNames; }

enum class LogLevel { Trace, Debug, Info, Warn, Error };
inline constexpr NamedValue<LogLevel> kLogLevelNames[] = {{LogLevel::Trace, "trace"},
                                                          {LogLevel::Debug, "debug"},
                                                          {LogLevel::Info, "info"},
                                                          {LogLevel::Warn, "warn"},
                                                          {LogLevel::Error, "error"}};
constexpr std::span<const NamedValue<LogLevel>> name_table(LogLevel) { return kLogLevelNames; }

template <typename E>
constexpr std::string_view name_of(E value) {
  for (const NamedValue<E>& n : name_table(E{}))
    if (n.value == value) return n.name;
  return "?";
}

template <typename E>
constexpr std::optional<E> value_named(std::string_view name) {
  for (const NamedValue<E>& n : name_table(E{}))
    if (n.name == name) return n.value;
  return std::nullopt;
}

// "auto, cuda or cpu"
template <typename E>
std::string valid_names() {
  const auto table = name_table(E{});
  std::string out;
  for (size_t i = 0; i < table.size(); ++i) {
    if (i > 0) out += i + 1 == table.size() ? " or " : ", ";
    out += table[i].name;
  }
  return out;
}

}  // namespace e3::jobs
