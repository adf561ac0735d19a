// Python's str methods and string formatting on provenance-carrying text: every byte of a result
// that came from the input keeps its tag (split, strip, replace's unchanged parts, case mapping,
// slicing); bytes the operation writes itself (padding, a replacement from the template) carry the
// tag of where they came from, which for template literals is none.
#pragma once

#include <string>
#include <vector>

#include "io/jinja/interp.h"

namespace e3::jinja::detail {

Text py_strip(const Text& s, const Value* chars, bool left, bool right);
std::vector<Value> py_split(const Text& s, const Value* sep, int64_t maxsplit, bool from_right);
std::vector<Value> py_splitlines(const Text& s, bool keepends);
Text py_replace(const Text& s, const Text& old, const Text& repl, int64_t count, const Interp& in);
Text py_upper(const Text& s);
Text py_lower(const Text& s);
Text py_title(const Text& s);       // str.title()
Text py_capitalize(const Text& s);  // str.capitalize()
Text py_center(const Text& s, int64_t width, const Text& fill);
// s % args (args a tuple, a dict for %(name)s, or one value).
Text percent_format(const Text& fmt, const Value& args, const Interp& in);
// s.format(*args, **kwargs).
Text str_format(const Text& fmt, const CallArgs& args, Interp& in);
// The str method `name` called on `self`; *found = false when str has no such method.
Value str_method(Interp& in, const Value& self, const std::string& name, CallArgs& args, bool* found);
bool is_str_method(const std::string& name);

}  // namespace e3::jinja::detail
