#include "io/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace e3::jinja::detail {

Value Value::string(Text t) { return boxed(Kind::Str, std::make_shared<StrObj>(std::move(t))); }

Value Value::list(std::vector<Value> items, bool tuple) {
  return boxed(Kind::List, std::make_shared<ListObj>(std::move(items), tuple));
}

Value Value::dict(std::vector<std::pair<Value, Value>> items) {
  return boxed(Kind::Dict, std::make_shared<DictObj>(std::move(items)));
}

Value Value::undefined(std::string hint, bool unsafe) {
  return boxed(Kind::Undefined, std::make_shared<UndefObj>(std::move(hint), unsafe));
}

const Text& Value::text() const { return static_cast<const StrObj&>(*heap).text; }
const std::vector<Value>& Value::items() const { return static_cast<const ListObj&>(*heap).items; }
bool Value::is_tuple() const { return kind == Kind::List && static_cast<const ListObj&>(*heap).tuple; }
const std::vector<std::pair<Value, Value>>& Value::entries() const { return static_cast<const DictObj&>(*heap).items; }

const Value* CallArgs::kwarg(std::string_view name) const {
  for (const auto& [k, v] : kw)
    if (k == name) return &v;
  return nullptr;
}

Value make_function(std::string name, std::function<Value(Interp&, CallArgs&)> fn) {
  auto obj = std::make_shared<FnObj>();
  obj->name = std::move(name);
  obj->fn = std::move(fn);
  return Value::boxed(Kind::Callable, std::move(obj));
}

Value make_method(const Value& self, std::string method, std::string name) {
  auto obj = std::make_shared<FnObj>();
  obj->name = std::move(name);
  obj->self = self;
  obj->method = std::move(method);
  return Value::boxed(Kind::Callable, std::move(obj));
}

namespace {

// Freeing a value nested N deep would recurse N times through the destructors. Instead each
// container, as it dies, moves out the containers only it holds, and frees them one by one from
// a list here, each of them handing over its own children the same way.
using Pending = std::vector<std::shared_ptr<const Heap>>;

void take_if_sole(Value& v, Pending& pending) {
  if (v.heap && v.heap.use_count() == 1 &&
      (v.kind == Kind::List || v.kind == Kind::Dict || v.kind == Kind::Namespace || v.kind == Kind::Callable))
    pending.push_back(std::move(v.heap));
}

// The children of a container that is being freed (its last owner is gone, so nothing else can
// see it change).
void take_children(const Heap& h, Pending& pending) {
  Heap& m = const_cast<Heap&>(h);
  if (auto* l = dynamic_cast<ListObj*>(&m)) {
    for (auto& x : l->items) take_if_sole(x, pending);
  } else if (auto* d = dynamic_cast<DictObj*>(&m)) {
    for (auto& [k, x] : d->items) {
      take_if_sole(k, pending);
      take_if_sole(x, pending);
    }
  } else if (auto* n = dynamic_cast<NsObj*>(&m)) {
    for (auto& [k, x] : n->attrs) take_if_sole(x, pending);
  } else if (auto* f = dynamic_cast<FnObj*>(&m)) {
    take_if_sole(f->self, pending);
  }
}

void free_pending(Pending& pending) {
  while (!pending.empty()) {
    std::shared_ptr<const Heap> h = std::move(pending.back());
    pending.pop_back();
    take_children(*h, pending);
  }  // h dies here with no sole-owned children left, so its destructor does not recurse
}

}  // namespace

ListObj::~ListObj() {
  Pending pending;
  for (auto& x : items) take_if_sole(x, pending);
  free_pending(pending);
}

DictObj::~DictObj() {
  Pending pending;
  for (auto& [k, x] : items) {
    take_if_sole(k, pending);
    take_if_sole(x, pending);
  }
  free_pending(pending);
}

NsObj::~NsObj() {
  Pending pending;
  for (auto& [k, x] : attrs) take_if_sole(x, pending);
  free_pending(pending);
}

FnObj::~FnObj() {
  Pending pending;
  take_if_sole(self, pending);
  free_pending(pending);
}

Value make_namespace(std::vector<std::pair<std::string, Value>> attrs) {
  return Value::boxed(Kind::Namespace, std::make_shared<NsObj>(std::move(attrs)));
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return v.b;
    case Kind::Int: return v.i != 0;
    case Kind::Float: return v.f != 0.0;
    case Kind::Str: return !v.str().empty();
    case Kind::List: return !v.items().empty();
    case Kind::Dict: return !v.entries().empty();
    default: return true;
  }
}

