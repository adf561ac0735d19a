#include "io/tokenizer/bpe.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <functional>

#include "core/error.h"
#include "core/hash.h"
#include "io/tokenizer/unicode.h"

namespace e3::tok {

// ---- StringIdMap

uint64_t StringIdMap::hash_of(std::string_view key) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ key.size();
  size_t i = 0;
  for (; i + 8 <= key.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, key.data() + i, 8);
    h = splitmix64(h ^ w);
  }
  uint64_t tail = 0;
  std::memcpy(&tail, key.data() + i, key.size() - i);
  return splitmix64(h ^ tail) | 1;  // never 0: 0 marks an empty slot
}

void StringIdMap::grow() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(old.empty() ? 1024 : old.size() * 2, Slot{});
  const size_t mask = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.hash == 0) continue;
    size_t i = s.hash & mask;
    while (slots_[i].hash != 0) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

void StringIdMap::insert(std::string_view key, int32_t id) {
  if ((count_ + 1) * 2 > slots_.size()) grow();
  const uint64_t h = hash_of(key);
  const size_t mask = slots_.size() - 1;
  size_t i = h & mask;
  while (slots_[i].hash != 0) {
    const Slot& s = slots_[i];
    if (s.hash == h && std::string_view(arena_.data() + s.offset, s.length) == key) {
      slots_[i].id = id;
      return;
    }
    i = (i + 1) & mask;
  }
  slots_[i] = Slot{h, static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(key.size()), id};
  arena_.append(key);
  ++count_;
}

int32_t StringIdMap::find(std::string_view key) const {
  if (slots_.empty()) return -1;
  const uint64_t h = hash_of(key);
  const size_t mask = slots_.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.hash == 0) return -1;
    if (s.hash == h && s.length == key.size() && std::memcmp(arena_.data() + s.offset, key.data(), key.size()) == 0)
      return s.id;
  }
}

// ---- PairMap

void PairMap::build(const std::vector<std::pair<uint64_t, std::pair<uint32_t, int32_t>>>& entries) {
  size_t size = 16;
  while (size < entries.size() * 2) size *= 2;
  slots_.assign(size, Slot{});
  mask_ = size - 1;
  for (const auto& [key, value] : entries) {
    size_t i = mix(key) & mask_;
    while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
    slots_[i] = Slot{key, value};
  }
}

// ---- WordCache

const std::vector<WordToken>* WordCache::find(std::string_view word) const {
  auto it = map_.find(word);
  return it == map_.end() ? nullptr : &it->second;
}

void WordCache::insert(std::string_view word, const std::vector<WordToken>& tokens) {
  if (word.size() >= kMaxWordBytes || map_.size() >= kCapacity) return;
  map_.emplace(std::string(word), tokens);
}

// ---- MonotoneQueue

void MonotoneQueue::clear() {
  for (int i = 0; occupied_ != 0; ++i, occupied_ >>= 1)
    if (occupied_ & 1) buckets_[i].clear();
  buckets_[0].clear();
  rank_ = 0;
  size_ = taken_ = 0;
  popping_ = false;
}

void MonotoneQueue::put(uint64_t key) {
  const int i = std::bit_width(rank_of(key) ^ rank_);
  buckets_[i].push_back(key);
  occupied_ |= uint64_t(1) << i;
}

bool MonotoneQueue::push(uint64_t key) {
  if (popping_ ? rank_of(key) <= rank_ : rank_of(key) < rank_) return false;
  put(key);
  ++size_;
  return true;
}

uint64_t MonotoneQueue::pop() {
  std::vector<uint64_t>& now = buckets_[0];
  if (taken_ == now.size()) {
    // The lowest non-empty bucket holds the next rank; its keys share the old rank's bits above
    // their own, so around their lowest rank they all fall into lower buckets.
    now.clear();
    occupied_ &= ~uint64_t(1);
    taken_ = 0;
    const int i = std::countr_zero(occupied_);
    moving_.swap(buckets_[i]);
    occupied_ &= ~(uint64_t(1) << i);
    uint32_t lowest = UINT32_MAX;
    for (uint64_t k : moving_) lowest = std::min(lowest, rank_of(k));
    rank_ = lowest;
    for (uint64_t k : moving_) put(k);
    moving_.clear();
    std::sort(now.begin(), now.end());
  } else if (!popping_) {
    std::sort(now.begin(), now.end());  // keys pushed at rank 0 before the first pop
  }
  popping_ = true;
  --size_;
  return now[taken_++];
}

