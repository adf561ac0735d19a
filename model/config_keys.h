// Typed, bounded access to the keys of a config.json object, shared by the generic parser
// (config.cpp) and the architecture descriptors (arch_*.cpp). Errors name the file and the key.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_read.h"

namespace e3::model {

// Bounds on the sizes weights and workspaces are allocated from. Each is far above any released
// model (hidden 16384, intermediate 53248, vocab 256k, 126 layers, 384 experts); together with
// kMaxParameters they keep every product of sizes well inside 64 bits.
inline constexpr int64_t kMaxHidden = int64_t{1} << 20;
inline constexpr int64_t kMaxIntermediate = int64_t{1} << 22;
inline constexpr int64_t kMaxVocab = int64_t{1} << 24;
inline constexpr int64_t kMaxLayers = int64_t{1} << 14;
inline constexpr int64_t kMaxHeads = int64_t{1} << 16;
inline constexpr int64_t kMaxHeadDim = int64_t{1} << 16;
inline constexpr int64_t kMaxExperts = int64_t{1} << 16;
inline constexpr double kMaxParameters = 0x1p46;  // 7e13, some 70 times the largest model published

// Typed access to one JSON object with errors that name the file and the key.
class ConfigKeys {
 public:
  ConfigKeys(const nlohmann::json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}

  bool has(const char* key) const { return obj_.contains(key) && !obj_.at(key).is_null(); }

  int64_t integer(const char* key) const {
    E3_REQUIRE(has(key), ErrorKind::Model, "{}: required key '{}' is missing", where_, key);
    return integer_or(key, 0);
  }
  int64_t integer_or(const char* key, int64_t fallback) const {
    if (!has(key)) return fallback;
    const nlohmann::json& v = obj_.at(key);
    // 2^63 is exact as a double; a float at or past it (1e300) has no int64 value.
    constexpr double kLimit = 9223372036854775808.0;
    const bool fits = v.is_number_unsigned()  ? v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX)
                      : v.is_number_integer() ? true
                      : v.is_number_float()   ? v.get<double>() == std::floor(v.get<double>()) &&
                                                  std::fabs(v.get<double>()) < kLimit
                                              : false;
    E3_REQUIRE(fits, ErrorKind::Model, "{}: '{}' must be an integer, got {}", where_, key, json_excerpt(v));
    return v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(v.get<double>());
  }
  int64_t positive(const char* key) const {
    const int64_t v = integer(key);
    E3_REQUIRE(v > 0, ErrorKind::Model, "{}: '{}' must be positive, got {}", where_, key, v);
    return v;
  }
  // A size the weights are allocated from: positive and at most `max`, a bound far above any
  // real model that keeps every product of sizes inside 64 bits.
  int64_t size(const char* key, int64_t max) const { return bounded(key, positive(key), max); }
  int64_t size_or(const char* key, int64_t fallback, int64_t max) const {
    return has(key) ? bounded(key, integer(key), max) : fallback;
  }
  int64_t bounded(const char* key, int64_t v, int64_t max) const {
    E3_REQUIRE(v <= max, ErrorKind::Model, "{}: '{}' is {}, more than this tool accepts (at most {}): is config.json "
               "corrupt?", where_, key, v, max);
    return v;
  }
  double number_or(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    const nlohmann::json& v = obj_.at(key);
    E3_REQUIRE(v.is_number(), ErrorKind::Model, "{}: '{}' must be a number, got {}", where_, key, json_excerpt(v));
    return v.get<double>();
  }
  std::optional<double> optional_number(const char* key) const {
    if (!has(key)) return std::nullopt;
    return number_or(key, 0.0);
  }
  bool boolean_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const nlohmann::json& v = obj_.at(key);
    E3_REQUIRE(v.is_boolean(), ErrorKind::Model, "{}: '{}' must be true or false, got {}", where_, key, json_excerpt(v));
    return v.get<bool>();
  }
  std::string string_or(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const nlohmann::json& v = obj_.at(key);
    E3_REQUIRE(v.is_string(), ErrorKind::Model, "{}: '{}' must be a string, got {}", where_, key, json_excerpt(v));
    // Every string a config holds is a short name; a longer one would only flood messages.
    E3_REQUIRE(v.get_ref<const std::string&>().size() <= 256, ErrorKind::Model,
               "{}: '{}' is a string of {} bytes, longer than any name it could hold: {}", where_, key,
               v.get_ref<const std::string&>().size(), json_excerpt(v));
    return v.get<std::string>();
  }
  const std::string& where() const { return where_; }

 private:
  const nlohmann::json& obj_;
  std::string where_;
};

}  // namespace e3::model