bool equals(const Value& a, const Value& b, int depth) {
  if (depth > kMaxValueDepth) throw JinjaError("maximum recursion depth exceeded in comparison");
  if (a.is_number() && b.is_number()) {
    if (a.kind == Kind::Float || b.kind == Kind::Float) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::Undefined:
    case Kind::None: return true;
    case Kind::Str: return a.str() == b.str();
    case Kind::List: {
      if (a.is_tuple() != b.is_tuple()) return false;
      const auto &x = a.items(), &y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t k = 0; k < x.size(); ++k)
        if (!equals(x[k], y[k], depth + 1)) return false;
      return true;
    }
    case Kind::Dict: {
      const auto &x = a.entries(), &y = b.entries();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x) {
        const Value* other = dict_find(b, k);
        if (!other || !equals(v, *other, depth + 1)) return false;
      }
      return true;
    }
    default: return a.heap == b.heap;
  }
}

int compare(const Value& a, const Value& b, std::string_view op, int depth) {
  if (depth > kMaxValueDepth) throw JinjaError("maximum recursion depth exceeded in comparison");
  if (a.is_number() && b.is_number()) {
    if (a.kind == Kind::Float || b.kind == Kind::Float) {
      const double x = a.as_float(), y = b.as_float();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    const int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.kind == Kind::Str && b.kind == Kind::Str) {
    const int c = a.str().compare(b.str());  // UTF-8 byte order is code point order
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.kind == Kind::List && b.kind == Kind::List && a.is_tuple() == b.is_tuple()) {
    const auto &x = a.items(), &y = b.items();
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      if (equals(x[k], y[k], depth + 1)) continue;
      return compare(x[k], y[k], op, depth + 1);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  throw JinjaError("'" + std::string(op) + "' not supported between instances of '" + type_name(a) + "' and '" +
                   type_name(b) + "'");
}

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::Str: return "str";
    case Kind::List: return v.is_tuple() ? "tuple" : "list";
    case Kind::Dict: return "dict";
    case Kind::Namespace: return "Namespace";
    case Kind::Callable: return "function";
    case Kind::Loop: return "LoopContext";
  }
  return "object";
}

std::string object_repr(const Value& v) {
  if (v.is_none()) return "'None'";
  if (v.kind == Kind::Namespace) return "'jinja2.utils.Namespace object'";
  if (v.kind == Kind::Loop) return "'jinja2.runtime.LoopContext object'";
  if (v.is_undefined()) return "'jinja2.runtime.Undefined object'";
  return "'" + type_name(v) + " object'";
}

void fail_undefined(const Value& v) {
  if (v.heap) throw JinjaError(static_cast<const UndefObj&>(*v.heap).hint);
  throw JinjaError("a value is undefined");
}

const Value* dict_find(const Value& dict, const Value& key) {
  for (const auto& [k, v] : dict.entries())
    if (equals(k, key)) return &v;
  return nullptr;
}

const Value* dict_find(const Value& dict, std::string_view key) {
  for (const auto& [k, v] : dict.entries())
    if (k.kind == Kind::Str && k.str() == key) return &v;
  return nullptr;
}

int64_t float_to_int(double f) {
  if (std::isnan(f)) throw JinjaError("cannot convert float NaN to integer");
  if (std::isinf(f)) throw JinjaError("cannot convert float infinity to integer");
  const double t = std::trunc(f);
  // [-2**63, 2**63): both bounds are exact doubles.
  if (t < -9223372036854775808.0 || t >= 9223372036854775808.0)
    throw JinjaError("integer overflow: the result does not fit in 64 bits");
  return static_cast<int64_t>(t);
}

std::string float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // "-1.2345e+02"
  std::string out;
  size_t pos = 0;
  if (sci[0] == '-') {
    out += '-';
    pos = 1;
  }
  const size_t e = sci.find('e');
  std::string digits;
  for (size_t k = pos; k < e; ++k)
    if (sci[k] != '.') digits += sci[k];
  const int exp = std::stoi(sci.substr(e + 1));
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      std::string int_part = digits.substr(0, std::min<size_t>(digits.size(), exp + 1));
      while (int_part.size() < static_cast<size_t>(exp + 1)) int_part += '0';
      std::string frac = digits.size() > static_cast<size_t>(exp + 1) ? digits.substr(exp + 1) : "0";
      out += int_part + "." + frac;
    } else {
      out += "0." + std::string(-exp - 1, '0') + digits;
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += eb;
  }
  return out;
}

