// The enum-valued options of a run and of `bench` that name no type of another layer, each with
// its name table (core/named_enum.h: the CLI parses, messages list and logs print by it).
#pragma once

#include "core/named_enum.h"

namespace e3::jobs {

enum class BackendKind { Auto, Cuda, Cpu };
inline constexpr NamedValue<BackendKind> kBackendNames[] = {
    {BackendKind::Auto, "auto"}, {BackendKind::Cuda, "cuda"}, {BackendKind::Cpu, "cpu"}};
constexpr const auto& name_table(BackendKind) { return kBackendNames; }

enum class CommKind { Auto, Nccl, Mpi };
inline constexpr NamedValue<CommKind> kCommNames[] = {
    {CommKind::Auto, "auto"}, {CommKind::Nccl, "nccl"}, {CommKind::Mpi, "mpi"}};
constexpr const auto& name_table(CommKind) { return kCommNames; }

// How kept-quantized MoE experts reach the GEMM on the GPU.
enum class ExpertDequant { Scratch, Gemm };
inline constexpr NamedValue<ExpertDequant> kExpertDequantNames[] = {
    {ExpertDequant::Scratch, "scratch"}, {ExpertDequant::Gemm, "gemm"}};
constexpr const auto& name_table(ExpertDequant) { return kExpertDequantNames; }

enum class LogLevel { Trace, Debug, Info, Warn, Error };
inline constexpr NamedValue<LogLevel> kLogLevelNames[] = {{LogLevel::Trace, "trace"},
                                                          {LogLevel::Debug, "debug"},
                                                          {LogLevel::Info, "info"},
                                                          {LogLevel::Warn, "warn"},
                                                          {LogLevel::Error, "error"}};
constexpr const auto& name_table(LogLevel) { return kLogLevelNames; }

}  // namespace e3::jobs
