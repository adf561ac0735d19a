#include "io/jinja/strings.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace e3::jinja::detail {

namespace {

struct Cps {
  std::vector<uint32_t> cp;
  std::vector<size_t> off;  // byte offset of each code point, plus the end
};

Cps decode(const std::string& s) {
  Cps c;
  c.cp.reserve(s.size());
  c.off.reserve(s.size() + 1);
  size_t len = 0;
  for (size_t i = 0; i < s.size(); i += len) {
    c.off.push_back(i);
    c.cp.push_back(decode_at(s, i, &len));
  }
  c.off.push_back(s.size());
  return c;
}

// Maps each code point through `f`, the result carrying the source code point's tag.
template <class F>
Text map_code_points(const Text& s, F f) {
  Text out;
  std::string piece;
  const std::string& str = s.str();
  size_t len = 0;
  for (size_t i = 0, k = 0; i < str.size(); i += len, ++k) {
    const uint32_t cp = decode_at(str, i, &len);
    piece.clear();
    f(piece, cp, k);
    out.append(piece, s.tag_at(i));
  }
  return out;
}

std::vector<uint32_t> char_set(const Value* chars) {
  std::vector<uint32_t> set;
  if (!chars || chars->is_none()) return set;
  if (chars->kind != Kind::Str) throw JinjaError("strip arg must be None or str");
  return decode(chars->str()).cp;
}

int64_t to_index(const Value* v, int64_t def) {
  if (!v || v->is_none()) return def;
  if (!v->is_int_like()) throw JinjaError("'" + type_name(*v) + "' object cannot be interpreted as an integer");
  return v->as_int();
}

}  // namespace

Text py_strip(const Text& s, const Value* chars, bool left, bool right) {
  const std::vector<uint32_t> set = char_set(chars);
  const bool whitespace = !chars || chars->is_none();
  auto strip_it = [&](uint32_t cp) {
    return whitespace ? is_space(cp) : std::find(set.begin(), set.end(), cp) != set.end();
  };
  const Cps c = decode(s.str());
  size_t b = 0, e = c.cp.size();
  if (left)
    while (b < e && strip_it(c.cp[b])) ++b;
  if (right)
    while (e > b && strip_it(c.cp[e - 1])) --e;
  return s.slice(c.off[b], c.off[e]);
}

std::vector<Value> py_split(const Text& s, const Value* sep, int64_t maxsplit, bool from_right) {
  std::vector<Value> out;
  const std::string& str = s.str();
  if (sep && !sep->is_none()) {
    if (sep->kind != Kind::Str) throw JinjaError("must be str or None, not " + type_name(*sep));
    const std::string& d = sep->str();
    if (d.empty()) throw JinjaError("empty separator");
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
        const size_t hit = str.find(d, pos);
        if (hit == std::string::npos) break;
        out.push_back(Value::string(s.slice(pos, hit)));
        pos = hit + d.size();
      }
      out.push_back(Value::string(s.slice(pos, str.size())));
    } else {
      size_t end = str.size();
      std::vector<Value> rev;
      while (maxsplit < 0 || static_cast<int64_t>(rev.size()) < maxsplit) {
        if (end < d.size()) break;
        const size_t hit = str.rfind(d, end - d.size());
        if (hit == std::string::npos) break;
        rev.push_back(Value::string(s.slice(hit + d.size(), end)));
        end = hit;
      }
      rev.push_back(Value::string(s.slice(0, end)));
      out.assign(rev.rbegin(), rev.rend());
    }
    return out;
  }
  const Cps c = decode(str);
  const size_t n = c.cp.size();
  if (!from_right) {
    size_t k = 0;
    while (true) {
      while (k < n && is_space(c.cp[k])) ++k;
      if (k >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
        out.push_back(Value::string(s.slice(c.off[k], str.size())));
        break;
      }
      size_t j = k;
      while (j < n && !is_space(c.cp[j])) ++j;
      out.push_back(Value::string(s.slice(c.off[k], c.off[j])));
      k = j;
    }
  } else {
    size_t k = n;
    std::vector<Value> rev;
    while (true) {
      while (k > 0 && is_space(c.cp[k - 1])) --k;
      if (k == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(rev.size()) >= maxsplit) {
        rev.push_back(Value::string(s.slice(0, c.off[k])));
        break;
      }
      size_t j = k;
      while (j > 0 && !is_space(c.cp[j - 1])) --j;
      rev.push_back(Value::string(s.slice(c.off[j], c.off[k])));
      k = j;
    }
    out.assign(rev.rbegin(), rev.rend());
  }
  return out;
}