void MonotoneQueue::drain(std::vector<uint64_t>& out) {
  out.insert(out.end(), buckets_[0].begin() + static_cast<std::ptrdiff_t>(taken_), buckets_[0].end());
  for (int i = 1; i < 33; ++i) out.insert(out.end(), buckets_[i].begin(), buckets_[i].end());
  clear();
}

// ---- the byte alphabet

namespace {

struct ByteAlphabet {
  std::array<std::string, 256> to_char;
  std::unordered_map<char32_t, unsigned char> to_byte;
  ByteAlphabet() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t c = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      append_utf8(to_char[b], c);
      to_byte[c] = static_cast<unsigned char>(b);
    }
  }
};

const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

}  // namespace

const std::string& byte_to_char_utf8(unsigned char b) { return alphabet().to_char[b]; }

bool byte_level_decode(std::string_view token, std::string& out) {
  out.clear();
  const auto& map = alphabet().to_byte;
  for (size_t i = 0; i < token.size();) {
    size_t len = 0;
    const char32_t c = decode_utf8(token, i, &len);
    auto it = map.find(c);
    if (it == map.end()) return false;
    out += static_cast<char>(it->second);
    i += len;
  }
  return true;
}

// ---- Bpe

namespace {

std::string optional_string(const nlohmann::json& model, const char* key) {
  auto it = model.find(key);
  return it != model.end() && it->is_string() ? it->get<std::string>() : std::string();
}

bool optional_flag(const nlohmann::json& model, const char* key) {
  auto it = model.find(key);
  return it != model.end() && it->is_boolean() && it->get<bool>();
}

}  // namespace

Bpe::Bpe(const nlohmann::json& model, bool byte_level, const std::string& where) : byte_level_(byte_level) {
  const auto dropout = model.find("dropout");
  E3_REQUIRE(dropout == model.end() || dropout->is_null() || (dropout->is_number() && dropout->get<double>() == 0.0),
             ErrorKind::Model, "{}: BPE dropout {} is not supported (it must be null: the ids would be random)", where,
             dropout == model.end() ? "" : dropout->dump());
  const auto vocab = model.find("vocab");
  E3_REQUIRE(vocab != model.end() && vocab->is_object(), ErrorKind::Model, "{}: BPE needs a 'vocab' object", where);
  prefix_ = optional_string(model, "continuing_subword_prefix");
  suffix_ = optional_string(model, "end_of_word_suffix");
  fuse_unk_ = optional_flag(model, "fuse_unk");
  byte_fallback_ = optional_flag(model, "byte_fallback");
  ignore_merges_ = optional_flag(model, "ignore_merges");
  E3_REQUIRE(!byte_level_ || (prefix_.empty() && suffix_.empty()), ErrorKind::Model,
             "{}: a byte-level BPE with continuing_subword_prefix or end_of_word_suffix is not supported", where);

  std::string raw;
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    E3_REQUIRE(it.value().is_number_integer() && it.value().get<int64_t>() >= 0 &&
                   it.value().get<int64_t>() < (int64_t(1) << 31),
               ErrorKind::Model, "{}: vocab entry '{}' has a bad id {}", where, it.key(), it.value().dump());
    const auto id = static_cast<int32_t>(it.value().get<int64_t>());
    vocab_.insert(it.key(), id);
    if (static_cast<size_t>(id) >= id_to_token_.size()) id_to_token_.resize(static_cast<size_t>(id) + 1);
    id_to_token_[static_cast<size_t>(id)] = it.key();
    // A byte-level vocabulary is spelled in GPT-2's alphabet; entries outside it can never match
    // a byte-level word and are left out of the lookups.
    if (byte_level_) {
      if (byte_level_decode(it.key(), raw)) word_vocab_.insert(raw, id);
    } else {
      word_vocab_.insert(it.key(), id);
    }
  }
  const std::string unk = optional_string(model, "unk_token");
  if (!unk.empty()) {
    unk_id_ = vocab_.find(unk);
    E3_REQUIRE(unk_id_ >= 0, ErrorKind::Model, "{}: unk_token '{}' is not in the vocab", where, unk);
  }
  for (int b = 0; b < 256; ++b) {
    byte_fallback_ids_[b] = vocab_.find(fmt::format("<0x{:02X}>", b));
    byte_ids_[b] = byte_level_ ? word_vocab_.find(std::string(1, static_cast<char>(b))) : -1;
  }

  const auto merges = model.find("merges");
  E3_REQUIRE(merges != model.end() && merges->is_array(), ErrorKind::Model, "{}: BPE needs a 'merges' list", where);
  std::vector<std::pair<uint64_t, std::pair<uint32_t, int32_t>>> pairs;
  pairs.reserve(merges->size());
  uint32_t rank = 0;
  for (size_t i = 0; i < merges->size(); ++i) {
    const auto& m = (*merges)[i];
    std::string a, b;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      if (rank == 0 && s.rfind("#version", 0) == 0) continue;
      const size_t space = s.find(' ');
      E3_REQUIRE(space != std::string::npos && s.find(' ', space + 1) == std::string::npos, ErrorKind::Model,
                 "{}: merges[{}] '{}' is not two tokens separated by one space", where, i, s);
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else {
      E3_REQUIRE(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), ErrorKind::Model,
                 "{}: merges[{}] must be \"a b\" or [a, b]", where, i);
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    }
    const int32_t ia = vocab_.find(a), ib = vocab_.find(b);
    E3_REQUIRE(ia >= 0 && ib >= 0, ErrorKind::Model, "{}: merges[{}] uses '{}' which is not in the vocab", where, i,
               ia < 0 ? a : b);
    const std::string joined = a + (b.size() >= prefix_.size() ? b.substr(prefix_.size()) : std::string());
    const int32_t merged = vocab_.find(joined);
    E3_REQUIRE(merged >= 0, ErrorKind::Model, "{}: merges[{}] makes '{}' which is not in the vocab", where, i, joined);
    pairs.push_back({pair_key(ia, ib), {rank, merged}});  // a repeated pair takes its later rank, as HF's map does
    ++rank;
  }
  merges_.build(pairs);
}

