// jinja2's filters, tests and globals, the list and dict methods a sandboxed template may call,
// attribute lookup as jinja2's sandbox does it, and Python's arithmetic.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <unordered_map>
#include <unordered_set>

#include "io/jinja/strings.h"

namespace e3::jinja::detail {

namespace {

[[noreturn]] void unsafe(const std::string& name, const Value& obj) {
  throw JinjaError("access to attribute '" + name + "' of '" + type_name(obj) + "' object is unsafe.");
}

bool one_of(const std::string& s, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (s == n) return true;
  return false;
}

// Methods that change the object: jinja2's ImmutableSandboxedEnvironment (HF's) refuses them.
bool is_mutating(const Value& obj, const std::string& name) {
  if (obj.kind == Kind::List) return one_of(name, {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"});
  if (obj.kind == Kind::Dict) return one_of(name, {"clear", "pop", "popitem", "setdefault", "update"});
  return false;
}

bool is_method(const Value& obj, const std::string& name) {
  if (obj.kind == Kind::Str) return is_str_method(name);
  if (obj.kind == Kind::List) return one_of(name, {"copy", "count", "index"}) || is_mutating(obj, name);
  if (obj.kind == Kind::Dict) return one_of(name, {"copy", "get", "items", "keys", "values", "fromkeys"}) || is_mutating(obj, name);
  return false;
}

void max_args(const CallArgs& a, size_t n, const char* what) {
  if (a.pos.size() > n || !a.kw.empty())
    throw JinjaError(std::string(what) + "() takes at most " + std::to_string(n) + " argument(s)");
}

Value dict_items(const Value& d) {
  std::vector<Value> out;
  out.reserve(d.entries().size());
  for (const auto& [k, v] : d.entries()) out.push_back(Value::list({k, v}, true));
  return Value::list(std::move(out));
}

}  // namespace

Value Interp::call_method(const Value& obj, const std::string& name, CallArgs& args) {
  if (is_mutating(obj, name)) unsafe(name, obj);
  if (obj.kind == Kind::Str) {
    step(obj.str().size() / kBytesPerStep);
    bool found = false;
    Value r = str_method(*this, obj, name, args, &found);
    if (found) return r;
  } else if (obj.kind == Kind::List) {
    const auto& items = obj.items();
    step(items.size());
    if (name == "copy") {
      max_args(args, 0, "copy");
      return Value::list(items, obj.is_tuple());
    }
    if (name == "count") {
      max_args(args, 1, "count");
      if (args.pos.empty()) throw JinjaError("count() takes exactly one argument (0 given)");
      return Value::integer(std::count_if(items.begin(), items.end(), [&](const Value& v) { return equals(v, args.pos[0]); }));
    }
    if (name == "index") {
      if (args.pos.empty()) throw JinjaError("index expected at least 1 argument, got 0");
      for (size_t k = 0; k < items.size(); ++k)
        if (equals(items[k], args.pos[0])) return Value::integer(static_cast<int64_t>(k));
      Text t;
      append_repr(t, args.pos[0]);
      throw JinjaError(t.str() + " is not in list");
    }
  } else if (obj.kind == Kind::Dict) {
    if (name == "get") {
      if (args.pos.empty() || args.pos.size() > 2 || !args.kw.empty()) throw JinjaError("get expected 1 or 2 arguments");
      if (const Value* v = dict_find(obj, args.pos[0])) return *v;
      return args.pos.size() > 1 ? args.pos[1] : Value::none();
    }
    if (name == "items") {
      max_args(args, 0, "items");
      return dict_items(obj);
    }
    if (name == "keys" || name == "values") {
      max_args(args, 0, name.c_str());
      std::vector<Value> out;
      for (const auto& [k, v] : obj.entries()) out.push_back(name == "keys" ? k : v);
      return Value::list(std::move(out));
    }
    if (name == "copy") {
      max_args(args, 0, "copy");
      return Value::dict(obj.entries());
    }
  }
  // Not a method of the object: an attribute holding a callable (a dict key, a namespace member).
  const Value fn = getattr(obj, name);
  return call(fn, args);
}

Value Interp::getattr(const Value& obj, const std::string& name) {
  switch (obj.kind) {
    case Kind::Undefined: fail_undefined(obj);
    case Kind::Str:
    case Kind::List:
    case Kind::Dict:
      if (is_method(obj, name)) {
        if (is_mutating(obj, name))
          return Value::undefined("access to attribute '" + name + "' of '" + type_name(obj) + "' object is unsafe.", true);
        return make_method(obj, name, type_name(obj) + "." + name);
      }
      if (obj.kind == Kind::Dict)
        if (const Value* v = dict_find(obj, name)) return *v;
      break;
    case Kind::Namespace:
      for (const auto& [k, v] : static_cast<const NsObj&>(*obj.heap).attrs)
        if (k == name) return v;
      break;
    case Kind::Loop: {
      const auto& loop = static_cast<const LoopObj&>(*obj.heap);
      const int64_t n = static_cast<int64_t>(loop.items->size()), i = loop.index0;
      if (name == "index") return Value::integer(i + 1);
      if (name == "index0") return Value::integer(i);
      if (name == "revindex") return Value::integer(n - i);
      if (name == "revindex0") return Value::integer(n - i - 1);
      if (name == "first") return Value::boolean(i == 0);
      if (name == "last") return Value::boolean(i == n - 1);
      if (name == "length") return Value::integer(n);
      if (name == "depth") return Value::integer(loop.depth0 + 1);
      if (name == "depth0") return Value::integer(loop.depth0);
      if (name == "previtem") return i > 0 ? (*loop.items)[i - 1] : Value::undefined("there is no previous item");
      if (name == "nextitem") return i + 1 < n ? (*loop.items)[i + 1] : Value::undefined("there is no next item");
      if (name == "cycle") {
        const int64_t index0 = i;
        return make_function("loop.cycle", [index0](Interp&, CallArgs& a) {
          if (a.pos.empty()) throw JinjaError("no items for cycling given");
          return a.pos[static_cast<size_t>(index0) % a.pos.size()];
        });
      }
      if (name == "changed") {
        auto keep = std::static_pointer_cast<const LoopObj>(obj.heap);
        return make_function("loop.changed", [keep](Interp&, CallArgs& a) {
          const bool changed = !keep->changed_seen || keep->last_changed.size() != a.pos.size() ||
                               !std::equal(a.pos.begin(), a.pos.end(), keep->last_changed.begin(),
                                           [](const Value& x, const Value& y) { return equals(x, y); });
          keep->changed_seen = true;
          keep->last_changed = a.pos;
          return Value::boolean(changed);
        });
      }
      break;
    }
    default: break;
  }
  return Value::undefined(object_repr(obj) + " has no attribute '" + name + "'");
}

// ---- arithmetic

namespace {

[[noreturn]] void bad_operands(const char* op, const Value& a, const Value& b) {
  throw JinjaError(std::string("unsupported operand type(s) for ") + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
}

int64_t checked(bool overflow, int64_t v) {
  if (overflow) throw JinjaError("integer overflow: the result does not fit in 64 bits");
  return v;
}

// The size of `n` copies of something of `size` (bytes or items), refused past the output limit.
size_t repeated_size(size_t size, int64_t n, const Interp& in) {
  size_t total = 0;
  if (n <= 0) return 0;
  if (__builtin_mul_overflow(size, static_cast<uint64_t>(n), &total)) total = SIZE_MAX;
  in.check_size(total);
  return total;
}

Value repeat(const Value& seq, int64_t n, const Interp& in) {
  if (seq.kind == Kind::Str) {
    Text out;
    in.step(repeated_size(seq.str().size(), n, in) / Interp::kBytesPerStep);
    for (int64_t k = 0; k < n; ++k) out.append(seq.text());
    return Value::string(std::move(out));
  }
  std::vector<Value> out;
  in.step(repeated_size(seq.items().size(), n, in));
  for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return Value::list(std::move(out), seq.is_tuple());
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

}  // namespace

Value Interp::binary(BinOp op, const Value& a, const Value& b) {
  if (op == BinOp::Concat) {
    Text t = to_text(a);
    t.append(to_text(b));
    check_size(t.size());
    step(t.size() / kBytesPerStep);
    return Value::string(std::move(t));
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  const bool nums = a.is_number() && b.is_number();
  const bool ints = nums && a.is_int_like() && b.is_int_like();
  int64_t r = 0;
  switch (op) {
    case BinOp::Add:
      if (ints) {
        if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) checked(true, 0);
        return Value::integer(r);
      }
      if (nums) return Value::number(a.as_float() + b.as_float());
      if (a.kind == Kind::Str && b.kind == Kind::Str) {
        Text t = a.text();
        t.append(b.text());
        check_size(t.size());
        step(t.size() / kBytesPerStep);
        return Value::string(std::move(t));
      }
      if (a.kind == Kind::List && b.kind == Kind::List && a.is_tuple() == b.is_tuple()) {
        step(a.items().size() + b.items().size());
        std::vector<Value> items = a.items();
        items.insert(items.end(), b.items().begin(), b.items().end());
        return Value::list(std::move(items), a.is_tuple());
      }
      if (a.kind == Kind::Str) throw JinjaError("can only concatenate str (not \"" + type_name(b) + "\") to str");
      if (a.kind == Kind::List)
        throw JinjaError("can only concatenate " + type_name(a) + " (not \"" + type_name(b) + "\") to " + type_name(a));
      bad_operands("+", a, b);
    case BinOp::Sub:
      if (ints) {
        if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) checked(true, 0);
        return Value::integer(r);
      }
      if (nums) return Value::number(a.as_float() - b.as_float());
      bad_operands("-", a, b);
    case BinOp::Mul:
      if (ints) {
        if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) checked(true, 0);
        return Value::integer(r);
      }
      if (nums) return Value::number(a.as_float() * b.as_float());
      if ((a.kind == Kind::Str || a.kind == Kind::List) && b.is_int_like()) return repeat(a, b.as_int(), *this);
      if ((b.kind == Kind::Str || b.kind == Kind::List) && a.is_int_like()) return repeat(b, a.as_int(), *this);
      if (a.kind == Kind::Str || b.kind == Kind::Str)
        throw JinjaError("can't multiply sequence by non-int of type '" + type_name(a.kind == Kind::Str ? b : a) + "'");
      bad_operands("*", a, b);
    case BinOp::Div:
      if (!nums) bad_operands("/", a, b);
      if (b.as_float() == 0.0) throw JinjaError("division by zero");
      return Value::number(a.as_float() / b.as_float());
    case BinOp::FloorDiv:
      if (!nums) bad_operands("//", a, b);
      if (ints) {
        if (b.as_int() == 0) throw JinjaError("integer division or modulo by zero");
        checked(a.as_int() == INT64_MIN && b.as_int() == -1, 0);
        return Value::integer(floor_div(a.as_int(), b.as_int()));
      }
      if (b.as_float() == 0.0) throw JinjaError("float floor division by zero");
      return Value::number(std::floor(a.as_float() / b.as_float()));
    case BinOp::Mod:
      if (a.kind == Kind::Str) {
        Text t = percent_format(a.text(), b, *this);
        return Value::string(std::move(t));
      }
      if (!nums) bad_operands("%", a, b);
      if (ints) {
        if (b.as_int() == 0) throw JinjaError("integer division or modulo by zero");
        if (b.as_int() == -1) return Value::integer(0);  // INT64_MIN % -1 traps in C++
        const int64_t m = a.as_int() % b.as_int();
        return Value::integer((m != 0 && ((m < 0) != (b.as_int() < 0))) ? m + b.as_int() : m);
      } else {
        if (b.as_float() == 0.0) throw JinjaError("float modulo");
        double m = std::fmod(a.as_float(), b.as_float());
        if (m != 0 && ((m < 0) != (b.as_float() < 0))) m += b.as_float();
        return Value::number(m);
      }
    case BinOp::Pow:
      if (!nums) bad_operands("** or pow()", a, b);
      if (ints && b.as_int() >= 0) {
        int64_t base = a.as_int(), e = b.as_int(), acc = 1;
        while (e > 0) {
          if (e & 1 && __builtin_mul_overflow(acc, base, &acc)) checked(true, 0);
          e >>= 1;
          if (e && __builtin_mul_overflow(base, base, &base)) checked(true, 0);
        }
        return Value::integer(acc);
      }
      return Value::number(std::pow(a.as_float(), b.as_float()));
    case BinOp::Concat: break;
  }
  return Value();
}

// ---- filters

namespace {

// Python-style binding of a builtin's parameters: positional, then by name.
struct Args {
  Args(const CallArgs& a, const char* fn, std::initializer_list<const char*> names) : a_(a), names_(names) {
    if (a.pos.size() > names_.size())
      throw JinjaError(std::string(fn) + "() takes at most " + std::to_string(names_.size() + 1) + " arguments");
    for (const auto& [k, v] : a.kw)
      if (std::find_if(names_.begin(), names_.end(), [&](const char* n) { return k == n; }) == names_.end())
        throw JinjaError(std::string(fn) + "() got an unexpected keyword argument '" + k + "'");
  }
  const Value* get(size_t k) const { return k < a_.pos.size() ? &a_.pos[k] : a_.kwarg(names_[k]); }
  bool flag(size_t k, bool def = false) const {
    const Value* v = get(k);
    return v ? truthy(*v) : def;
  }
  int64_t integer(size_t k, int64_t def) const {
    const Value* v = get(k);
    if (!v || v->is_none()) return def;
    if (!v->is_number()) throw JinjaError("'" + type_name(*v) + "' object cannot be interpreted as an integer");
    return v->kind == Kind::Float ? static_cast<int64_t>(v->f) : v->as_int();
  }
  const CallArgs& a_;
  std::vector<const char*> names_;
};

Value f_trim(Interp&, const Value& v, CallArgs& a) {
  Args p(a, "trim", {"chars"});
  return Value::string(py_strip(to_text(v), p.get(0), true, true));
}
Value f_upper(Interp&, const Value& v, CallArgs& a) {
  Args p(a, "upper", {});
  return Value::string(py_upper(to_text(v)));
}
Value f_lower(Interp&, const Value& v, CallArgs& a) {
  Args p(a, "lower", {});
  return Value::string(py_lower(to_text(v)));
}
Value f_capitalize(Interp&, const Value& v, CallArgs& a) {
  Args p(a, "capitalize", {});
  return Value::string(py_capitalize(to_text(v)));
}
// jinja2's title: words begin after '-', whitespace or an opening bracket; each is first
// letter upper, rest lower.
Value f_title(Interp&, const Value& v, CallArgs& a) {
  Args p(a, "title", {});
  const Text t = to_text(v);
  Text out;
  std::string piece;
  bool word_start = true;
  const std::string& s = t.str();
  size_t len = 0;
  for (size_t i = 0; i < s.size(); i += len) {
    const uint32_t cp = decode_at(s, i, &len);
    const bool boundary = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || is_space(cp);
    piece.clear();
    if (boundary) append_utf8(piece, cp);
    else if (word_start) append_upper(piece, cp);
    else append_lower(piece, cp);
    word_start = boundary;
    out.append(piece, t.tag_at(i));
  }
  return Value::string(std::move(out));
}

Value f_length(Interp&, const Value& v, CallArgs& a) {
  Args p(a, "length", {});
  switch (v.kind) {
    case Kind::Undefined: return Value::integer(0);
    case Kind::Str: return Value::integer(static_cast<int64_t>(count_code_points(v.str())));
    case Kind::List: return Value::integer(static_cast<int64_t>(v.items().size()));
    case Kind::Dict: return Value::integer(static_cast<int64_t>(v.entries().size()));
    default: throw JinjaError("object of type '" + type_name(v) + "' has no len()");
  }
}

Value f_first(Interp& in, const Value& v, CallArgs& a) {
  Args p(a, "first", {});
  if (v.kind == Kind::List) return v.items().empty() ? Value::undefined("No first item, sequence was empty.") : v.items()[0];
  const auto items = in.iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items[0];
}
Value f_last(Interp& in, const Value& v, CallArgs& a) {
  Args p(a, "last", {});
  if (v.kind == Kind::List) return v.items().empty() ? Value::undefined("No last item, sequence was empty.") : v.items().back();
  const auto items = in.iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

// What make_attrgetter does: "a.b.0" looked up part by part, items first.
Value attribute_of(Interp& in, const Value& item, const std::string& path) {
  Value cur = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = in.getitem(cur, numeric ? Value::integer(std::stoll(part)) : Value::string(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

Value f_join(Interp& in, const Value& v, CallArgs& a) {
  Args p(a, "join", {"d", "attribute"});
  const Text sep = p.get(0) ? to_text(*p.get(0)) : Text();
  const Value* attr = p.get(1);
  Text out;
  bool first = true;
  for (const auto& item : in.iterate(v)) {
    if (!first) out.append(sep);
    first = false;
    out.append(to_text(attr && !attr->is_none() ? attribute_of(in, item, to_text(*attr).str()) : item));
    in.check_size(out.size());
  }
  return Value::string(std::move(out));
}

Value f_default(Interp&, const Value& v, CallArgs& a) {
  Args p(a, "default", {"default_value", "boolean"});
  const bool boolean = p.flag(1);
  if (v.is_undefined() || (boolean && !truthy(v))) return p.get(0) ? *p.get(0) : Value::string("");
  return v;
}

Value f_replace(Interp& in, const Value& v, CallArgs& a) {
  Args p(a, "replace", {"old", "new", "count"});
  if (!p.get(0) || !p.get(1)) throw JinjaError("replace() missing required arguments 'old' and 'new'");
  return Value::string(py_replace(to_text(v), to_text(*p.get(0)), to_text(*p.get(1)), p.integer(2, -1), in));
}

Value f_list(Interp& in, const Value& v, CallArgs& a) {
  Args p(a, "list", {});
  return Value::list(in.iterate(v));
}
Value f_string(Interp&, const Value& v, CallArgs& a) {
  Args p(a, "string", {});
  return Value::string(to_text(v));
}

bool parse_int_text(std::string s, int base, int64_t* out) {
  // Python's int(str, base): surrounding whitespace, a sign, underscores between digits.
  size_t b = 0, e = s.size();
  while (b < e && is_space(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && is_space(static_cast<unsigned char>(s[e - 1]))) --e;
  s = s.substr(b, e - b);
  if (s.empty()) return false;
  bool neg = false;
  size_t i = 0;
  if (s[0] == '+' || s[0] == '-') {
    neg = s[0] == '-';
    i = 1;
  }
  if (base == 16 && s.compare(i, 2, "0x") == 0) i += 2;
  if (i >= s.size()) return false;
  uint64_t acc = 0;
  bool digit_before = false;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '_' && digit_before && i + 1 < s.size() && s[i + 1] != '_') continue;
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'z') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'Z') d = c - 'A' + 10;
    if (d < 0 || d >= base) return false;
    if (acc > (UINT64_MAX - static_cast<uint64_t>(d)) / static_cast<uint64_t>(base)) return false;
    acc = acc * base + static_cast<uint64_t>(d);
    digit_before = true;
  }
  if (acc > static_cast<uint64_t>(INT64_MAX) + (neg ? 1 : 0)) return false;
  *out = neg ? static_cast<int64_t>(0 - acc) : static_cast<int64_t>(acc);
  return true;
}

bool parse_float_text(const std::string& s, double* out) {
  std::string t;
  for (char c : s)
    if (c != '_') t += c;
  size_t b = 0;
  while (b < t.size() && is_space(static_cast<unsigned char>(t[b]))) ++b;
  size_t e = t.size();
  while (e > b && is_space(static_cast<unsigned char>(t[e - 1]))) --e;
  t = t.substr(b, e - b);
  if (t.empty()) return false;
  try {
    size_t used = 0;
    *out = std::stod(t, &used);
    return used == t.size();
  } catch (const std::exception&) {
    return false;
  }
}

Value f_int(Interp&, const Value& v, CallArgs& a) {
  Args p(a, "int", {"default", "base"});
  const Value def = p.get(0) ? *p.get(0) : Value::integer(0);
  const int base = static_cast<int>(p.integer(1, 10));
  if (v.is_undefined()) fail_undefined(v);  // int(Undefined) raises, which do_int does not catch
  if (v.is_int_like()) return Value::integer(v.as_int());
  // int(nan) is a ValueError, which do_int catches; int(inf) an OverflowError, which it does not.
  if (v.kind == Kind::Float) return std::isnan(v.f) ? def : Value::integer(float_to_int(v.f));
  if (v.kind == Kind::Str) {
    int64_t i = 0;
    if (parse_int_text(v.str(), base, &i)) return Value::integer(i);
    double d = 0;
    if (parse_float_text(v.str(), &d) && !std::isnan(d)) return Value::integer(float_to_int(d));
  }
  return def;
}

Value f_float(Interp&, const Value& v, CallArgs& a) {
  Args p(a, "float", {"default"});
  const Value def = p.get(0) ? *p.get(0) : Value::number(0.0);
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_number()) return Value::number(v.as_float());
  double d = 0;
  if (v.kind == Kind::Str && parse_float_text(v.str(), &d)) return Value::number(d);
  return def;
}

Value f_abs(Interp&, const Value& v, CallArgs& a) {
  Args p(a, "abs", {});
  if (v.kind == Kind::Float) return Value::number(std::fabs(v.f));
  if (v.is_int_like()) {
    checked(v.as_int() == INT64_MIN, 0);  // before negating: -INT64_MIN overflows
    return Value::integer(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  if (v.is_undefined()) fail_undefined(v);
  throw JinjaError("bad operand type for abs(): '" + type_name(v) + "'");
}

Value f_round(Interp&, const Value& v, CallArgs& a) {
  Args p(a, "round", {"precision", "method"});
  const int64_t precision = p.integer(0, 0);
  const std::string method = p.get(1) ? to_text(*p.get(1)).str() : "common";
  if (method != "common" && method != "ceil" && method != "floor")
    throw JinjaError("method must be common, ceil or floor");
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_number()) throw JinjaError("type " + type_name(v) + " doesn't define __round__ method");
  if (method == "common" && v.is_int_like() && precision >= 0) return Value::integer(v.as_int());
  const double x = v.as_float();
  if (method == "common" && precision >= 0 && std::isfinite(x)) {
    // Python rounds the exact binary value half to even (2.675 is 2.67499..., so 2.67), which is
    // what printf's correctly rounded %.*f does; scaling by 10**n first would round 267.5.
    const int digits = static_cast<int>(std::min<int64_t>(precision, 400));
    std::string buf(static_cast<size_t>(std::snprintf(nullptr, 0, "%.*f", digits, x)) + 1, '\0');
    std::snprintf(buf.data(), buf.size(), "%.*f", digits, x);
    return Value::number(std::strtod(buf.c_str(), nullptr));
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  double r;
  if (method == "ceil") r = std::ceil(x * scale);
  else if (method == "floor") r = std::floor(x * scale);
  else r = std::nearbyint(x * scale);  // half to even, as Python's round
  return Value::number(r / scale);
}

Value f_tojson(Interp&, const Value& v, CallArgs& a) {
  // HF's tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
  Args p(a, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = p.flag(0);
  if (const Value* ind = p.get(1); ind && !ind->is_none()) {
    o.has_indent = true;
    if (ind->kind == Kind::Str) o.indent = ind->str();
    else if (ind->is_int_like()) o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, ind->as_int())), ' ');
    else throw JinjaError("indent must be an int or a str");
    o.item_sep = ",";
  }
  if (const Value* sep = p.get(2); sep && !sep->is_none()) {
    if (sep->kind != Kind::List || sep->items().size() != 2 || sep->items()[0].kind != Kind::Str || sep->items()[1].kind != Kind::Str)
      throw JinjaError("separators must be a (item_separator, key_separator) pair of strings");
    o.item_sep = sep->items()[0].str();
    o.key_sep = sep->items()[1].str();
  }
  o.sort_keys = p.flag(3);
  Text out;
  append_json(out, v, o);
  return Value::string(std::move(out));
}

Value f_safe(Interp&, const Value& v, CallArgs&) { return v.kind == Kind::Str ? v : Value::string(to_text(v)); }

Value f_escape(Interp&, const Value& v, CallArgs& a) {
  Args p(a, "escape", {});
  const Text t = to_text(v);
  Text out;
  const std::string& s = t.str();
  size_t plain = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char* rep = nullptr;
    switch (s[i]) {
      case '&': rep = "&amp;"; break;
      case '<': rep = "&lt;"; break;
      case '>': rep = "&gt;"; break;
      case '"': rep = "&#34;"; break;
      case '\'': rep = "&#39;"; break;
      default: continue;
    }
    out.append(t, plain, i);
    out.append(rep, t.tag_at(i));
    plain = i + 1;
  }
  out.append(t, plain, s.size());
  return Value::string(std::move(out));
}

Value f_indent(Interp&, const Value& v, CallArgs& a) {
  Args p(a, "indent", {"width", "first", "blank"});
  Text ind;
  if (const Value* w = p.get(0); w && w->kind == Kind::Str) ind = w->text();
  else ind = Text(std::string(static_cast<size_t>(std::max<int64_t>(0, p.integer(0, 4))), ' '));
  const bool first = p.flag(1), blank = p.flag(2);
  Text s = to_text(v);
  s.append("\n");
  const std::vector<Value> lines = py_splitlines(s, false);
  Text out;
  for (size_t k = 0; k < lines.size(); ++k) {
    const Text& line = lines[k].text();
    if (k > 0) {
      out.append("\n");
      if (blank || !line.empty()) out.append(ind);
    }
    out.append(line);
  }
  if (first) {
    Text with;
    with.append(ind);
    with.append(out);
    return Value::string(std::move(with));
  }
  return Value::string(std::move(out));
}

Value f_items(Interp&, const Value& v, CallArgs& a) {
  Args p(a, "items", {});
  if (v.is_undefined()) return Value::list({});
  if (v.kind != Kind::Dict) throw JinjaError("Can only get item pairs from a mapping.");
  return dict_items(v);
}

// The key jinja2 sorts and compares by: strings lowered unless case_sensitive.
Value sort_key(Interp& in, const Value& v, bool case_sensitive, const Value* attribute) {
  Value k = attribute && !attribute->is_none() ? attribute_of(in, v, to_text(*attribute).str()) : v;
  if (!case_sensitive && k.kind == Kind::Str) return Value::string(py_lower(k.text()));
  return k;
}

Value f_dictsort(Interp& in, const Value& v, CallArgs& a) {
  Args p(a, "dictsort", {"case_sensitive", "by", "reverse"});
  if (v.kind != Kind::Dict) throw JinjaError("You can only sort by either \"key\" or \"value\"");
  const bool cs = p.flag(0);
  const std::string by = p.get(1) ? to_text(*p.get(1)).str() : "key";
  if (by != "key" && by != "value") throw JinjaError("You can only sort by either \"key\" or \"value\"");
  const bool reverse = p.flag(2);
  std::vector<std::pair<Value, Value>> keyed;
  for (const auto& [k, x] : v.entries()) keyed.emplace_back(sort_key(in, by == "key" ? k : x, cs, nullptr), Value::list({k, x}, true));
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? compare(y.first, x.first, "<") < 0 : compare(x.first, y.first, "<") < 0;
  });
  std::vector<Value> out;
  for (auto& [k, x] : keyed) out.push_back(std::move(x));
  return Value::list(std::move(out));
}

Value f_sort(Interp& in, const Value& v, CallArgs& a) {
  Args p(a, "sort", {"reverse", "case_sensitive", "attribute"});
  const bool reverse = p.flag(0), cs = p.flag(1);
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& item : in.iterate(v)) keyed.emplace_back(sort_key(in, item, cs, p.get(2)), item);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? compare(y.first, x.first, "<") < 0 : compare(x.first, y.first, "<") < 0;
  });
  std::vector<Value> out;
  for (auto& [k, x] : keyed) out.push_back(std::move(x));
  return Value::list(std::move(out));
}