std::vector<Value> py_splitlines(const Text& s, bool keepends) {
  std::vector<Value> out;
  const Cps c = decode(s.str());
  size_t start = 0;
  for (size_t k = 0; k < c.cp.size(); ++k) {
    if (!is_line_break(c.cp[k])) continue;
    size_t end = k + 1;
    if (c.cp[k] == '\r' && k + 1 < c.cp.size() && c.cp[k + 1] == '\n') end = k + 2;
    out.push_back(Value::string(s.slice(c.off[start], c.off[keepends ? end : k])));
    start = end;
    k = end - 1;
  }
  if (start < c.cp.size()) out.push_back(Value::string(s.slice(c.off[start], s.size())));
  return out;
}

Text py_replace(const Text& s, const Text& old, const Text& repl, int64_t count, const Interp& in) {
  Text out;
  const std::string& str = s.str();
  if (old.empty()) {
    const Cps c = decode(str);
    int64_t done = 0;
    for (size_t k = 0; k <= c.cp.size(); ++k) {
      if (count < 0 || done < count) {
        out.append(repl);
        ++done;
      }
      if (k < c.cp.size()) out.append(s, c.off[k], c.off[k + 1]);
      in.check_size(out.size());
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = str.find(old.str(), pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit);
    out.append(repl);
    in.check_size(out.size());
    pos = hit + old.size();
    ++done;
  }
  out.append(s, pos, str.size());
  return out;
}

Text py_upper(const Text& s) {
  return map_code_points(s, [](std::string& o, uint32_t cp, size_t) { append_upper(o, cp); });
}
Text py_lower(const Text& s) {
  return map_code_points(s, [](std::string& o, uint32_t cp, size_t) { append_lower(o, cp); });
}

Text py_title(const Text& s) {
  bool prev_cased = false;
  return map_code_points(s, [&](std::string& o, uint32_t cp, size_t) {
    if (is_upper(cp)) {
      if (prev_cased) append_lower(o, cp);
      else append_utf8(o, cp);
      prev_cased = true;
    } else if (is_lower(cp)) {
      if (!prev_cased) append_upper(o, cp);
      else append_utf8(o, cp);
      prev_cased = true;
    } else {
      append_utf8(o, cp);
      prev_cased = false;
    }
  });
}

Text py_capitalize(const Text& s) {
  return map_code_points(s, [](std::string& o, uint32_t cp, size_t k) {
    if (k == 0) append_upper(o, cp);
    else append_lower(o, cp);
  });
}

Text py_center(const Text& s, int64_t width, const Text& fill) {
  const int64_t n = static_cast<int64_t>(count_code_points(s.str()));
  if (width <= n) return s;
  const int64_t marg = width - n;
  const int64_t left = marg / 2 + (marg & width & 1);
  Text out;
  for (int64_t k = 0; k < left; ++k) out.append(fill);
  out.append(s);
  for (int64_t k = 0; k < marg - left; ++k) out.append(fill);
  return out;
}

// ---- formatting

namespace {

struct Spec {
  uint32_t fill = ' ';
  char align = 0;  // < > ^ =
  char sign = '-';
  bool alt = false, zero = false;
  int64_t width = -1, precision = -1;
  char grouping = 0;
  char type = 0;
};

// A width or precision in a format spec; capped so that a long digit run cannot overflow (the
// caller then refuses what exceeds the output limit).
int64_t read_count(std::string_view s, size_t& i) {
  int64_t v = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) v = std::min<int64_t>(v * 10 + (s[i++] - '0'), int64_t{1} << 40);
  return v;
}

void check_spec(const Spec& spec, const Interp& in) {
  in.check_size(static_cast<size_t>(std::max<int64_t>(spec.width, 0)));
  in.check_size(static_cast<size_t>(std::max<int64_t>(spec.precision, 0)));
}

Text pad(const Text& body, const Spec& spec, char default_align) {
  const int64_t n = static_cast<int64_t>(count_code_points(body.str()));
  if (spec.width <= n) return body;
  std::string fill;
  append_utf8(fill, spec.fill);
  const int64_t marg = spec.width - n;
  const char align = spec.align ? spec.align : default_align;
  int64_t left = 0;
  if (align == '>') left = marg;
  else if (align == '^') left = marg / 2;
  Text out;
  for (int64_t k = 0; k < left; ++k) out.append(fill);
  out.append(body);
  for (int64_t k = 0; k < marg - left; ++k) out.append(fill);
  return out;
}

std::string group_digits(const std::string& digits, char sep) {
  std::string out;
  const size_t n = digits.size();
  for (size_t k = 0; k < n; ++k) {
    out += digits[k];
    if (sep && (n - k - 1) % 3 == 0 && k + 1 < n) out += sep;
  }
  return out;
}

// A number formatted for `spec` (str.format's mini-language; % formatting maps onto it).
Text format_number(const Value& v, Spec spec) {
  std::string body;
  bool negative = false;
  char type = spec.type;
  if (type == 'c') {
    std::string c;
    append_utf8(c, static_cast<uint32_t>(v.as_int()));
    return pad(Text(c, v.tag), spec, '<');
  }
  if (v.kind != Kind::Float && (type == 0 || type == 'd' || type == 'n' || type == 'x' || type == 'X' || type == 'o' || type == 'b')) {
    int64_t x = v.as_int();
    negative = x < 0;
    uint64_t u = negative ? 0 - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
    const int base = (type == 'x' || type == 'X') ? 16 : type == 'o' ? 8 : type == 'b' ? 2 : 10;
    if (u == 0) body = "0";
    while (u) {
      const int d = static_cast<int>(u % base);
      body += static_cast<char>(d < 10 ? '0' + d : (type == 'X' ? 'A' : 'a') + d - 10);
      u /= base;
    }
    std::reverse(body.begin(), body.end());
    if (base == 10) body = group_digits(body, spec.grouping);
    if (spec.alt && base != 10) body = std::string("0") + (type == 'X' ? 'X' : type) + body;
  } else {
    double x = v.as_float();
    negative = std::signbit(x) && !std::isnan(x);
    x = std::fabs(x);
    if (type == 0 && spec.precision < 0) {
      body = float_repr(x);
    } else {
      if (type == 0) type = 'g';
      if (type == 'n') type = 'g';
      const bool percent = type == '%';
      if (percent) x *= 100;
      const int prec = spec.precision < 0 ? 6 : static_cast<int>(spec.precision);
      char fmt[16];
      std::snprintf(fmt, sizeof fmt, "%%%s.*%c", spec.alt ? "#" : "", percent ? 'f' : type);
      body.assign(static_cast<size_t>(std::snprintf(nullptr, 0, fmt, prec, x)) + 1, '\0');
      std::snprintf(body.data(), body.size(), fmt, prec, x);
      body.pop_back();
      if (std::isinf(x) || std::isnan(x)) {
        std::transform(body.begin(), body.end(), body.begin(), [&](char ch) {
          return (type >= 'A' && type <= 'Z') ? static_cast<char>(std::toupper(ch)) : static_cast<char>(std::tolower(ch));
        });
      }
      if (spec.grouping) {
        const size_t dot = body.find_first_of(".eE");
        body = group_digits(body.substr(0, dot), spec.grouping) + (dot == std::string::npos ? "" : body.substr(dot));
      }
      if (percent) body += '%';
    }
  }
  std::string sign;
  if (negative) sign = "-";
  else if (spec.sign == '+') sign = "+";
  else if (spec.sign == ' ') sign = " ";
  if (spec.zero && !spec.align) {
    spec.fill = '0';
    spec.align = '=';
  }
  if (spec.align == '=') {
    const int64_t n = static_cast<int64_t>(sign.size() + body.size());
    std::string fill;
    for (int64_t k = n; k < spec.width; ++k) append_utf8(fill, spec.fill);
    return Text(sign + fill + body, v.tag);
  }
  return pad(Text(sign + body, v.tag), spec, '>');
}

Text format_value(const Value& v, const Spec& spec) {
  if (v.is_undefined()) fail_undefined(v);
  if (v.kind == Kind::Str || (!v.is_number() && spec.type == 0) || (spec.type == 's')) {
    if (spec.type && spec.type != 's') throw JinjaError(std::string("Unknown format code '") + spec.type + "' for object of type '" + type_name(v) + "'");
    Text t = to_text(v);
    if (spec.precision >= 0) {
      const auto off = code_point_offsets(t.str());
      if (static_cast<size_t>(spec.precision) + 1 < off.size()) t = t.slice(0, off[spec.precision]);
    }
    return pad(t, spec, '<');
  }
  if (v.kind == Kind::Bool && spec.type == 0) return pad(to_text(v), spec, '<');
  if (!v.is_number() || (spec.type && std::string_view("bcdoxXneEfFgG%").find(spec.type) == std::string_view::npos))
    throw JinjaError(std::string("Unknown format code '") + spec.type + "' for object of type '" + type_name(v) + "'");
  if (v.kind == Kind::Float && (spec.type == 'd' || spec.type == 'x' || spec.type == 'X' || spec.type == 'o' || spec.type == 'b' || spec.type == 'c'))
    throw JinjaError(std::string("Unknown format code '") + spec.type + "' for object of type 'float'");
  return format_number(v, spec);
}

Spec parse_format_spec(std::string_view s) {
  Spec spec;
  size_t i = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  size_t len = 0;
  if (!s.empty()) {
    const uint32_t first = decode_at(s, 0, &len);
    if (len < s.size() && is_align(s[len])) {
      spec.fill = first;
      spec.align = s[len];
      i = len + 1;
    } else if (is_align(s[0])) {
      spec.align = s[0];
      i = 1;
    }
  }
  if (i < s.size() && (s[i] == '+' || s[i] == '-' || s[i] == ' ')) spec.sign = s[i++];
  if (i < s.size() && s[i] == '#') spec.alt = true, ++i;
  if (i < s.size() && s[i] == '0') spec.zero = true, ++i;
  if (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
    spec.width = read_count(s, i);
  }
  if (i < s.size() && (s[i] == ',' || s[i] == '_')) spec.grouping = s[i++];
  if (i < s.size() && s[i] == '.') {
    ++i;
    spec.precision = 0;
    if (i >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i]))) throw JinjaError("Format specifier missing precision");
    spec.precision = read_count(s, i);
  }
  if (i < s.size()) spec.type = s[i++];
  if (i != s.size()) throw JinjaError("Invalid format specifier");
  return spec;
}

}  // namespace