int32_t Bpe::token_to_id(std::string_view token) const { return vocab_.find(token); }

bool Bpe::find_merge(int32_t a, int32_t b, uint32_t* rank, int32_t* new_id) const {
  const auto* hit = merges_.find(pair_key(a, b));
  if (!hit) return false;
  *rank = hit->first;
  *new_id = hit->second;
  return true;
}

void Bpe::initial_symbols(std::string_view word, std::vector<Symbol>& syms) const {
  syms.clear();
  // Lengths first, as HF counts them; the offsets are their running sums.
  int32_t unk_pending = -1;
  uint32_t unk_len = 0;
  auto add = [&](int32_t id, uint32_t len) { syms.push_back({id, len, 0}); };
  auto flush_unk = [&] {
    if (unk_pending >= 0) add(unk_pending, unk_len);
    unk_pending = -1;
  };
  auto fallback_or_unk = [&](std::string_view s, uint32_t len) {
    if (byte_fallback_) {
      bool all = true;
      for (char c : s) all &= byte_fallback_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        flush_unk();
        for (char c : s) add(byte_fallback_ids_[static_cast<unsigned char>(c)], 1);
        return;
      }
    }
    if (unk_id_ < 0) return;  // HF drops the character
    if (unk_pending >= 0 && fuse_unk_) {
      unk_len += len;
    } else {
      flush_unk();
      unk_pending = unk_id_;
      unk_len = len;
    }
  };
  if (byte_level_) {
    for (char ch : word) {
      const auto b = static_cast<unsigned char>(ch);
      if (byte_ids_[b] >= 0) {
        flush_unk();
        add(byte_ids_[b], 1);
      } else {
        fallback_or_unk(byte_to_char_utf8(b), 1);
      }
    }
  } else {
    std::string s;
    for (size_t i = 0; i < word.size();) {
      const size_t len = utf8_length(static_cast<unsigned char>(word[i]));
      const bool last = i + len >= word.size();
      s.clear();
      if (i > 0) s += prefix_;
      s.append(word.data() + i, len);
      if (last) s += suffix_;
      const int32_t id = word_vocab_.find(s);
      if (id >= 0) {
        flush_unk();
        add(id, static_cast<uint32_t>(len));
      } else {
        fallback_or_unk(s, static_cast<uint32_t>(len));
      }
      i += len;
    }
  }
  flush_unk();
}

