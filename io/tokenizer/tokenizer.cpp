#include "io/tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/hash.h"
#include "core/json_read.h"
#include "io/tokenizer/config.h"
#include "io/tokenizer/impl.h"
#include "io/tokenizer/unicode.h"

namespace e3::tok {

bool valid_utf8(std::string_view s, size_t* bad_offset) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  auto fail = [&](size_t at) {
    if (bad_offset) *bad_offset = at;
    return false;
  };
  while (i < n) {
    // ASCII eight bytes at a time: most text is mostly ASCII.
    uint64_t word;
    if (i + 8 <= n && (std::memcpy(&word, p + i, 8), (word & 0x8080808080808080ull) == 0)) {
      i += 8;
      continue;
    }
    const unsigned char b = p[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    char32_t min;
    char32_t c;
    if ((b & 0xE0) == 0xC0) {
      len = 2, min = 0x80, c = b & 0x1F;
    } else if ((b & 0xF0) == 0xE0) {
      len = 3, min = 0x800, c = b & 0x0F;
    } else if ((b & 0xF8) == 0xF0) {
      len = 4, min = 0x10000, c = b & 0x07;
    } else {
      return fail(i);
    }
    if (i + len > n) return fail(i);
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return fail(i);
      c = (c << 6) | (p[i + k] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return fail(i);
    i += len;
  }
  return true;
}

// ---- the encode state pool

std::unique_ptr<EncodeState> Tokenizer::Impl::acquire() const {
  {
    std::lock_guard<std::mutex> lock(pool_mutex);
    if (!pool.empty()) {
      auto st = std::move(pool.back());
      pool.pop_back();
      return st;
    }
  }
  auto st = std::make_unique<EncodeState>();
  st->word.cache.enabled = word_cache;
  return st;
}

void Tokenizer::Impl::release(std::unique_ptr<EncodeState> state) const {
  std::lock_guard<std::mutex> lock(pool_mutex);
  pool.push_back(std::move(state));
}

void Tokenizer::Impl::add_tokens(std::vector<AddedToken> tokens) {
  added = std::move(tokens);
  std::vector<const AddedToken*> raw, normalized;
  std::vector<std::string> raw_patterns, normalized_patterns;
  Scratch scratch;
  for (size_t i = 0; i < added.size(); ++i) {
    const AddedToken& t = added[i];
    added_by_id[t.id] = i;
    if (t.content.empty()) continue;
    if (t.normalized && normalizer) {
      Normalized n(t.content, 0, static_cast<uint32_t>(t.content.size()));
      normalizer->apply(n, scratch);
      normalized.push_back(&t);
      normalized_patterns.push_back(n.text());
    } else if (t.normalized) {
      normalized.push_back(&t);
      normalized_patterns.push_back(t.content);
    } else {
      raw.push_back(&t);
      raw_patterns.push_back(t.content);
    }
  }
  raw_matcher.build(raw, raw_patterns);
  normalized_matcher.build(normalized, normalized_patterns);
}

// ---- encode

namespace {

constexpr char32_t kByteLevelSpace = 0x120;  // 'Ġ', a space in GPT-2's byte alphabet

bool trims(char32_t c) { return c == kByteLevelSpace || has_property(c, Property::WhiteSpace); }

std::pair<uint32_t, uint32_t> trim_counts_of(std::string_view value) {
  std::vector<char32_t> chars;
  for (size_t i = 0; i < value.size();) {
    size_t len = 0;
    chars.push_back(decode_utf8(value, i, &len));
    i += len;
  }
  uint32_t lead = 0, trail = 0;
  while (lead < chars.size() && trims(chars[lead])) ++lead;
  while (trail < chars.size() && trims(chars[chars.size() - 1 - trail])) ++trail;
  return {lead, trail};
}

}  // namespace

void Tokenizer::Impl::encode_view(std::string_view v, uint32_t offset, size_t level, EncodeState& st,
                                  std::vector<Token>& out, TrimCounts* trim) const {
  if (level < view_splits.size()) {
    if (st.level_matches.size() <= level) st.level_matches.resize(level + 1);
    auto& matches = st.level_matches[level];
    matches.clear();
    view_splits[level]->find_all(v, st.scratch.region, matches);
    size_t prev = 0;
    // find_all fills `matches` once; deeper levels use their own vectors, so iterating is safe.
    for (size_t k = 0; k < st.level_matches[level].size(); ++k) {
      const auto [s, e] = st.level_matches[level][k];
      if (prev < s) encode_view(v.substr(prev, s - prev), offset + static_cast<uint32_t>(prev), level + 1, st, out, trim);
      if (s < e) encode_view(v.substr(s, e - s), offset + static_cast<uint32_t>(s), level + 1, st, out, trim);
      prev = e;
    }
    if (prev < v.size()) encode_view(v.substr(prev), offset + static_cast<uint32_t>(prev), level + 1, st, out, trim);
    return;
  }
  st.words.clear();
  bpe->tokenize(v, st.words, st.word);
  for (const WordToken& w : st.words) {
    // Offsets widen to whole characters, as the byte-level alignment does.
    uint32_t b = std::min<uint32_t>(w.begin, static_cast<uint32_t>(v.size()) - 1);
    while (b > 0 && is_continuation(static_cast<unsigned char>(v[b]))) --b;
    uint32_t e = std::max(w.end, b + 1);
    while (e < v.size() && is_continuation(static_cast<unsigned char>(v[e]))) ++e;
    out.push_back({w.id, offset + b, offset + e});
    if (!trim) continue;
    if (bpe->byte_level()) {
      uint32_t lead = 0, tail = 0;
      while (w.begin + lead < w.end && v[w.begin + lead] == ' ') ++lead;
      while (w.end - tail > w.begin + lead && v[w.end - 1 - tail] == ' ') ++tail;
      trim->push_back({lead, tail});
    } else {
      const auto& names = bpe->id_to_token();
      trim->push_back(static_cast<size_t>(w.id) < names.size() ? trim_counts_of(names[static_cast<size_t>(w.id)])
                                                               : std::pair<uint32_t, uint32_t>{0, 0});
    }
  }
}

void Tokenizer::Impl::encode_text(std::string_view text, EncodeState& st, std::vector<Token>& out,
                                  TrimCounts* trim) const {
  auto emit_added = [&](int32_t id, Span span, std::string_view value) {
    out.push_back({id, span.first, span.second});
    if (trim) trim->push_back(trim_counts_of(value));
  };
  auto emit_piece = [&](Normalized piece) {
    if (view_path && piece.untouched()) {
      encode_view(piece.text(), piece.shift(), 0, st, out, trim);
      return;
    }
    std::vector<Normalized>& pieces = st.scratch.pieces;
    pieces.clear();
    pieces.push_back(std::move(piece));
    if (pre_tokenizer) pre_tokenizer->apply(pieces, st.scratch);
    for (const Normalized& p : pieces) {
      st.words.clear();
      bpe->tokenize(p.text(), st.words, st.word);
      const auto size = static_cast<uint32_t>(p.text().size());
      for (const WordToken& w : st.words) {
        const uint32_t b = std::min(w.begin, size - 1);
        const Span span = p.original_of(b, std::max(w.end, b + 1));
        out.push_back({w.id, span.first, span.second});
        if (!trim) continue;
        if (bpe->byte_level()) {
          uint32_t lead = 0, trail = 0;
          while (b + lead < w.end && p.text()[b + lead] == ' ') ++lead;
          while (w.end - trail > b + lead && p.text()[w.end - 1 - trail] == ' ') ++trail;
          trim->push_back({lead, trail});
        } else {
          const auto& names = bpe->id_to_token();
          trim->push_back(static_cast<size_t>(w.id) < names.size() ? trim_counts_of(names[static_cast<size_t>(w.id)])
                                                                   : std::pair<uint32_t, uint32_t>{0, 0});
        }
      }
    }
  };
  st.splits.clear();
  raw_matcher.split(text, st.splits);
  for (const AddedSplit& s : st.splits) {
    if (s.id >= 0) {
      emit_added(s.id, {static_cast<uint32_t>(s.begin), static_cast<uint32_t>(s.end)}, text.substr(s.begin, s.end - s.begin));
      continue;
    }
    Normalized n(text, static_cast<uint32_t>(s.begin), static_cast<uint32_t>(s.end));
    if (normalizer) normalizer->apply(n, st.scratch);
    if (n.empty()) continue;
    if (normalized_matcher.empty()) {
      emit_piece(std::move(n));
      continue;
    }
    st.sub_splits.clear();
    normalized_matcher.split(n.text(), st.sub_splits);
    for (const AddedSplit& sub : st.sub_splits) {
      if (sub.id >= 0) {
        emit_added(sub.id, n.original_of(sub.begin, sub.end), std::string_view(n.text()).substr(sub.begin, sub.end - sub.begin));
      } else {
        emit_piece(n.slice(sub.begin, sub.end));
      }
    }
  }
}

std::vector<Token> Tokenizer::Impl::encode_tokens(std::string_view text, bool add_special_tokens,
                                                  bool want_offsets) const {
  // The regex engine and the byte offsets assume UTF-8; callers check their input before (with
  // its line number), this keeps a bad text from giving wrong ids instead of an error.
  size_t bad = 0;
  E3_REQUIRE(valid_utf8(text, &bad), ErrorKind::Input, "text is not valid UTF-8 (byte {} of {})", bad, text.size());
  auto st = acquire();
  std::vector<Token> tokens;
  tokens.reserve(text.size() / 3 + 4);
  TrimCounts trim;  // left empty when only the ids are wanted: trimming moves offsets, never ids
  const bool want_trim = want_offsets && post && post->trims_offsets();
  if (ranks) {
    encode_tiktoken(text, *st, tokens);
  } else {
    encode_text(text, *st, tokens, want_trim ? &trim : nullptr);
  }
  if (post) post->process(tokens, trim, add_special_tokens);
  release(std::move(st));
  return tokens;
}

std::vector<Token> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  return impl_->encode_tokens(text, add_special_tokens, true);
}

std::vector<int32_t> Tokenizer::encode_ids(std::string_view text, bool add_special_tokens) const {
  const std::vector<Token> tokens = impl_->encode_tokens(text, add_special_tokens, false);
  std::vector<int32_t> ids(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) ids[i] = tokens[i].id;
  return ids;
}

// ---- queries

std::string Tokenizer::token_bytes(int32_t id) const {
  const Impl& im = *impl_;
  if (auto it = im.added_by_id.find(id); it != im.added_by_id.end()) return im.added[it->second].content;
  if (im.ranks) {
    const auto& bytes = im.ranks->id_to_bytes();
    return id >= 0 && static_cast<size_t>(id) < bytes.size() ? bytes[static_cast<size_t>(id)] : std::string();
  }
  const auto& names = im.bpe->id_to_token();
  if (id < 0 || static_cast<size_t>(id) >= names.size()) return "";
  const std::string& name = names[static_cast<size_t>(id)];
  if (name.size() == 6 && name.rfind("<0x", 0) == 0 && name[5] == '>') {
    const auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
    const int hi = hex(name[3]), lo = hex(name[4]);
    if (hi >= 0 && lo >= 0) return std::string(1, static_cast<char>(hi * 16 + lo));
  }
  std::string out;
  if (im.bpe->byte_level() && byte_level_decode(name, out)) return out;
  if (!im.metaspace_display) return name;
  out.clear();
  for (size_t i = 0; i < name.size(); ++i) {
    if (name.compare(i, 3, "\u2581") == 0) {
      out += ' ';
      i += 2;
    } else {
      out += name[i];
    }
  }
  return out;
}

bool Tokenizer::is_special(int32_t id) const {
  auto it = impl_->added_by_id.find(id);
  return it != impl_->added_by_id.end() && impl_->added[it->second].special;
}

int64_t Tokenizer::vocab_size() const { return impl_->vocab_size; }
const TokenizerConfig& Tokenizer::config() const { return impl_->config; }
std::string Tokenizer::fingerprint() const { return impl_->fingerprint; }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  const Impl& im = *impl_;
  for (const AddedToken& t : im.added)
    if (t.content == token) return t.id;
  if (im.bpe) {
    const int32_t id = im.bpe->token_to_id(token);
    if (id >= 0) return id;
  }
  return std::nullopt;
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

// ---- loading tokenizer.json

namespace {

// The special tokens a post-processor puts before and after a text.
std::pair<std::vector<int32_t>, std::vector<int32_t>> surrounding_ids(const PostProcessor* post) {
  std::vector<Token> probe{{-7, 1, 2}};
  TrimCounts trim;
  if (post) post->process(probe, trim, true);
  std::pair<std::vector<int32_t>, std::vector<int32_t>> out;
  bool after = false;
  for (const Token& t : probe) {
    if (t.id == -7 && t.begin == 1) {
      after = true;
      continue;
    }
    (after ? out.second : out.first).push_back(t.id);
  }
  return out;
}

void finish_config(Tokenizer::Impl& im, const ConfigFile& cfg, const std::string& json_text) {
  const auto [before, after] = surrounding_ids(im.post.get());
  if (!cfg.has_add_bos) im.config.add_bos_token = !before.empty();
  if (!cfg.has_add_eos) im.config.add_eos_token = !after.empty();
  ContentHash h;
  h.update(json_text.data(), json_text.size());
  Fnv1a f;
  f.update(fmt::format("{:016x}|", h.digest()));
  for (int32_t id : before) f.update(fmt::format("b{}|", id));
  for (int32_t id : after) f.update(fmt::format("a{}|", id));
  im.fingerprint = f.hex();
}

}  // namespace

Tokenizer Tokenizer::load(const std::filesystem::path& dir, const LoadOptions& options) {
  Tokenizer t = load_files(dir);
  t.impl_->word_cache = options.word_cache;
  return t;
}

Tokenizer Tokenizer::load_files(const std::filesystem::path& dir) {
  std::error_code ec;
  const auto json_path = dir / "tokenizer.json";
  if (!std::filesystem::exists(json_path, ec)) {
    if (std::filesystem::exists(dir / "tiktoken.model", ec)) return Tokenizer(load_tiktoken(dir));
    E3_THROW(ErrorKind::Model, "no tokenizer in {}: expected tokenizer.json (or tiktoken.model for Kimi-K2)",
             dir.string());
  }
  auto im = std::make_unique<Impl>();
  const std::string where = json_path.string();
  im->where = where;
  const RegularFile file(json_path, ErrorKind::Model);
  const std::string text = file.read_all(json_path, ErrorKind::Model);
  const nlohmann::json j = parse_json(text, ErrorKind::Model, where);
  E3_REQUIRE(j.is_object() && j.contains("model") && j["model"].is_object(), ErrorKind::Model,
             "{}: not a tokenizer.json (no \"model\" object)", where);
  const nlohmann::json& model = j["model"];
  std::string type = model.value("type", std::string());
  if (type.empty()) type = model.contains("merges") ? "BPE" : "unknown";
  E3_REQUIRE(type == "BPE", ErrorKind::Model, "{}: model type '{}' is not supported (only BPE)", where, type);

  const ConfigFile cfg = read_tokenizer_config(dir);
  im->config = cfg.config;
  const nlohmann::json null;
  im->normalizer = make_normalizer(j.value("normalizer", null), where + ": normalizer");
  PreTokenizerInfo info;
  im->pre_tokenizer = make_pre_tokenizer(j.value("pre_tokenizer", null), where + ": pre_tokenizer", info);
  im->view_path = !im->pre_tokenizer || im->pre_tokenizer->isolated_regex_chain(im->view_splits);
  im->bpe = std::make_unique<Bpe>(model, info.byte_level, where + ": model");
  im->post = make_post_processor(j.value("post_processor", null), where + ": post_processor");
  im->metaspace_display = j.contains("decoder") && j["decoder"].dump().find("\u2581") != std::string::npos;

  std::vector<AddedToken> added;
  int64_t top = static_cast<int64_t>(im->bpe->id_to_token().size()) - 1;
  const auto& list = j.value("added_tokens", nlohmann::json::array());
  E3_REQUIRE(list.is_array(), ErrorKind::Model, "{}: added_tokens must be a list", where);
  for (size_t i = 0; i < list.size(); ++i) {
    const auto& t = list[i];
    E3_REQUIRE(t.is_object() && t.contains("id") && t["id"].is_number_integer() && t.contains("content") &&
                   t["content"].is_string(),
               ErrorKind::Model, "{}: added_tokens[{}] needs an integer 'id' and a string 'content'", where, i);
    AddedToken a;
    a.id = t["id"].get<int32_t>();
    a.content = t["content"].get<std::string>();
    a.special = t.value("special", false);
    a.lstrip = t.value("lstrip", false);
    a.rstrip = t.value("rstrip", false);
    a.single_word = t.value("single_word", false);
    a.normalized = t.value("normalized", !a.special);
    top = std::max<int64_t>(top, a.id);
    added.push_back(std::move(a));
  }
  im->add_tokens(std::move(added));
  im->vocab_size = top + 1;

  // transformers rebuilds the template from add_bos_token / add_eos_token when the config gives
  // either (TokenizersBackend, and LlamaTokenizerFast before it); a missing one counts as false.
  if (cfg.has_add_bos || cfg.has_add_eos) {
    auto id_of = [&](const std::string& name) -> int32_t {
      if (name.empty()) return -1;
      for (const AddedToken& t : im->added)
        if (t.content == name) return t.id;
      return im->bpe->token_to_id(name);
    };
    const int32_t bos = im->config.add_bos_token ? id_of(im->config.bos_token) : -1;
    const int32_t eos = im->config.add_eos_token ? id_of(im->config.eos_token) : -1;
    if (im->config.add_bos_token && bos < 0) im->config.add_bos_token = false;
    if (im->config.add_eos_token && eos < 0) im->config.add_eos_token = false;
    im->post = make_bos_eos_template(bos, eos);
  }
  finish_config(*im, cfg, text);
  return Tokenizer(std::move(im));
}

}  // namespace e3::tok