Text percent_format(const Text& fmt, const Value& args, const Interp& in) {
  std::vector<Value> positional;
  const Value* mapping = nullptr;
  if (args.kind == Kind::List && args.is_tuple()) positional = args.items();
  else if (args.kind == Kind::Dict) mapping = &args;
  else positional.push_back(args);
  size_t next = 0;
  Text out;
  const std::string& s = fmt.str();
  size_t plain = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') continue;
    out.append(fmt, plain, i);
    size_t j = i + 1;
    if (j >= s.size()) throw JinjaError("incomplete format");
    if (s[j] == '%') {
      out.append(fmt, j, j + 1);
      plain = i = j;
      ++plain;
      continue;
    }
    const Value* arg = nullptr;
    if (s[j] == '(') {
      const size_t close = s.find(')', j);
      if (close == std::string::npos) throw JinjaError("incomplete format key");
      if (!mapping) throw JinjaError("format requires a mapping");
      arg = dict_find(*mapping, std::string_view(s).substr(j + 1, close - j - 1));
      if (!arg) throw JinjaError("'" + s.substr(j + 1, close - j - 1) + "'");
      j = close + 1;
    }
    Spec spec;
    bool left = false;
    for (; j < s.size() && std::string_view("-+ #0").find(s[j]) != std::string_view::npos; ++j) {
      if (s[j] == '-') left = true;
      else if (s[j] == '+') spec.sign = '+';
      else if (s[j] == ' ' && spec.sign != '+') spec.sign = ' ';
      else if (s[j] == '#') spec.alt = true;
      else spec.zero = true;
    }
    if (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) {
      spec.width = read_count(s, j);
    }
    if (j < s.size() && s[j] == '.') {
      ++j;
      spec.precision = read_count(s, j);
    }
    while (j < s.size() && (s[j] == 'h' || s[j] == 'l' || s[j] == 'L')) ++j;
    if (j >= s.size()) throw JinjaError("incomplete format");
    const char conv = s[j];
    if (!arg) {
      if (mapping) {
        arg = mapping;
      } else {
        if (next >= positional.size()) throw JinjaError("not enough arguments for format string");
        arg = &positional[next++];
      }
    }
    if (left) spec.align = '<';
    check_spec(spec, in);
    Text piece;
    if (conv == 's' || conv == 'r' || conv == 'a') {
      Text t;
      if (conv == 's') t = to_text(*arg);
      else append_repr(t, *arg);
      if (spec.precision >= 0) {
        const auto off = code_point_offsets(t.str());
        if (static_cast<size_t>(spec.precision) + 1 < off.size()) t = t.slice(0, off[spec.precision]);
      }
      spec.zero = false;
      piece = pad(t, spec, '>');
    } else {
      if (!arg->is_number()) throw JinjaError(std::string("%") + conv + " format: a real number is required, not " + type_name(*arg));
      if (spec.zero && left) spec.zero = false;
      Value num = *arg;
      if (conv == 'd' || conv == 'i' || conv == 'u') {
        spec.type = 'd';
        num = Value::integer(arg->kind == Kind::Float ? float_to_int(arg->f) : arg->as_int());
      } else if (conv == 'x' || conv == 'X' || conv == 'o' || conv == 'c') {
        if (arg->kind == Kind::Float) throw JinjaError(std::string("%") + conv + " format: an integer is required, not float");
        spec.type = conv;
      } else if (std::string_view("eEfFgG").find(conv) != std::string_view::npos) {
        spec.type = conv;
        num = Value::number(arg->as_float());
        if (spec.precision < 0) spec.precision = 6;
      } else {
        throw JinjaError(std::string("unsupported format character '") + conv + "'");
      }
      piece = format_number(num, spec);
    }
    out.append(piece);
    in.check_size(out.size());
    plain = j + 1;
    i = j;
  }
  out.append(fmt, plain, s.size());
  if (!mapping && next < positional.size()) throw JinjaError("not all arguments converted during string formatting");
  return out;
}

