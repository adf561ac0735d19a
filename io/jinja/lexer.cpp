#include "io/jinja/lexer.h"

#include <cstdint>
#include <cstring>

#include "core/error.h"
#include "io/jinja/text.h"

namespace e3::jinja::detail {

namespace {

size_t space_len(std::string_view s, size_t i) {
  size_t len = 0;
  const uint32_t cp = decode_at(s, i, &len);
  return is_space(cp) ? len : 0;
}

bool all_space(std::string_view s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size();) {
    const size_t n = space_len(s, i);
    if (!n) return false;
    i += n;
  }
  return true;
}

size_t skip_space(std::string_view s, size_t i) {
  while (i < s.size()) {
    const size_t n = space_len(s, i);
    if (!n) break;
    i += n;
  }
  return i;
}

std::string normalize(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
  return out;
}

bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_ident(char c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }
bool is_dig(char c) { return c >= '0' && c <= '9'; }

class Lexer {
 public:
  Lexer(std::string src, const std::string& name) : s_(std::move(src)), name_(name) {}

  std::vector<Token> run() {
    size_t pos = 0;
    while (pos < s_.size()) {
      const size_t start = find_tag(pos);
      if (start == std::string::npos) {
        emit_data(pos, s_.size());
        break;
      }
      const char kind = s_[start + 1];
      const char sign = start + 2 < s_.size() ? s_[start + 2] : '\0';
      size_t raw_body = 0;
      const bool raw = kind == '%' && is_raw_begin(start, &raw_body);
      std::string_view text(s_.data() + pos, start - pos);
      text = strip_before(text, sign, kind != '{', pos);
      emit_data_text(text, pos);
      const size_t inner = start + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (raw) {
        pos = lex_raw(raw_body, start);
      } else if (kind == '#') {
        pos = lex_comment(inner, start);
      } else {
        pos = lex_tag(kind, inner, start);
      }
    }
    Token eof;
    eof.type = Tok::Eof;
    position(s_.size(), &eof.line, &eof.col);
    tokens_.push_back(eof);
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(size_t at, const std::string& what) {
    int line = 1, col = 1;
    position(at, &line, &col);
    E3_THROW(ErrorKind::Input, "{}:{}:{}: {}", printable(name_), line, col, printable(what));
  }

  // Line and column (in code points) of byte `at`; counted forward from the last position asked
  // for, so that lexing stays linear however long a line is.
  void position(size_t at, int* line, int* col) {
    if (at < pos_cache_) {
      pos_cache_ = 0;
      line_cache_ = 1;
      col_cache_ = 1;
    }
    while (pos_cache_ < at && pos_cache_ < s_.size()) {
      if (s_[pos_cache_] == '\n') {
        ++line_cache_;
        col_cache_ = 1;
        ++pos_cache_;
        continue;
      }
      size_t len = 0;
      decode_at(s_, pos_cache_, &len);
      pos_cache_ += pos_cache_ + len <= at ? len : 1;
      ++col_cache_;
    }
    *line = line_cache_;
    *col = col_cache_;
  }

  size_t find_tag(size_t pos) const {
    for (size_t i = s_.find('{', pos); i != std::string::npos; i = s_.find('{', i + 1)) {
      if (i + 1 < s_.size() && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  bool is_raw_begin(size_t start, size_t* body) const {
    size_t i = start + 2;
    if (i < s_.size() && (s_[i] == '-' || s_[i] == '+')) ++i;
    i = skip_space(s_, i);
    if (s_.compare(i, 3, "raw") != 0) return false;
    i = skip_space(s_, i + 3);
    if (s_.compare(i, 3, "-%}") == 0) {
      *body = skip_space(s_, i + 3);
      return true;
    }
    if (s_.compare(i, 2, "%}") == 0) {
      *body = i + 2;
      return true;
    }
    return false;
  }

  // Whitespace control of the text before a tag: "-" strips all whitespace; otherwise, before a
  // block or comment tag, lstrip_blocks strips the spaces between the line start and the tag.
  std::string_view strip_before(std::string_view text, char sign, bool block_or_comment, size_t text_pos) const {
    if (sign == '-') return rstrip_space(text);
    if (sign == '+' || !block_or_comment) return text;
    const size_t nl = text.rfind('\n');
    const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
    const bool line_starting = text_pos == 0 || s_[text_pos - 1] == '\n';
    if ((l_pos > 0 || line_starting) && all_space(text.substr(l_pos))) return text.substr(0, l_pos);
    return text;
  }

  void emit_data(size_t b, size_t e) { emit_data_text(std::string_view(s_).substr(b, e - b), b); }
  void emit_data_text(std::string_view text, size_t at) {
    if (text.empty()) return;
    Token t;
    t.type = Tok::Data;
    t.value = std::string(text);
    position(at, &t.line, &t.col);
    tokens_.push_back(std::move(t));
  }

  size_t lex_raw(size_t body, size_t start) {
    for (size_t i = s_.find("{%", body); i != std::string::npos; i = s_.find("{%", i + 1)) {
      size_t j = i + 2;
      const char sign = j < s_.size() ? s_[j] : '\0';
      if (sign == '-' || sign == '+') ++j;
      j = skip_space(s_, j);
      if (s_.compare(j, 6, "endraw") != 0) continue;
      j = skip_space(s_, j + 6);
      size_t end;
      if (s_.compare(j, 3, "+%}") == 0) end = j + 3;
      else if (s_.compare(j, 3, "-%}") == 0) end = skip_space(s_, j + 3);
      else if (s_.compare(j, 2, "%}") == 0) end = j + 2 + (j + 2 < s_.size() && s_[j + 2] == '\n' ? 1 : 0);
      else continue;
      std::string_view text(s_.data() + body, i - body);
      text = strip_before(text, sign, true, body);
      emit_data_text(text, body);
      return end;
    }
    fail(start, "missing end of raw directive");
  }

  size_t lex_comment(size_t inner, size_t start) {
    const size_t close = s_.find("#}", inner);
    if (close == std::string::npos) fail(start, "missing end of comment tag");
    if (close > inner && s_[close - 1] == '-') return skip_space(s_, close + 2);
    if (close > inner && s_[close - 1] == '+') return close + 2;
    return close + 2 + (close + 2 < s_.size() && s_[close + 2] == '\n' ? 1 : 0);
  }

  void push(Tok type, size_t at, std::string value = {}) {
    Token t;
    t.type = type;
    t.value = std::move(value);
    position(at, &t.line, &t.col);
    tokens_.push_back(std::move(t));
  }

  size_t lex_tag(char kind, size_t i, size_t start) {
    const bool var = kind == '{';
    push(var ? Tok::VarBegin : Tok::BlockBegin, start);
    std::vector<char> brackets;
    while (true) {
      // Whitespace inside a tag, newlines included.
      while (i < s_.size()) {
        const size_t n = space_len(s_, i);
        if (!n) break;
        i += n;
      }
      if (i >= s_.size()) fail(start, var ? "unexpected end of template: the '{{' is never closed"
                                          : "unexpected end of template: the '{%' is never closed");
      if (brackets.empty()) {
        if (var) {
          if (s_.compare(i, 3, "-}}") == 0) {
            push(Tok::VarEnd, i);
            return skip_space(s_, i + 3);
          }
          if (s_.compare(i, 2, "}}") == 0) {
            push(Tok::VarEnd, i);
            return i + 2;
          }
        } else {
          if (s_.compare(i, 3, "-%}") == 0) {
            push(Tok::BlockEnd, i);
            return skip_space(s_, i + 3);
          }
          if (s_.compare(i, 3, "+%}") == 0) {
            push(Tok::BlockEnd, i);
            return i + 3;
          }
          if (s_.compare(i, 2, "%}") == 0) {
            push(Tok::BlockEnd, i);
            return i + 2 + (i + 2 < s_.size() && s_[i + 2] == '\n' ? 1 : 0);
          }
        }
      }
      const char c = s_[i];
      if (is_dig(c)) {
        i = lex_number(i);
      } else if (is_ident_start(c)) {
        size_t j = i;
        while (j < s_.size() && is_ident(s_[j])) ++j;
        push(Tok::Name, i, s_.substr(i, j - i));
        i = j;
      } else if (c == '\'' || c == '"') {
        i = lex_string(i);
      } else {
        static const char* const kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
                                           "]",  "(",  ")",  "{",  "}",  ">",  "<", "=", ".", ":", "|", ",", ";"};
        const char* op = nullptr;
        for (const char* o : kOps) {
          if (s_.compare(i, std::strlen(o), o) == 0) {
            op = o;
            break;
          }
        }
        if (!op) {
          size_t len = 0;
          decode_at(s_, i, &len);
          fail(i, "unexpected char '" + s_.substr(i, len) + "'");
        }
        if (*op == '(' || *op == '[' || *op == '{') {
          brackets.push_back(*op);
        } else if (*op == ')' || *op == ']' || *op == '}') {
          const char open = *op == ')' ? '(' : (*op == ']' ? '[' : '{');
          if (brackets.empty()) fail(i, std::string("unexpected '") + op + "'");
          if (brackets.back() != open)
            fail(i, std::string("unexpected '") + op + "', expected '" +
                        (brackets.back() == '(' ? ")" : (brackets.back() == '[' ? "]" : "}")) + "'");
          brackets.pop_back();
        }
        push(Tok::Op, i, op);
        i += std::strlen(op);
      }
    }
  }

  size_t digits(size_t i) const {  // (\d+_)*\d+
    size_t j = i;
    while (j < s_.size() && (is_dig(s_[j]) || (s_[j] == '_' && j + 1 < s_.size() && is_dig(s_[j + 1])))) ++j;
    return j;
  }

  // 0b.., 0o.., 0x.. as jinja2's integer_re (underscores between digits allowed).
  int digit_in(char c, int base) const {
    const int d = hex_value(c);
    return d >= 0 && d < base ? d : -1;
  }
  size_t lex_number(size_t i) {
    const int base = s_[i] != '0' || i + 2 >= s_.size() ? 10
                     : (s_[i + 1] | 0x20) == 'x' ? 16 : (s_[i + 1] | 0x20) == 'o' ? 8 : (s_[i + 1] | 0x20) == 'b' ? 2 : 10;
    if (base != 10 && digit_in(s_[i + 2], base) >= 0) {
      size_t j = i + 2;
      int64_t v = 0;
      while (j < s_.size() && (digit_in(s_[j], base) >= 0 || (s_[j] == '_' && j + 1 < s_.size() && digit_in(s_[j + 1], base) >= 0))) {
        if (s_[j] != '_') {
          if (v > (INT64_MAX - base) / base) fail(i, "number out of range: " + std::string(s_.substr(i, j - i)));
          v = v * base + digit_in(s_[j], base);
        }
        ++j;
      }
      Token t;
      t.type = Tok::Int;
      position(i, &t.line, &t.col);
      t.value = std::string(s_.substr(i, j - i));
      t.ival = v;
      tokens_.push_back(std::move(t));
      return j;
    }
    size_t j = digits(i);
    bool is_float = false;
    if (j + 1 < s_.size() && s_[j] == '.' && is_dig(s_[j + 1])) {
      j = digits(j + 1);
      is_float = true;
    }
    if (j < s_.size() && (s_[j] == 'e' || s_[j] == 'E')) {
      size_t k = j + 1;
      if (k < s_.size() && (s_[k] == '+' || s_[k] == '-')) ++k;
      if (k < s_.size() && is_dig(s_[k])) {
        j = digits(k);
        is_float = true;
      }
    }
    std::string text;
    for (size_t k = i; k < j; ++k)
      if (s_[k] != '_') text += s_[k];
    Token t;
    t.type = is_float ? Tok::Float : Tok::Int;
    position(i, &t.line, &t.col);
    t.value = text;
    try {
      if (is_float) t.fval = std::stod(text);
      else t.ival = std::stoll(text);
    } catch (const std::exception&) {
      fail(i, "number out of range: " + text);
    }
    tokens_.push_back(std::move(t));
    return j;
  }

  static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // A string literal, unescaped as Python's unicode-escape codec does.
  size_t lex_string(size_t i) {
    const char quote = s_[i];
    std::string out;
    size_t j = i + 1;
    while (true) {
      if (j >= s_.size()) fail(i, "unexpected end of string");
      const char c = s_[j];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        ++j;
        continue;
      }
      if (j + 1 >= s_.size()) fail(i, "unexpected end of string");
      const char e = s_[j + 1];
      j += 2;
      switch (e) {
        case '\n': break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x':
        case 'u':
        case 'U': {
          const int n = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
          uint32_t cp = 0;
          for (int k = 0; k < n; ++k) {
            const int h = j + k < s_.size() ? hex_value(s_[j + k]) : -1;
            if (h < 0) fail(j - 2, std::string("truncated \\") + e + " escape in a string");
            cp = cp * 16 + static_cast<uint32_t>(h);
          }
          if (cp > 0x10FFFF) fail(j - 2, "illegal Unicode character in a string");
          j += n;
          append_utf8(out, cp);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = e - '0';
            for (int k = 0; k < 2 && j < s_.size() && s_[j] >= '0' && s_[j] <= '7'; ++k, ++j) cp = cp * 8 + (s_[j] - '0');
            append_utf8(out, cp);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    Token t;
    t.type = Tok::String;
    position(i, &t.line, &t.col);
    t.value = std::move(out);
    tokens_.push_back(std::move(t));
    return j + 1;
  }

  std::string s_;
  const std::string& name_;
  std::vector<Token> tokens_;
  size_t pos_cache_ = 0;
  int line_cache_ = 1, col_cache_ = 1;
};

}  // namespace

std::string_view rstrip_space(std::string_view s) {
  // Walk forward, remembering where the last non-space code point ended.
  size_t keep = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t n = space_len(s, i);
    if (n) {
      i += n;
    } else {
      size_t len = 0;
      decode_at(s, i, &len);
      i += len;
      keep = i;
    }
  }
  return s.substr(0, keep);
}

std::vector<Token> tokenize(std::string_view source, const std::string& name) {
  return Lexer(normalize(source), name).run();
}

}  // namespace e3::jinja::detail
