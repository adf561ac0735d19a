// The template's tokens, as jinja2's lexer cuts them with HF's settings (trim_blocks,
// lstrip_blocks, newlines normalised to \n, one trailing newline dropped): data between tags
// already has the whitespace control applied; comments are gone; {% raw %} bodies are data.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace e3::jinja::detail {

enum class Tok : uint8_t { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  Tok type = Tok::Eof;
  std::string value;  // Data / Name / String (unescaped) / Op text
  int64_t ival = 0;
  double fval = 0;
  int line = 1, col = 1;
};

// Throws e3::Error(ErrorKind::Input) "NAME:LINE:COL: what" on a lexical error.
std::vector<Token> tokenize(std::string_view source, const std::string& name);

// Python's str.rstrip() / lstrip() of Unicode whitespace.
std::string_view rstrip_space(std::string_view s);

}  // namespace e3::jinja::detail