namespace {

bool printable(uint32_t cp) {
  if (cp < 0x20 || cp == 0x7F) return false;
  if (cp < 0x7F) return true;
  if (cp <= 0xA0 || cp == 0xAD) return false;
  if ((cp >= 0x600 && cp <= 0x605) || cp == 0x61C || cp == 0x6DD || cp == 0x70F || cp == 0x180E || cp == 0x1680)
    return false;
  if ((cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) || (cp >= 0x205F && cp <= 0x206F)) return false;
  if (cp == 0x3000 || cp == 0xFEFF || (cp >= 0xFFF9 && cp <= 0xFFFB) || cp == 0xFFFE || cp == 0xFFFF) return false;
  if ((cp >= 0xD800 && cp <= 0xF8FF) || cp >= 0xF0000 || (cp >= 0xE0000 && cp <= 0xE0FFF)) return false;
  return true;
}

void append_hex(std::string& out, const char* prefix, uint32_t v, int width) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%s%0*x", prefix, width, v);
  out += buf;
}

void append_str_repr(Text& out, const Value& v) {
  const Text& t = v.text();
  const std::string& s = t.str();
  const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  const int32_t edge = v.tag != 0 ? v.tag : (s.empty() ? 0 : t.tag_at(0));
  out.append(std::string_view(&quote, 1), edge);
  std::string piece;
  for (size_t i = 0, len = 0; i < s.size(); i += len) {
    const uint32_t cp = decode_at(s, i, &len);
    piece.clear();
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      piece = {'\\', static_cast<char>(cp)};
    } else if (cp == '\n') {
      piece = "\\n";
    } else if (cp == '\r') {
      piece = "\\r";
    } else if (cp == '\t') {
      piece = "\\t";
    } else if (!printable(cp)) {
      if (cp <= 0xFF) append_hex(piece, "\\x", cp, 2);
      else if (cp <= 0xFFFF) append_hex(piece, "\\u", cp, 4);
      else append_hex(piece, "\\U", cp, 8);
    } else {
      piece.assign(s, i, len);
    }
    out.append(piece, t.tag_at(i));
  }
  const int32_t end_tag = v.tag != 0 ? v.tag : (s.empty() ? 0 : t.tag_at(s.size() - 1));
  out.append(std::string_view(&quote, 1), end_tag);
}

}  // namespace

void append_repr(Text& out, const Value& v, int depth) {
  if (depth > kMaxValueDepth) throw JinjaError("maximum recursion depth exceeded while getting the repr of an object");
  switch (v.kind) {
    case Kind::Str: append_str_repr(out, v); return;
    case Kind::Undefined: out.append("Undefined", v.tag); return;
    case Kind::List: {
      const bool tuple = v.is_tuple();
      out.append(tuple ? "(" : "[", v.tag);
      const auto& items = v.items();
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out.append(", ", v.tag);
        append_repr(out, items[k], depth + 1);
      }
      if (tuple && items.size() == 1) out.append(",", v.tag);
      out.append(tuple ? ")" : "]", v.tag);
      return;
    }
    case Kind::Dict: {
      out.append("{", v.tag);
      bool first = true;
      for (const auto& [k, x] : v.entries()) {
        if (!first) out.append(", ", v.tag);
        first = false;
        append_repr(out, k, depth + 1);
        out.append(": ", v.tag);
        append_repr(out, x, depth + 1);
      }
      out.append("}", v.tag);
      return;
    }
    default: append_str(out, v, depth);
  }
}

void append_str(Text& out, const Value& v, int depth) {
  if (depth > kMaxValueDepth) throw JinjaError("maximum recursion depth exceeded while getting the str of an object");
  switch (v.kind) {
    case Kind::Undefined: return;
    case Kind::None: out.append("None", v.tag); return;
    case Kind::Bool: out.append(v.b ? "True" : "False", v.tag); return;
    case Kind::Int: out.append(std::to_string(v.i), v.tag); return;
    case Kind::Float: out.append(float_repr(v.f), v.tag); return;
    case Kind::Str: out.append(v.text()); return;
    case Kind::List:
    case Kind::Dict: append_repr(out, v, depth); return;
    case Kind::Namespace: {
      out.append("<Namespace {");
      bool first = true;
      for (const auto& [k, x] : static_cast<const NsObj&>(*v.heap).attrs) {
        if (!first) out.append(", ");
        first = false;
        append_repr(out, Value::string(k));
        out.append(": ");
        append_repr(out, x, depth + 1);
      }
      out.append("}>");
      return;
    }
    case Kind::Callable: out.append("<function " + static_cast<const FnObj&>(*v.heap).name + ">"); return;
    case Kind::Loop: out.append("<LoopContext>"); return;
  }
}

Text to_text(const Value& v) {
  if (v.kind == Kind::Str) return v.text();
  Text t;
  append_str(t, v);
  return t;
}