Text str_format(const Text& fmt, const CallArgs& args, Interp& in) {
  const std::string& s = fmt.str();
  Text out;
  size_t auto_index = 0, plain = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '}') {
      if (i + 1 < s.size() && s[i + 1] == '}') {
        out.append(fmt, plain, i + 1);
        plain = i + 2;
        ++i;
        continue;
      }
      throw JinjaError("Single '}' encountered in format string");
    }
    if (c != '{') continue;
    out.append(fmt, plain, i);
    if (i + 1 < s.size() && s[i + 1] == '{') {
      out.append(fmt, i, i + 1);
      plain = i + 2;
      ++i;
      continue;
    }
    const size_t close = s.find('}', i);
    if (close == std::string::npos) throw JinjaError("expected '}' before end of string");
    std::string field = s.substr(i + 1, close - i - 1);
    std::string spec_text;
    char conversion = 0;
    if (const size_t colon = field.find(':'); colon != std::string::npos) {
      spec_text = field.substr(colon + 1);
      field.resize(colon);
    }
    if (const size_t bang = field.find('!'); bang != std::string::npos) {
      if (bang + 2 != field.size()) throw JinjaError("expected ':' after conversion specifier");
      conversion = field[bang + 1];
      field.resize(bang);
    }
    size_t name_end = field.find_first_of(".[");
    std::string head = field.substr(0, name_end);
    Value v;
    if (head.empty()) {
      if (auto_index >= args.pos.size()) throw JinjaError("Replacement index " + std::to_string(auto_index) + " out of range for positional args tuple");
      v = args.pos[auto_index++];
    } else if (std::all_of(head.begin(), head.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
      const size_t k = std::stoul(head);
      if (k >= args.pos.size()) throw JinjaError("Replacement index " + head + " out of range for positional args tuple");
      v = args.pos[k];
    } else {
      const Value* kw = args.kwarg(head);
      if (!kw) throw JinjaError("'" + head + "'");
      v = *kw;
    }
    while (name_end != std::string::npos && name_end < field.size()) {
      if (field[name_end] == '.') {
        const size_t e = field.find_first_of(".[", name_end + 1);
        v = in.getattr(v, field.substr(name_end + 1, e == std::string::npos ? std::string::npos : e - name_end - 1));
        name_end = e;
      } else {
        const size_t e = field.find(']', name_end);
        if (e == std::string::npos) throw JinjaError("Missing ']' in format string");
        const std::string key = field.substr(name_end + 1, e - name_end - 1);
        const bool numeric = !key.empty() && std::all_of(key.begin(), key.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
        v = in.getitem(v, numeric ? Value::integer(std::stoll(key)) : Value::string(key));
        name_end = e + 1;
      }
    }
    if (conversion == 'r' || conversion == 'a') {
      Text t;
      append_repr(t, v);
      v = Value::string(std::move(t));
    } else if (conversion == 's') {
      v = Value::string(to_text(v));
    } else if (conversion) {
      throw JinjaError(std::string("Unknown conversion specifier ") + conversion);
    }
    const Spec spec = parse_format_spec(spec_text);
    check_spec(spec, in);
    out.append(format_value(v, spec));
    in.check_size(out.size());
    plain = close + 1;
    i = close;
  }
  out.append(fmt, plain, s.size());
  return out;
}

