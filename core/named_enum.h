// Enums whose values have names (command-line options, config.json values): one table per
// enum, from which a value is parsed, named, listed in messages and, when mistyped, guessed.
// Also the one home of "did you mean": the closest of a few names to something misspelt.
//
// An enum takes part by declaring, in its own namespace so that argument-dependent lookup
// finds it, a table and the function that returns it:
//   inline constexpr NamedValue<Color> kColorNames[] = {{Color::Red, "red"}, {Color::Blue, "blue"}};
//   constexpr const auto& name_table(Color) { return kColorNames; }
// (an array rather than a std::span: CUDA sources, compiled as C++17, include some of these headers).
#pragma once

#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace e3 {

template <typename E>
struct NamedValue {
  E value;
  std::string_view name;
};

// A name compared loosely: lower case, without '_', '-' or anything else not a letter or a
// digit, so that "lossMask", "loss-mask" and "LOSS_MASK" read alike.
std::string loose_name(std::string_view name);

// The name among `names` that `text` most likely misspells: the same name loosely (above), or
// one or two edits away (a transposition is one), fewer for short names ("x" is not a misspelt
// "id", and three letters allow one after the first letter). The first of equally close names; nullopt when none is close.
std::optional<std::string_view> closest_name(std::string_view text, const std::vector<std::string_view>& names);

template <typename E>
constexpr std::string_view name_of(E value) {
  for (const NamedValue<E>& n : name_table(E{}))
    if (n.value == value) return n.name;
  return "?";
}

// Names are exact: "AUTO" is not "auto" (the error suggests it).
template <typename E>
constexpr std::optional<E> value_named(std::string_view name) {
  for (const NamedValue<E>& n : name_table(E{}))
    if (n.name == name) return n.value;
  return std::nullopt;
}

// The names in table order, `separator` between them and `last_separator` before the last:
// (", ", " or ") gives valid_names' "auto, cuda or cpu", (",", ",") the "auto,cuda,cpu" of a help line.
template <typename E>
std::string joined_names(std::string_view separator, std::string_view last_separator) {
  const auto& table = name_table(E{});
  std::string out;
  for (size_t i = 0; i < std::size(table); ++i) {
    if (i > 0) out += i + 1 == std::size(table) ? last_separator : separator;
    out += table[i].name;
  }
  return out;
}

template <typename E>
std::string valid_names() {
  return joined_names<E>(", ", " or ");
}

// The value named `text`; anything else throws an e3::Error of `kind` that lists the names
// (and guesses the one meant): "--comm: must be auto, nccl or mpi, not 'nccll' (did you mean
// 'nccl'?)", `what` being "--comm".
template <typename E>
E parse_named(std::string_view text, std::string_view what, ErrorKind kind = ErrorKind::Usage) {
  if (const std::optional<E> value = value_named<E>(text)) return *value;
  std::vector<std::string_view> names;
  for (const NamedValue<E>& n : name_table(E{})) names.push_back(n.name);
  const std::optional<std::string_view> guess = closest_name(text, names);
  E3_THROW(kind, "{}: must be {}, not '{}'{}", what, valid_names<E>(), printable(text),
           guess ? fmt::format(" (did you mean '{}'?)", *guess) : "");
}

}  // namespace e3
