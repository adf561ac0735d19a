// Tokenizes each line of a JSONL corpus ({"text": ...}) with the tokenizer of a directory and
// prints one JSON line per input line: the ids without and with special tokens, and the byte
// offsets and bytes (token_bytes, in hex) of the former. tests/oracle/tokenize_corpus.mjs compares this with HF's tokenizers.
//   tokenize_file TOKENIZER_DIR CORPUS.jsonl
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "core/error.h"
#include "io/tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER_DIR CORPUS.jsonl\n", argv[0]);
    return 2;
  }
  try {
    const auto tok = e3::tok::Tokenizer::load(argv[1]);
    std::ifstream in(argv[2]);
    if (!in) {
      std::fprintf(stderr, "cannot read %s\n", argv[2]);
      return 2;
    }
    std::string line;
    size_t line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      if (line.empty()) continue;
      const std::string text = nlohmann::json::parse(line).at("text").get<std::string>();
      size_t bad = 0;
      if (!e3::tok::valid_utf8(text, &bad)) {
        std::fprintf(stderr, "%s:%zu: invalid UTF-8 at byte %zu\n", argv[2], line_no, bad);
        return 3;
      }
      nlohmann::json out;
      out["plain"] = nlohmann::json::array();
      out["offsets"] = nlohmann::json::array();
      out["bytes"] = nlohmann::json::array();
      for (const auto& t : tok.encode(text, false)) {
        out["plain"].push_back(t.id);
        out["offsets"].push_back({t.begin, t.end});
        std::string hex;
        for (const unsigned char c : tok.token_bytes(t.id)) hex += fmt::format("{:02x}", c);
        out["bytes"].push_back(std::move(hex));
      }
      out["special"] = tok.encode_ids(text, true);
      std::cout << out.dump() << '\n';
    }
  } catch (const e3::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return e3::exit_code(e.kind());
  }
  return 0;
}
