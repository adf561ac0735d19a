// Kimi-K2's tokenizer as its tokenization_kimi.py builds it: tiktoken ranks from tiktoken.model,
// 256 + 2 special tokens after them (named by tokenizer_config.json's added_tokens_decoder, the
// rest "<|reserved_token_N|>"), and its split pattern.
#include <nlohmann/json.hpp>

#include <fstream>

#include "core/error.h"
#include "core/hash.h"
#include "core/json_read.h"
#include "io/tokenizer/config.h"
#include "io/tokenizer/impl.h"
#include "io/tokenizer/unicode.h"

namespace e3::tok {

namespace {

// TikTokenTokenizer.pat_str: Han runs, words with their case shapes and English contractions,
// numbers of up to three digits, punctuation runs, and whitespace.
constexpr const char* kKimiPattern =
    R"([\p{Han}]+)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*)"
    R"(|\s*[\r\n]+)"
    R"(|\s+(?!\S))"
    R"(|\s+)";
constexpr int kReservedSpecialTokens = 256;
constexpr size_t kMaxEncodeChars = 400000, kMaxRunChars = 25000;

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

bool base64_decode(std::string_view in, std::string& out) {
  out.clear();
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    const int v = base64_value(c);
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  return true;
}

// Python's str.isspace (White_Space, and the separators U+001C..U+001F).
bool python_space(char32_t c) { return (c >= 0x1C && c <= 0x1F) || has_property(c, Property::WhiteSpace); }

}  // namespace

void Tokenizer::Impl::encode_tiktoken(std::string_view text, EncodeState& st, std::vector<Token>& out) const {
  st.splits.clear();
  raw_matcher.split(text, st.splits);
  std::vector<std::pair<size_t, size_t>> substrings;
  for (const AddedSplit& s : st.splits) {
    if (s.id >= 0) {
      out.push_back({s.id, static_cast<uint32_t>(s.begin), static_cast<uint32_t>(s.end)});
      continue;
    }
    // TikTokenTokenizer.encode: chunks of 400,000 characters, each cut where a run of spaces or
    // non-spaces passes 25,000 characters.
    substrings.clear();
    size_t chars = 0, chunk_begin = s.begin;
    size_t run = 0, slice_begin = s.begin;
    bool run_space = false;
    for (size_t i = s.begin; i <= s.end;) {
      const bool chunk_end = i == s.end || chars == kMaxEncodeChars;
      if (chunk_end) {
        substrings.emplace_back(slice_begin, i);
        if (i == s.end) break;
        chunk_begin = slice_begin = i;
        chars = 0;
        run = 0;
      }
      size_t len = 0;
      const bool space = python_space(decode_utf8(text, i, &len));
      if (i == chunk_begin) run_space = space;
      if (space != run_space) {
        run = 1;
        run_space = space;
      } else if (++run > kMaxRunChars) {
        substrings.emplace_back(slice_begin, i);
        slice_begin = i;
        run = 1;
      }
      ++chars;
      i += len;
    }
    for (auto [b, e] : substrings) {
      const std::string_view sub = text.substr(b, e - b);
      st.scratch.matches.clear();
      tiktoken_split->find_all(sub, st.scratch.region, st.scratch.matches);
      for (auto [mb, me] : st.scratch.matches) {
        st.words.clear();
        ranks->tokenize(sub.substr(mb, me - mb), st.words, st.word);
        for (const WordToken& w : st.words)
          out.push_back({w.id, static_cast<uint32_t>(b + mb + w.begin), static_cast<uint32_t>(b + mb + w.end)});
      }
    }
  }
}

std::unique_ptr<Tokenizer::Impl> load_tiktoken(const std::filesystem::path& dir) {
  auto im = std::make_unique<Tokenizer::Impl>();
  const auto path = dir / "tiktoken.model";
  const std::string where = path.string();
  im->where = where;
  const RegularFile file(path, ErrorKind::Model);
  const std::string text = file.read_all(path, ErrorKind::Model);
  im->ranks = std::make_unique<RankBpe>();
  std::string bytes;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string_view line(text.data() + pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    E3_REQUIRE(space != std::string_view::npos, ErrorKind::Model, "{}:{}: expected 'BASE64 RANK'", where, line_no);
    int64_t rank = -1;
    try {
      rank = std::stoll(std::string(line.substr(space + 1)));
    } catch (const std::exception&) {
    }
    E3_REQUIRE(rank >= 0 && rank < (int64_t(1) << 30) && base64_decode(line.substr(0, space), bytes) && !bytes.empty(),
               ErrorKind::Model, "{}:{}: expected 'BASE64 RANK'", where, line_no);
    im->ranks->add(bytes, static_cast<int32_t>(rank));
  }
  const auto n_base = static_cast<int32_t>(im->ranks->size());
  E3_REQUIRE(n_base > 0, ErrorKind::Model, "{}: no tokens", where);
  for (int b = 0; b < 256; ++b)
    E3_REQUIRE(im->ranks->tokenize_has_byte(static_cast<unsigned char>(b)), ErrorKind::Model,
               "{}: no token for the byte {:#04x}", where, b);

  const ConfigFile cfg = read_tokenizer_config(dir);
  im->config = cfg.config;
  std::unordered_map<int32_t, const AddedToken*> named;
  for (const AddedToken& t : cfg.added_tokens_decoder) named[t.id] = &t;
  std::vector<AddedToken> specials;
  for (int32_t id = n_base; id < n_base + kReservedSpecialTokens + 2; ++id) {
    auto it = named.find(id);
    AddedToken t = it != named.end() ? *it->second : AddedToken{};
    if (it == named.end()) t.content = fmt::format("<|reserved_token_{}|>", id);
    t.id = id;
    t.special = true;
    t.normalized = false;
    specials.push_back(std::move(t));
  }
  im->add_tokens(std::move(specials));
  im->vocab_size = n_base + kReservedSpecialTokens + 2;
  im->tiktoken_split = std::make_unique<Regex>(kKimiPattern, where + ": split pattern");
  // The slow tokenizer adds no special tokens of its own; honour the config's flags when given.
  auto id_of = [&](const std::string& name) -> int32_t {
    for (const AddedToken& t : im->added)
      if (t.content == name) return t.id;
    return -1;
  };
  const int32_t bos = cfg.has_add_bos && im->config.add_bos_token ? id_of(im->config.bos_token) : -1;
  const int32_t eos = cfg.has_add_eos && im->config.add_eos_token ? id_of(im->config.eos_token) : -1;
  im->config.add_bos_token = bos >= 0;
  im->config.add_eos_token = eos >= 0;
  im->post = make_bos_eos_template(bos, eos);
  ContentHash h;
  h.update(text.data(), text.size());
  Fnv1a f;
  f.update(fmt::format("tiktoken|{:016x}|b{}|e{}|", h.digest(), bos, eos));
  for (const AddedToken& t : im->added) f.update(t.content).update("|");
  im->fingerprint = f.hex();
  return im;
}

}  // namespace e3::tok