// What Python's set hashes a key as: equal keys (1, 1.0, True) give equal strings; lists, dicts
// and the like are unhashable, as in Python.
void append_hash_key(std::string& out, const Value& v, int depth) {
  if (depth > kMaxValueDepth) throw JinjaError("maximum recursion depth exceeded while hashing");
  switch (v.kind) {
    case Kind::None: out += 'N'; return;
    case Kind::Bool:
    case Kind::Int: out += 'i' + std::to_string(v.as_int()) + ';'; return;
    case Kind::Float:
      if (std::trunc(v.f) == v.f && std::fabs(v.f) < 9.2e18) out += 'i' + std::to_string(static_cast<int64_t>(v.f)) + ';';
      else out += 'f' + float_repr(v.f) + ';';
      return;
    case Kind::Str: out += 's' + std::to_string(v.str().size()) + ':' + v.str(); return;
    case Kind::List:
      if (v.is_tuple()) {
        out += '(';
        for (const auto& x : v.items()) append_hash_key(out, x, depth + 1);
        out += ')';
        return;
      }
      [[fallthrough]];
    default: throw JinjaError("unhashable type: '" + type_name(v) + "'");
  }
}

Value f_unique(Interp& in, const Value& v, CallArgs& a) {
  Args p(a, "unique", {"case_sensitive", "attribute"});
  std::unordered_set<std::string> seen;
  std::vector<Value> out;
  for (auto& item : in.iterate(v)) {
    std::string key;
    append_hash_key(key, sort_key(in, item, p.flag(0), p.get(1)), 0);
    if (seen.insert(std::move(key)).second) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value min_max(Interp& in, const Value& v, CallArgs& a, bool want_max) {
  Args p(a, want_max ? "max" : "min", {"case_sensitive", "attribute"});
  const auto items = in.iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key = sort_key(in, items[0], p.flag(0), p.get(1));
  for (size_t k = 1; k < items.size(); ++k) {
    Value key = sort_key(in, items[k], p.flag(0), p.get(1));
    const int c = compare(key, best_key, want_max ? ">" : "<");
    if (want_max ? c > 0 : c < 0) {
      best = k;
      best_key = std::move(key);
    }
  }
  return items[best];
}
Value f_min(Interp& in, const Value& v, CallArgs& a) { return min_max(in, v, a, false); }
Value f_max(Interp& in, const Value& v, CallArgs& a) { return min_max(in, v, a, true); }

Value f_sum(Interp& in, const Value& v, CallArgs& a) {
  Args p(a, "sum", {"attribute", "start"});
  Value acc = p.get(1) ? *p.get(1) : Value::integer(0);
  for (auto& item : in.iterate(v)) {
    const Value x = p.get(0) && !p.get(0)->is_none() ? attribute_of(in, item, to_text(*p.get(0)).str()) : item;
    acc = in.binary(BinOp::Add, acc, x);
  }
  return acc;
}

Value f_reverse(Interp& in, const Value& v, CallArgs& a) {
  Args p(a, "reverse", {});
  if (v.kind == Kind::Str) {
    const auto chars = in.iterate(v);
    Text out;
    for (auto it = chars.rbegin(); it != chars.rend(); ++it) out.append(it->text());
    return Value::string(std::move(out));
  }
  auto items = in.iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_batch(Interp& in, const Value& v, CallArgs& a) {
  Args p(a, "batch", {"linecount", "fill_with"});
  const int64_t n = p.integer(0, 0);
  if (n <= 0) throw JinjaError("batch size must be positive");
  std::vector<Value> out, cur;
  for (auto& item : in.iterate(v)) {
    cur.push_back(item);
    if (static_cast<int64_t>(cur.size()) == n) {
      out.push_back(Value::list(std::move(cur)));
      cur.clear();
    }
  }
  if (!cur.empty()) {
    if (const Value* fill = p.get(1); fill && !fill->is_none())
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(*fill);
    out.push_back(Value::list(std::move(cur)));
  }
  return Value::list(std::move(out));
}

Value f_wordcount(Interp&, const Value& v, CallArgs& a) {
  Args p(a, "wordcount", {});
  const std::string s = to_text(v).str();
  int64_t n = 0;
  bool in_word = false;
  size_t len = 0;
  for (size_t i = 0; i < s.size(); i += len) {
    const uint32_t cp = decode_at(s, i, &len);
    const bool w = is_alpha(cp) || is_digit(cp) || cp == '_' || (cp >= 0x80 && !is_space(cp) && cp > 0x2000 && cp != 0x3000 && !(cp >= 0x3001 && cp <= 0x3003));
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}

Value f_center(Interp& in, const Value& v, CallArgs& a) {
  Args p(a, "center", {"width"});
  const int64_t width = p.integer(0, 80);
  in.check_size(static_cast<size_t>(std::max<int64_t>(0, width)));
  return Value::string(py_center(to_text(v), width, Text(" ")));
}

Value f_format(Interp& in, const Value& v, CallArgs& a) {
  if (!a.pos.empty() && !a.kw.empty()) throw JinjaError("can't handle positional and keyword arguments at the same time");
  const Text fmt = to_text(v);
  if (!a.kw.empty()) {
    std::vector<std::pair<Value, Value>> m;
    for (auto& [k, x] : a.kw) m.emplace_back(Value::string(k), x);
    return Value::string(percent_format(fmt, Value::dict(std::move(m)), in));
  }
  return Value::string(percent_format(fmt, Value::list(a.pos, true), in));
}

Value f_attr(Interp& in, const Value& v, CallArgs& a) {
  Args p(a, "attr", {"name"});
  if (!p.get(0)) throw JinjaError("attr() missing the attribute name");
  const std::string name = to_text(*p.get(0)).str();
  // Python's getattr only: a dict's keys are not its attributes.
  if (v.kind == Kind::Dict && !is_method(v, name)) return Value::undefined("'dict object' has no attribute '" + name + "'");
  return in.getattr(v, name);
}

Value f_map(Interp& in, const Value& v, CallArgs& a) {
  std::vector<Value> out;
  const auto items = in.iterate(v);
  if (a.pos.empty()) {
    const Value* attr = a.kwarg("attribute");
    if (!attr) throw JinjaError("map requires a filter argument");
    const Value* def = a.kwarg("default");
    for (const auto& item : items) {
      Value x = attribute_of(in, item, to_text(*attr).str());
      if (x.is_undefined() && def) x = *def;
      out.push_back(std::move(x));
    }
    return Value::list(std::move(out));
  }
  const std::string name = to_text(a.pos[0]).str();
  CallArgs rest;
  rest.pos.assign(a.pos.begin() + 1, a.pos.end());
  rest.kw = a.kw;
  for (const auto& item : items) {
    CallArgs call = rest;
    out.push_back(in.apply_filter(name, item, call));
  }
  return Value::list(std::move(out));
}

Value select_reject(Interp& in, const Value& v, CallArgs& a, bool by_attr, bool keep_when) {
  std::vector<Value> out;
  size_t first = 0;
  std::string attr;
  if (by_attr) {
    if (a.pos.empty()) throw JinjaError("selectattr/rejectattr need an attribute");
    attr = to_text(a.pos[0]).str();
    first = 1;
  }
  std::string test;
  CallArgs rest;
  if (a.pos.size() > first) {
    test = to_text(a.pos[first]).str();
    rest.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(first) + 1, a.pos.end());
    rest.kw = a.kw;
  }
  for (const auto& item : in.iterate(v)) {
    const Value x = by_attr ? attribute_of(in, item, attr) : item;
    bool ok;
    if (test.empty()) {
      ok = truthy(x);
    } else {
      CallArgs call = rest;
      ok = in.apply_test(test, x, call);
    }
    if (ok == keep_when) out.push_back(item);
  }
  return Value::list(std::move(out));
}
Value f_select(Interp& in, const Value& v, CallArgs& a) { return select_reject(in, v, a, false, true); }
Value f_reject(Interp& in, const Value& v, CallArgs& a) { return select_reject(in, v, a, false, false); }
Value f_selectattr(Interp& in, const Value& v, CallArgs& a) { return select_reject(in, v, a, true, true); }
Value f_rejectattr(Interp& in, const Value& v, CallArgs& a) { return select_reject(in, v, a, true, false); }

Value f_truncate(Interp&, const Value& v, CallArgs& a) {
  Args p(a, "truncate", {"length", "killwords", "end", "leeway"});
  const Text s = to_text(v);
  const int64_t length = p.integer(0, 255);
  const bool killwords = p.flag(1);
  const Text end = p.get(2) ? to_text(*p.get(2)) : Text("...");
  const int64_t leeway = p.integer(3, 5);
  const auto off = code_point_offsets(s.str());
  const int64_t n = static_cast<int64_t>(off.size()) - 1, end_n = static_cast<int64_t>(count_code_points(end.str()));
  if (length < end_n) throw JinjaError("expected length >= " + std::to_string(end_n) + ", got " + std::to_string(length));
  if (n <= length + leeway) return Value::string(s);
  const int64_t cut = std::max<int64_t>(0, length - end_n);
  Text out;
  if (killwords) {
    out = s.slice(0, off[cut]);
  } else {
    Text head = s.slice(0, off[cut]);
    const size_t space = head.str().rfind(' ');
    out = space == std::string::npos ? Text() : head.slice(0, space);
  }
  out.append(end);
  return Value::string(std::move(out));
}

// ---- tests

Value t_defined(Interp&, const Value& v, CallArgs&) { return Value::boolean(!v.is_undefined()); }
Value t_undefined(Interp&, const Value& v, CallArgs&) { return Value::boolean(v.is_undefined()); }
Value t_none(Interp&, const Value& v, CallArgs&) { return Value::boolean(v.is_none()); }
Value t_boolean(Interp&, const Value& v, CallArgs&) { return Value::boolean(v.kind == Kind::Bool); }
Value t_true(Interp&, const Value& v, CallArgs&) { return Value::boolean(v.kind == Kind::Bool && v.b); }
Value t_false(Interp&, const Value& v, CallArgs&) { return Value::boolean(v.kind == Kind::Bool && !v.b); }
Value t_integer(Interp&, const Value& v, CallArgs&) { return Value::boolean(v.kind == Kind::Int); }
Value t_float(Interp&, const Value& v, CallArgs&) { return Value::boolean(v.kind == Kind::Float); }
Value t_number(Interp&, const Value& v, CallArgs&) { return Value::boolean(v.is_number()); }
Value t_string(Interp&, const Value& v, CallArgs&) { return Value::boolean(v.kind == Kind::Str); }
Value t_mapping(Interp&, const Value& v, CallArgs&) { return Value::boolean(v.kind == Kind::Dict); }
Value t_iterable(Interp&, const Value& v, CallArgs&) {
  return Value::boolean(v.kind == Kind::Str || v.kind == Kind::List || v.kind == Kind::Dict || v.is_undefined());
}
Value t_sequence(Interp&, const Value& v, CallArgs&) {
  return Value::boolean(v.kind == Kind::Str || v.kind == Kind::List || v.kind == Kind::Dict);
}
Value t_callable(Interp&, const Value& v, CallArgs&) {
  return Value::boolean(v.kind == Kind::Callable || v.kind == Kind::Undefined || v.kind == Kind::Loop);
}
const Value& test_arg(const CallArgs& a, const char* test) {
  if (a.pos.empty()) throw JinjaError(std::string("the test '") + test + "' needs an argument");
  return a.pos[0];
}
int64_t int_operand(const Value& v, const char* test) {
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_int_like() && v.kind != Kind::Float)
    throw JinjaError(std::string("the test '") + test + "' needs a number, not " + type_name(v));
  return v.kind == Kind::Float ? float_to_int(v.f) : v.as_int();
}
Value t_odd(Interp&, const Value& v, CallArgs&) { return Value::boolean(int_operand(v, "odd") % 2 != 0); }
Value t_even(Interp&, const Value& v, CallArgs&) { return Value::boolean(int_operand(v, "even") % 2 == 0); }
Value t_divisibleby(Interp&, const Value& v, CallArgs& a) {
  const int64_t d = int_operand(test_arg(a, "divisibleby"), "divisibleby");
  if (d == 0) throw JinjaError("integer division or modulo by zero");
  return Value::boolean(d == -1 || int_operand(v, "divisibleby") % d == 0);  // INT64_MIN % -1 traps
}
Value t_eq(Interp&, const Value& v, CallArgs& a) { return Value::boolean(equals(v, test_arg(a, "eq"))); }
Value t_ne(Interp&, const Value& v, CallArgs& a) { return Value::boolean(!equals(v, test_arg(a, "ne"))); }
Value t_lt(Interp&, const Value& v, CallArgs& a) { return Value::boolean(compare(v, test_arg(a, "lt"), "<") < 0); }
Value t_le(Interp&, const Value& v, CallArgs& a) { return Value::boolean(compare(v, test_arg(a, "le"), "<=") <= 0); }
Value t_gt(Interp&, const Value& v, CallArgs& a) { return Value::boolean(compare(v, test_arg(a, "gt"), ">") > 0); }
Value t_ge(Interp&, const Value& v, CallArgs& a) { return Value::boolean(compare(v, test_arg(a, "ge"), ">=") >= 0); }
Value t_in(Interp& in, const Value& v, CallArgs& a) { return Value::boolean(in.contains(test_arg(a, "in"), v)); }
Value t_sameas(Interp&, const Value& v, CallArgs& a) {
  const Value& o = test_arg(a, "sameas");
  if (v.kind != o.kind) return Value::boolean(false);
  switch (v.kind) {
    case Kind::None:
    case Kind::Undefined: return Value::boolean(v.kind == Kind::None || v.heap == o.heap);
    case Kind::Bool: return Value::boolean(v.b == o.b);
    case Kind::Int: return Value::boolean(v.i == o.i && v.i >= -5 && v.i <= 256);  // CPython's cached small ints
    case Kind::Float: return Value::boolean(false);
    default: return Value::boolean(v.heap == o.heap);
  }
}
Value t_lower(Interp&, const Value& v, CallArgs&) {
  if (v.kind != Kind::Str) return Value::boolean(false);
  CallArgs none;
  return Value::boolean(py_lower(v.text()).str() == v.str());
}
Value t_upper(Interp&, const Value& v, CallArgs&) {
  if (v.kind != Kind::Str) return Value::boolean(false);
  return Value::boolean(py_upper(v.text()).str() == v.str());
}
Value t_escaped(Interp&, const Value&, CallArgs&) { return Value::boolean(false); }
Value t_filter(Interp&, const Value& v, CallArgs&) { return Value::boolean(v.kind == Kind::Str && find_filter(v.str())); }
Value t_test(Interp&, const Value& v, CallArgs&) { return Value::boolean(v.kind == Kind::Str && find_test(v.str())); }

// ---- globals

Value g_range(Interp&, CallArgs& a) {
  if (!a.kw.empty()) throw JinjaError("range() takes no keyword arguments");
  for (const auto& v : a.pos)
    if (!v.is_int_like()) throw JinjaError("'" + type_name(v) + "' object cannot be interpreted as an integer");
  int64_t start = 0, stop = 0, step = 1;
  if (a.pos.size() == 1) stop = a.pos[0].as_int();
  else if (a.pos.size() == 2 || a.pos.size() == 3) {
    start = a.pos[0].as_int();
    stop = a.pos[1].as_int();
    if (a.pos.size() == 3) step = a.pos[2].as_int();
  } else {
    throw JinjaError("range expected 1 to 3 arguments, got " + std::to_string(a.pos.size()));
  }
  if (step == 0) throw JinjaError("range() arg 3 must not be zero");
  const long double count = step > 0 ? (stop > start ? std::ceil((static_cast<long double>(stop) - start) / step) : 0)
                                     : (start > stop ? std::ceil((static_cast<long double>(start) - stop) / -step) : 0);
  // jinja2's sandbox refuses ranges longer than MAX_RANGE.
  if (count > 100000) throw JinjaError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  std::vector<Value> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t k = 0, x = start; k < static_cast<int64_t>(count); ++k, x += step) out.push_back(Value::integer(x));
  return Value::list(std::move(out));
}

std::vector<std::pair<Value, Value>> dict_args(Interp& in, CallArgs& a, const char* fn) {
  std::vector<std::pair<Value, Value>> items;
  auto put = [&](Value k, Value v) {
    for (auto& [ek, ev] : items)
      if (equals(ek, k)) {
        ev = std::move(v);
        return;
      }
    items.emplace_back(std::move(k), std::move(v));
  };
  if (a.pos.size() > 1) throw JinjaError(std::string(fn) + " expected at most 1 argument, got " + std::to_string(a.pos.size()));
  if (!a.pos.empty()) {
    const Value& src = a.pos[0];
    if (src.kind == Kind::Dict) {
      for (const auto& [k, v] : src.entries()) put(k, v);
    } else if (src.kind == Kind::Namespace) {
      for (const auto& [k, v] : static_cast<const NsObj&>(*src.heap).attrs) put(Value::string(k), v);
    } else {
      for (const auto& pair : in.iterate(src)) {
        const auto kv = in.iterate(pair);
        if (kv.size() != 2) throw JinjaError("dictionary update sequence element has length " + std::to_string(kv.size()) + "; 2 is required");
        put(kv[0], kv[1]);
      }
    }
  }
  for (auto& [k, v] : a.kw) put(Value::string(k), v);
  return items;
}

Value g_dict(Interp& in, CallArgs& a) { return Value::dict(dict_args(in, a, "dict")); }

Value g_namespace(Interp& in, CallArgs& a) {
  std::vector<std::pair<std::string, Value>> attrs;
  for (auto& [k, v] : dict_args(in, a, "namespace")) {
    if (k.kind != Kind::Str) throw JinjaError("namespace keys must be strings");
    attrs.emplace_back(k.str(), std::move(v));
  }
  Value ns = make_namespace(std::move(attrs));
  in.adopt_namespace(ns);
  return ns;
}

Value g_raise_exception(Interp&, CallArgs& a) {
  if (a.pos.empty()) throw JinjaError("raise_exception() called without a message");
  throw JinjaError(to_text(a.pos[0]).str());
}

Value g_strftime_now(Interp& in, CallArgs& a) {
  if (a.pos.size() != 1 || a.pos[0].kind != Kind::Str) throw JinjaError("strftime_now() takes one format string");
  const std::time_t t = std::chrono::system_clock::to_time_t(in.options().now);
  std::tm tm{};
  localtime_r(&t, &tm);
  const std::string& fmt = a.pos[0].str();
  if (fmt.empty()) return Value::string("");
  for (size_t size = 256; size <= (size_t{1} << 20); size *= 4) {
    std::string buf(size, '\0');
    const size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
    if (n > 0) {
      buf.resize(n);
      return Value::string(std::move(buf));
    }
  }
  return Value::string("");
}

// jinja2's joiner(sep): "" on the first call, sep after.
Value g_joiner(Interp&, CallArgs& a) {
  const Value sep = a.pos.empty() ? Value::string(", ") : a.pos[0];
  auto used = std::make_shared<bool>(false);
  return make_function("joiner", [sep, used](Interp&, CallArgs&) {
    if (!*used) {
      *used = true;
      return Value::string("");
    }
    return sep;
  });
}

const std::unordered_map<std::string, Builtin>& filters() {
  static const std::unordered_map<std::string, Builtin> table = {
      {"abs", f_abs},         {"attr", f_attr},         {"batch", f_batch},       {"capitalize", f_capitalize},
      {"center", f_center},   {"count", f_length},      {"d", f_default},         {"default", f_default},
      {"dictsort", f_dictsort}, {"e", f_escape},        {"escape", f_escape},     {"first", f_first},
      {"float", f_float},     {"forceescape", f_escape}, {"format", f_format},    {"indent", f_indent},
      {"int", f_int},         {"items", f_items},       {"join", f_join},         {"last", f_last},
      {"length", f_length},   {"list", f_list},         {"lower", f_lower},       {"map", f_map},
      {"max", f_max},         {"min", f_min},           {"reject", f_reject},     {"rejectattr", f_rejectattr},
      {"replace", f_replace}, {"reverse", f_reverse},   {"round", f_round},       {"safe", f_safe},
      {"select", f_select},   {"selectattr", f_selectattr}, {"sort", f_sort},     {"string", f_string},
      {"sum", f_sum},         {"title", f_title},       {"tojson", f_tojson},     {"trim", f_trim},
      {"truncate", f_truncate}, {"unique", f_unique},   {"upper", f_upper},       {"wordcount", f_wordcount},
  };
  return table;
}

const std::unordered_map<std::string, Builtin>& tests() {
  static const std::unordered_map<std::string, Builtin> table = {
      {"boolean", t_boolean}, {"callable", t_callable}, {"defined", t_defined},   {"divisibleby", t_divisibleby},
      {"eq", t_eq},           {"equalto", t_eq},        {"==", t_eq},             {"escaped", t_escaped},
      {"even", t_even},       {"false", t_false},       {"filter", t_filter},     {"float", t_float},
      {"ge", t_ge},           {">=", t_ge},             {"gt", t_gt},             {">", t_gt},
      {"greaterthan", t_gt},  {"in", t_in},             {"integer", t_integer},   {"iterable", t_iterable},
      {"le", t_le},           {"<=", t_le},             {"lessthan", t_lt},       {"lower", t_lower},
      {"lt", t_lt},           {"<", t_lt},              {"mapping", t_mapping},   {"ne", t_ne},
      {"!=", t_ne},           {"none", t_none},         {"number", t_number},     {"odd", t_odd},
      {"sameas", t_sameas},   {"sequence", t_sequence}, {"string", t_string},     {"test", t_test},
      {"true", t_true},       {"undefined", t_undefined}, {"upper", t_upper},
  };
  return table;
}

}  // namespace

Builtin find_filter(const std::string& name) {
  const auto& t = filters();
  auto it = t.find(name);
  return it == t.end() ? nullptr : it->second;
}

Builtin find_test(const std::string& name) {
  const auto& t = tests();
  auto it = t.find(name);
  return it == t.end() ? nullptr : it->second;
}

const std::vector<std::pair<std::string, Value>>& globals() {
  static const std::vector<std::pair<std::string, Value>> table = {
      {"range", make_function("range", g_range)},
      {"dict", make_function("dict", g_dict)},
      {"namespace", make_function("namespace", g_namespace)},
      {"raise_exception", make_function("raise_exception", g_raise_exception)},
      {"strftime_now", make_function("strftime_now", g_strftime_now)},
      {"joiner", make_function("joiner", g_joiner)},
  };
  return table;
}

}  // namespace e3::jinja::detail