void Bpe::merge(std::vector<Symbol>& syms, WordState& st) const {
  const size_t n = syms.size();
  if (n < 2) return;
  // Symbol i's link to its right neighbour, and the merge that pair would make. Symbols are
  // merged into their left partner, so positions keep their order: the leftmost pair is the one
  // with the lowest position.
  std::vector<int32_t>& next = st.next;
  std::vector<int32_t>& prev = st.prev;
  std::vector<int32_t>& new_id = st.new_id;
  std::vector<uint32_t>& rank = st.rank;
  next.resize(n);
  prev.resize(n);
  new_id.resize(n);
  rank.resize(n);
  constexpr uint32_t kNone = UINT32_MAX;
  for (size_t i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
    prev[i] = static_cast<int32_t>(i) - 1;
    rank[i] = kNone;
    if (i + 1 < n && !find_merge(syms[i].id, syms[i + 1].id, &rank[i], &new_id[i])) rank[i] = kNone;
  }
  auto refresh = [&](int32_t i) {
    if (i < 0) return;
    const int32_t j = next[static_cast<size_t>(i)];
    auto& r = rank[static_cast<size_t>(i)];
    if (j < 0 || !find_merge(syms[static_cast<size_t>(i)].id, syms[static_cast<size_t>(j)].id, &r,
                             &new_id[static_cast<size_t>(i)]))
      r = kNone;
  };
  auto join = [&](int32_t i) {
    const auto a = static_cast<size_t>(i);
    const auto b = static_cast<size_t>(next[a]);
    syms[a].id = new_id[a];
    syms[a].begin += syms[b].begin;  // lengths, summed
    syms[b].begin = 0;
    next[a] = next[b];
    if (next[b] >= 0) prev[static_cast<size_t>(next[b])] = i;
    refresh(prev[a]);
    refresh(i);
  };
  if (n <= 48) {
    // Short words: a scan for the best pair beats a queue.
    for (;;) {
      uint32_t best = kNone;
      int32_t at = -1;
      for (int32_t i = 0; i >= 0; i = next[static_cast<size_t>(i)])
        if (rank[static_cast<size_t>(i)] < best) {
          best = rank[static_cast<size_t>(i)];
          at = i;
        }
      if (at < 0) break;
      join(at);
    }
  } else {
    // (rank << 32 | position): the lowest rank first, the leftmost on ties. An entry is stale when
    // its pair changed since; a pair with the same rank is the same merge, so the rank tells. The
    // monotone queue serves while merges make higher ranks only; a merges list where one makes a
    // lower rank goes on in a binary heap.
    MonotoneQueue& queue = st.queue;
    std::vector<uint64_t>& heap = st.heap;
    queue.clear();
    heap.clear();
    bool monotone = true;
    const auto later = std::greater<uint64_t>();
    for (size_t i = 0; i < n; ++i)
      if (rank[i] != kNone) queue.push((uint64_t(rank[i]) << 32) | i);
    std::vector<char>& alive = st.alive;
    alive.assign(n, 1);
    auto push = [&](int32_t i) {
      if (i < 0 || rank[static_cast<size_t>(i)] == kNone) return;
      const uint64_t key = (uint64_t(rank[static_cast<size_t>(i)]) << 32) | static_cast<uint32_t>(i);
      if (monotone && queue.push(key)) return;
      if (monotone) {
        queue.drain(heap);
        std::make_heap(heap.begin(), heap.end(), later);
        monotone = false;
      }
      heap.push_back(key);
      std::push_heap(heap.begin(), heap.end(), later);
    };
    while (monotone ? !queue.empty() : !heap.empty()) {
      uint64_t key;
      if (monotone) {
        key = queue.pop();
      } else {
        std::pop_heap(heap.begin(), heap.end(), later);
        key = heap.back();
        heap.pop_back();
      }
      const auto i = static_cast<int32_t>(key & 0xFFFFFFFFu);
      const auto r = static_cast<uint32_t>(key >> 32);
      if (!alive[static_cast<size_t>(i)] || rank[static_cast<size_t>(i)] != r) continue;
      alive[static_cast<size_t>(next[static_cast<size_t>(i)])] = 0;
      join(i);
      push(prev[static_cast<size_t>(i)]);
      push(i);
    }
  }
  size_t w = 0;
  for (int32_t i = 0; i >= 0; i = next[static_cast<size_t>(i)]) syms[w++] = syms[static_cast<size_t>(i)];
  syms.resize(w);
}

