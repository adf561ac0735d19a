// The values a template computes with, modelled on the Python objects jinja2 hands a template:
// None, bool, int, float, str (with provenance, see text.h), list/tuple, dict (insertion order),
// namespace, callables, the loop object, and jinja2's default Undefined.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/jinja/text.h"

namespace e3::jinja::detail {

// A failure inside the interpreter; the renderer adds the template's name and line.
struct JinjaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, Str, List, Dict, Namespace, Callable, Loop };

struct Heap {
  virtual ~Heap() = default;
};

struct Value {
  Kind kind = Kind::Undefined;
  // The tag of a non-string value from a tagged subtree of the context (strings keep theirs
  // per byte, in their Text); what tojson, str() and printing of it write carries this tag.
  int32_t tag = 0;
  union {
    bool b;
    int64_t i;
    double f;
  };
  std::shared_ptr<const Heap> heap;

  Value() : i(0) {}
  static Value none() { return with_kind(Kind::None); }
  static Value boolean(bool v) {
    Value x = with_kind(Kind::Bool);
    x.b = v;
    return x;
  }
  static Value integer(int64_t v) {
    Value x = with_kind(Kind::Int);
    x.i = v;
    return x;
  }
  static Value number(double v) {
    Value x = with_kind(Kind::Float);
    x.f = v;
    return x;
  }
  static Value string(Text t);
  static Value string(std::string s) { return string(Text(std::move(s))); }
  static Value list(std::vector<Value> items, bool tuple = false);
  static Value dict(std::vector<std::pair<Value, Value>> items);
  // Undefined with the message jinja2 gives when it is used (`'x' is undefined`, ...); `unsafe`
  // marks the sandbox's refusal (a mutating method), which raises on a call.
  static Value undefined(std::string hint, bool unsafe = false);
  // A value of kind `k` whose object is `heap` (the constructors above and the functions below).
  static Value boxed(Kind k, std::shared_ptr<const Heap> heap) {
    Value x = with_kind(k);
    x.heap = std::move(heap);
    return x;
  }

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_none() const { return kind == Kind::None; }
  bool is_str() const { return kind == Kind::Str; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  bool is_int_like() const { return kind == Kind::Int || kind == Kind::Bool; }
  const Text& text() const;
  const std::string& str() const { return text().str(); }
  const std::vector<Value>& items() const;  // List
  bool is_tuple() const;
  const std::vector<std::pair<Value, Value>>& entries() const;  // Dict
  int64_t as_int() const { return kind == Kind::Bool ? int64_t{b} : i; }
  double as_float() const { return kind == Kind::Float ? f : static_cast<double>(as_int()); }

 private:
  static Value with_kind(Kind k) {
    Value x;
    x.kind = k;
    return x;
  }
};

struct StrObj final : Heap {
  explicit StrObj(Text t) : text(std::move(t)) {}
  Text text;
};
// The containers free what they alone hold without recursing (see value.cpp): a template can
// build nesting of any depth, one level per loop iteration.
struct ListObj final : Heap {
  ListObj(std::vector<Value> i, bool t) : items(std::move(i)), tuple(t) {}
  std::vector<Value> items;
  bool tuple = false;
  ~ListObj() override;
};
struct DictObj final : Heap {
  explicit DictObj(std::vector<std::pair<Value, Value>> i) : items(std::move(i)) {}
  std::vector<std::pair<Value, Value>> items;
  ~DictObj() override;
};
struct UndefObj final : Heap {
  UndefObj(std::string h, bool u) : hint(std::move(h)), unsafe(u) {}
  std::string hint;
  bool unsafe = false;
};
// The one mutable object of the language: {% set ns.x = ... %}.
struct NsObj final : Heap {
  explicit NsObj(std::vector<std::pair<std::string, Value>> a) : attrs(std::move(a)) {}
  mutable std::vector<std::pair<std::string, Value>> attrs;
  ~NsObj() override;
};

class Interp;
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  const Value* kwarg(std::string_view name) const;
};
// A function, or a bound method (`method` of `self`, what `'x'.upper` gives).
struct FnObj final : Heap {
  std::string name;
  std::function<Value(Interp&, CallArgs&)> fn;
  Value self;
  std::string method;
  ~FnObj() override;
};

Value make_function(std::string name, std::function<Value(Interp&, CallArgs&)> fn);
Value make_method(const Value& self, std::string method, std::string name);
Value make_namespace(std::vector<std::pair<std::string, Value>> attrs);

// Python's semantics.
bool truthy(const Value& v);
bool equals(const Value& a, const Value& b, int depth = 0);
int compare(const Value& a, const Value& b, std::string_view op, int depth = 0);  // <0, 0, >0; TypeError when unordered
std::string type_name(const Value& v);                              // "str", "int", "NoneType", ...
std::string object_repr(const Value& v);                            // "'dict object'", "'None'" for messages
[[noreturn]] void fail_undefined(const Value& v);
// The value of key `key` in a dict, or nullptr.
const Value* dict_find(const Value& dict, const Value& key);
const Value* dict_find(const Value& dict, std::string_view key);

// str(v) and repr(v), appended to `out`; strings' tags and tagged values' tags follow.
// Values nesting deeper than kMaxValueDepth (a template can build them) are refused, as Python's
// recursion limit refuses them, rather than overflowing the stack.
constexpr int kMaxValueDepth = 200;
void append_str(Text& out, const Value& v, int depth = 0);
void append_repr(Text& out, const Value& v, int depth = 0);
Text to_text(const Value& v);
std::string float_repr(double f);
// Python's int(f) where the result fits in 64 bits; OverflowError / ValueError as Python otherwise.
int64_t float_to_int(double f);

struct JsonOptions {
  bool ensure_ascii = false;
  std::string indent;  // "" with has_indent: newlines without indentation, as json.dumps(indent=0)
  bool has_indent = false;
  std::string item_sep = ", ", key_sep = ": ";
  bool sort_keys = false;
};
// json.dumps(v, ...) as HF's tojson filter calls it.
void append_json(Text& out, const Value& v, const JsonOptions& options, int depth = 0);

}  // namespace e3::jinja::detail