// ---- the str methods

namespace {

struct Params {
  Params(CallArgs& a, const char* method, std::initializer_list<const char*> names) : args(a), names_(names) {
    if (a.pos.size() > names_.size())
      throw JinjaError(std::string(method) + "() takes at most " + std::to_string(names_.size()) + " arguments (" +
                       std::to_string(a.pos.size()) + " given)");
    for (const auto& [k, v] : a.kw) {
      if (std::find_if(names_.begin(), names_.end(), [&](const char* n) { return k == n; }) == names_.end())
        throw JinjaError(std::string(method) + "() got an unexpected keyword argument '" + k + "'");
    }
  }
  const Value* get(size_t k) const {
    if (k < args.pos.size()) return &args.pos[k];
    return args.kwarg(names_[k]);
  }
  CallArgs& args;
  std::vector<const char*> names_;
};

const Text& need_str(const Value* v, const char* what) {
  if (!v || v->kind != Kind::Str) throw JinjaError(std::string(what) + " must be str, not " + (v ? type_name(*v) : "nothing"));
  return v->text();
}

// s[start:end] in code points, as the start/end arguments of find, count, startswith... mean.
std::pair<size_t, size_t> byte_window(const std::string& s, const Value* start, const Value* end) {
  if ((!start || start->is_none()) && (!end || end->is_none())) return {0, s.size()};
  const auto off = code_point_offsets(s);
  const int64_t n = static_cast<int64_t>(off.size()) - 1;
  auto clamp = [&](int64_t x) {
    if (x < 0) x += n;
    return std::clamp<int64_t>(x, 0, n);
  };
  const int64_t b = clamp(to_index(start, 0)), e = clamp(to_index(end, n));
  if (b > e) return {off[b], off[b]};
  return {off[b], off[e]};
}

int64_t cp_index(const std::string& s, size_t byte) { return static_cast<int64_t>(count_code_points(std::string_view(s).substr(0, byte))); }

bool all_cps(const std::string& s, bool (*pred)(uint32_t)) {
  if (s.empty()) return false;
  size_t len = 0;
  for (size_t i = 0; i < s.size(); i += len)
    if (!pred(decode_at(s, i, &len))) return false;
  return true;
}

bool affix_match(const Value& self, const Value* what, const Value* start, const Value* end, bool prefix) {
  const std::string& s = self.str();
  const auto [b, e] = byte_window(s, start, end);
  const std::string_view window = std::string_view(s).substr(b, e - b);
  auto one = [&](const Value& v) {
    if (v.kind != Kind::Str)
      throw JinjaError(std::string(prefix ? "startswith" : "endswith") + " first arg must be str or a tuple of str, not " + type_name(v));
    const std::string& x = v.str();
    if (x.size() > window.size()) return false;
    return prefix ? window.substr(0, x.size()) == x : window.substr(window.size() - x.size()) == x;
  };
  if (!what) throw JinjaError("startswith/endswith takes at least 1 argument");
  if (what->kind == Kind::List && what->is_tuple()) {
    for (const auto& v : what->items())
      if (one(v)) return true;
    return false;
  }
  return one(*what);
}

const char* const kStrMethods[] = {
    "capitalize", "casefold", "center", "count", "endswith", "find", "format", "index", "isalnum", "isalpha",
    "isascii", "isdecimal", "isdigit", "islower", "isnumeric", "isspace", "istitle", "isupper", "join", "ljust",
    "lower", "lstrip", "partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust",
    "rpartition", "rsplit", "rstrip", "split", "splitlines", "startswith", "strip", "swapcase", "title", "upper",
    "zfill", "encode", "expandtabs", "format_map", "isidentifier", "isprintable", "maketrans", "translate"};

}  // namespace