namespace {

// Appends the word's tokens when it is one vocabulary entry (`whole` >= 0) or already cached.
bool known_word(std::string_view word, int32_t whole, const WordCache& cache, std::vector<WordToken>& out) {
  if (whole >= 0) {
    out.push_back({whole, 0, static_cast<uint32_t>(word.size())});
    return true;
  }
  if (!cache.enabled) return false;
  const auto* hit = cache.find(word);
  if (hit) out.insert(out.end(), hit->begin(), hit->end());
  return hit != nullptr;
}

}  // namespace

void Bpe::tokenize(std::string_view word, std::vector<WordToken>& out, WordState& st) const {
  if (word.empty()) return;
  if (known_word(word, ignore_merges_ ? word_vocab_.find(word) : -1, st.cache, out)) return;
  std::vector<Symbol>& syms = st.symbols;
  initial_symbols(word, syms);  // .begin holds each symbol's length until the end
  merge(syms, st);
  std::vector<WordToken>& tokens = st.tokens;
  tokens.clear();
  uint32_t pos = 0;
  const auto size = static_cast<uint32_t>(word.size());
  for (const Symbol& s : syms) {
    const uint32_t b = std::min(pos, size), e = std::min(pos + s.begin, size);
    tokens.push_back({s.id, b, e});
    pos += s.begin;
  }
  if (st.cache.enabled) st.cache.insert(word, tokens);
  out.insert(out.end(), tokens.begin(), tokens.end());
}

// ---- RankBpe

void RankBpe::add(std::string bytes, int32_t rank) {
  ranks_.insert(bytes, rank);
  if (static_cast<size_t>(rank) >= id_to_bytes_.size()) id_to_bytes_.resize(static_cast<size_t>(rank) + 1);
  id_to_bytes_[static_cast<size_t>(rank)] = std::move(bytes);
}

void RankBpe::tokenize(std::string_view piece, std::vector<WordToken>& out, WordState& st) const {
  if (piece.empty()) return;
  WordCache& cache = st.cache;
  if (known_word(piece, ranks_.find(piece), cache, out)) return;
  // parts[i] is the start of part i; rank[i] the rank of parts i and i+1 joined.
  const size_t n = piece.size();
  std::vector<uint32_t> start(n + 1);
  for (size_t i = 0; i <= n; ++i) start[i] = static_cast<uint32_t>(i);
  constexpr int64_t kNone = INT64_MAX;
  auto rank_of = [&](size_t i) -> int64_t {  // parts i, i+1 (start has parts+1 entries)
    if (i + 2 >= start.size()) return kNone;
    const int32_t r = ranks_.find(piece.substr(start[i], start[i + 2] - start[i]));
    return r < 0 ? kNone : r;
  };
  std::vector<int64_t> rank(n);
  for (size_t i = 0; i + 1 < n; ++i) rank[i] = rank_of(i);
  if (n > 0) rank[n - 1] = kNone;
  while (start.size() > 2) {
    int64_t best = kNone;
    size_t at = 0;
    for (size_t i = 0; i + 2 < start.size(); ++i)
      if (rank[i] < best) {
        best = rank[i];
        at = i;
      }
    if (best == kNone) break;
    start.erase(start.begin() + static_cast<std::ptrdiff_t>(at) + 1);
    rank.erase(rank.begin() + static_cast<std::ptrdiff_t>(at) + 1);
    rank[at] = rank_of(at);
    if (at > 0) rank[at - 1] = rank_of(at - 1);
  }
  std::vector<WordToken> tokens;
  for (size_t i = 0; i + 1 < start.size(); ++i) {
    const int32_t r = ranks_.find(piece.substr(start[i], start[i + 1] - start[i]));
    E3_REQUIRE(r >= 0, ErrorKind::Model, "tiktoken.model has no token for the byte {:#04x}",
               static_cast<unsigned char>(piece[start[i]]));
    tokens.push_back({r, start[i], start[i + 1]});
  }
  if (cache.enabled) cache.insert(piece, tokens);
  out.insert(out.end(), tokens.begin(), tokens.end());
}

}  // namespace e3::tok