namespace {

void append_json_string(Text& out, const Text& t, int32_t value_tag, bool ensure_ascii) {
  const std::string& s = t.str();
  const int32_t open = value_tag != 0 ? value_tag : (s.empty() ? 0 : t.tag_at(0));
  out.append("\"", open);
  std::string piece;
  size_t plain_begin = 0;  // a run of bytes needing no escape is copied with its tags at once
  auto flush = [&](size_t upto) {
    out.append(t, plain_begin, upto);
  };
  for (size_t i = 0, len = 0; i < s.size(); i += len) {
    const uint32_t cp = decode_at(s, i, &len);
    piece.clear();
    if (cp == '"') piece = "\\\"";
    else if (cp == '\\') piece = "\\\\";
    else if (cp == '\n') piece = "\\n";
    else if (cp == '\r') piece = "\\r";
    else if (cp == '\t') piece = "\\t";
    else if (cp == '\b') piece = "\\b";
    else if (cp == '\f') piece = "\\f";
    else if (cp < 0x20) append_hex(piece, "\\u", cp, 4);
    else if (ensure_ascii && cp >= 0x80) {
      if (cp >= 0x10000) {
        const uint32_t c = cp - 0x10000;
        append_hex(piece, "\\u", 0xD800 + (c >> 10), 4);
        append_hex(piece, "\\u", 0xDC00 + (c & 0x3FF), 4);
      } else {
        append_hex(piece, "\\u", cp, 4);
      }
    } else {
      continue;
    }
    flush(i);
    out.append(piece, t.tag_at(i));
    plain_begin = i + len;
  }
  flush(s.size());
  const int32_t close = value_tag != 0 ? value_tag : (s.empty() ? 0 : t.tag_at(s.size() - 1));
  out.append("\"", close);
}

Text json_key(const Value& k) {
  switch (k.kind) {
    case Kind::Str: return k.text();
    case Kind::None: return Text("null", k.tag);
    case Kind::Bool: return Text(k.b ? "true" : "false", k.tag);
    case Kind::Int: return Text(std::to_string(k.i), k.tag);
    case Kind::Float: return Text(float_repr(k.f), k.tag);
    default: throw JinjaError("keys must be str, int, float, bool or None, not " + type_name(k));
  }
}

}  // namespace

void append_json(Text& out, const Value& v, const JsonOptions& o, int depth) {
  if (depth > kMaxValueDepth) throw JinjaError("tojson: the value nests too deeply");
  auto newline = [&](int level) {
    if (!o.has_indent) return;
    std::string nl = "\n";
    for (int k = 0; k < level; ++k) nl += o.indent;
    out.append(nl, v.tag);
  };
  switch (v.kind) {
    case Kind::None: out.append("null", v.tag); return;
    case Kind::Bool: out.append(v.b ? "true" : "false", v.tag); return;
    case Kind::Int: out.append(std::to_string(v.i), v.tag); return;
    case Kind::Float:
      if (std::isnan(v.f)) out.append("NaN", v.tag);
      else if (std::isinf(v.f)) out.append(v.f < 0 ? "-Infinity" : "Infinity", v.tag);
      else out.append(float_repr(v.f), v.tag);
      return;
    case Kind::Str: append_json_string(out, v.text(), v.tag, o.ensure_ascii); return;
    case Kind::List: {
      const auto& items = v.items();
      if (items.empty()) {
        out.append("[]", v.tag);
        return;
      }
      out.append("[", v.tag);
      newline(depth + 1);
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) {
          out.append(o.item_sep, v.tag);
          newline(depth + 1);
        }
        append_json(out, items[k], o, depth + 1);
      }
      newline(depth);
      out.append("]", v.tag);
      return;
    }
    case Kind::Dict: {
      if (v.entries().empty()) {
        out.append("{}", v.tag);
        return;
      }
      std::vector<std::pair<Text, const Value*>> entries;
      entries.reserve(v.entries().size());
      for (const auto& [k, x] : v.entries()) entries.emplace_back(json_key(k), &x);
      if (o.sort_keys)
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto& a, const auto& b) { return a.first.str() < b.first.str(); });
      out.append("{", v.tag);
      newline(depth + 1);
      bool first = true;
      for (const auto& [k, x] : entries) {
        if (!first) {
          out.append(o.item_sep, v.tag);
          newline(depth + 1);
        }
        first = false;
        append_json_string(out, k, 0, o.ensure_ascii);
        out.append(o.key_sep, v.tag);
        append_json(out, *x, o, depth + 1);
      }
      newline(depth);
      out.append("}", v.tag);
      return;
    }
    default: throw JinjaError("Object of type " + type_name(v) + " is not JSON serializable");
  }
}

}  // namespace e3::jinja::detail