bool is_str_method(const std::string& name) {
  for (const char* m : kStrMethods)
    if (name == m) return true;
  return false;
}

Value str_method(Interp& in, const Value& self, const std::string& name, CallArgs& args, bool* found) {
  *found = true;
  const Text& t = self.text();
  const std::string& s = t.str();
  const char* m = name.c_str();
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    Params p(args, m, {"chars"});
    return Value::string(py_strip(t, p.get(0), name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    Params p(args, m, {"sep", "maxsplit"});
    return Value::list(py_split(t, p.get(0), to_index(p.get(1), -1), name == "rsplit"));
  }
  if (name == "splitlines") {
    Params p(args, m, {"keepends"});
    return Value::list(py_splitlines(t, p.get(0) && truthy(*p.get(0))));
  }
  if (name == "startswith" || name == "endswith") {
    Params p(args, m, {"prefix", "start", "end"});
    return Value::boolean(affix_match(self, p.get(0), p.get(1), p.get(2), name == "startswith"));
  }
  if (name == "replace") {
    Params p(args, m, {"old", "new", "count"});
    return Value::string(py_replace(t, need_str(p.get(0), "replace() argument 1"), need_str(p.get(1), "replace() argument 2"),
                                    to_index(p.get(2), -1), in));
  }
  if (name == "upper") return Value::string(py_upper(t));
  if (name == "lower" || name == "casefold") return Value::string(py_lower(t));
  if (name == "title") return Value::string(py_title(t));
  if (name == "capitalize") return Value::string(py_capitalize(t));
  if (name == "swapcase")
    return Value::string(map_code_points(t, [](std::string& o, uint32_t cp, size_t) {
      if (is_upper(cp)) append_lower(o, cp);
      else if (is_lower(cp)) append_upper(o, cp);
      else append_utf8(o, cp);
    }));
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    Params p(args, m, {"sub", "start", "end"});
    const std::string& sub = need_str(p.get(0), "must be str").str();
    const auto [b, e] = byte_window(s, p.get(1), p.get(2));
    const std::string_view window = std::string_view(s).substr(b, e - b);
    if (name == "count") {
      if (sub.empty()) return Value::integer(static_cast<int64_t>(count_code_points(window)) + 1);
      int64_t n = 0;
      for (size_t pos = window.find(sub); pos != std::string_view::npos; pos = window.find(sub, pos + sub.size())) ++n;
      return Value::integer(n);
    }
    const size_t hit = (name[0] == 'r') ? window.rfind(sub) : window.find(sub);
    if (hit == std::string_view::npos) {
      if (name == "index" || name == "rindex") throw JinjaError("substring not found");
      return Value::integer(-1);
    }
    return Value::integer(cp_index(s, b + hit));
  }
  if (name == "join") {
    Params p(args, m, {"iterable"});
    if (!p.get(0)) throw JinjaError("join() takes exactly one argument (0 given)");
    const std::vector<Value> items = in.iterate(*p.get(0));
    Text out;
    for (size_t k = 0; k < items.size(); ++k) {
      if (items[k].kind != Kind::Str)
        throw JinjaError("sequence item " + std::to_string(k) + ": expected str instance, " + type_name(items[k]) + " found");
      if (k) out.append(t);
      out.append(items[k].text());
      in.check_size(out.size());
    }
    return Value::string(std::move(out));
  }
  if (name == "center" || name == "ljust" || name == "rjust") {
    Params p(args, m, {"width", "fillchar"});
    const int64_t width = to_index(p.get(0), 0);
    in.check_size(static_cast<size_t>(std::max<int64_t>(width, 0)));
    const Text fill = p.get(1) ? need_str(p.get(1), "fillchar") : Text(" ");
    if (name == "center") return Value::string(py_center(t, width, fill));
    const int64_t n = static_cast<int64_t>(count_code_points(s));
    Text out;
    if (name == "rjust")
      for (int64_t k = n; k < width; ++k) out.append(fill);
    out.append(t);
    if (name == "ljust")
      for (int64_t k = n; k < width; ++k) out.append(fill);
    return Value::string(std::move(out));
  }
  if (name == "zfill") {
    Params p(args, m, {"width"});
    const int64_t width = to_index(p.get(0), 0);
    in.check_size(static_cast<size_t>(std::max<int64_t>(width, 0)));
    const int64_t n = static_cast<int64_t>(count_code_points(s));
    if (width <= n) return self;
    Text out;
    size_t body = 0;
    if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
      out.append(t, 0, 1);
      body = 1;
    }
    out.append(std::string(static_cast<size_t>(width - n), '0'));
    out.append(t, body, s.size());
    return Value::string(std::move(out));
  }
  if (name == "partition" || name == "rpartition") {
    Params p(args, m, {"sep"});
    const std::string& sep = need_str(p.get(0), "must be str").str();
    if (sep.empty()) throw JinjaError("empty separator");
    const size_t hit = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (hit == std::string::npos) {
      if (name == "partition") return Value::list({self, Value::string(""), Value::string("")}, true);
      return Value::list({Value::string(""), Value::string(""), self}, true);
    }
    return Value::list({Value::string(t.slice(0, hit)), Value::string(t.slice(hit, hit + sep.size())),
                        Value::string(t.slice(hit + sep.size(), s.size()))},
                       true);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    Params p(args, m, {"affix"});
    const std::string& a = need_str(p.get(0), "must be str").str();
    if (name == "removeprefix" && s.compare(0, a.size(), a) == 0) return Value::string(t.slice(a.size(), s.size()));
    if (name == "removesuffix" && a.size() <= s.size() && !a.empty() && s.compare(s.size() - a.size(), a.size(), a) == 0)
      return Value::string(t.slice(0, s.size() - a.size()));
    return self;
  }
  if (name == "format") return Value::string(str_format(t, args, in));
  if (name == "isalpha") return Value::boolean(all_cps(s, is_alpha));
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") return Value::boolean(all_cps(s, is_digit));
  if (name == "isalnum") return Value::boolean(all_cps(s, [](uint32_t cp) { return is_alpha(cp) || is_digit(cp); }));
  if (name == "isspace") return Value::boolean(all_cps(s, is_space));
  if (name == "isascii") return Value::boolean(std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }));
  if (name == "islower" || name == "isupper") {
    bool cased = false, ok = true;
    size_t len = 0;
    for (size_t i = 0; i < s.size(); i += len) {
      const uint32_t cp = decode_at(s, i, &len);
      if (is_upper(cp)) {
        cased = true;
        if (name == "islower") ok = false;
      } else if (is_lower(cp)) {
        cased = true;
        if (name == "isupper") ok = false;
      }
    }
    return Value::boolean(cased && ok);
  }
  if (name == "istitle") return Value::boolean(!s.empty() && py_title(t).str() == s && (py_lower(t).str() != s || py_upper(t).str() != s));
  if (is_str_method(name)) throw JinjaError("str." + name + "() is not supported by this interpreter");
  *found = false;
  return Value();
}

}  // namespace e3::jinja::detail
