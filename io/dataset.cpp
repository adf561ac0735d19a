#include "io/dataset.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "io/file_io.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/json_read.h"
#include "core/named_enum.h"

namespace e3::io {
namespace {

using json = nlohmann::ordered_json;

// The contract's limits (README "Input").
constexpr int kMaxDepth = 64;           // a sample is two levels deep; this only stops runaway nesting
constexpr size_t kMaxReported = 20;     // bad lines named in one error
constexpr size_t kQuoteBytes = 80;      // of a value quoted in a message
constexpr size_t kLibraryMessageBytes = 200;  // of the JSON library's own message, which quotes the input

struct Parsed {
  bool has_id = false;
  std::string id;
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;
  LineKind kind = LineKind::TokenIds;
};

// The chat encoder of a file, loaded by the first line that needs it (from any thread).
class ChatSource {
 public:
  explicit ChatSource(const DatasetOptions& options) : load_(options.load_chat) {}
  explicit ChatSource(std::shared_ptr<const ChatEncoder> loaded) : encoder_(std::move(loaded)) {
    std::call_once(once_, [] {});
  }
  const ChatEncoder& get(const std::string& where) {
    std::call_once(once_, [&] {
      if (!load_) return;
      try {
        encoder_ = load_();
      } catch (const Error& e) {
        // The first line that needed the tokenizer tells the user why one was read at all.
        if (e.kind() != ErrorKind::Model) throw;
        E3_THROW(ErrorKind::Model,
                 "{}: this line holds text, which needs the model's tokenizer: {} (give --tokenizer DIR, "
                 "or token-id lines)",
                 where, e.what());
      }
    });
    E3_REQUIRE(encoder_ != nullptr, ErrorKind::Input,
               "{}: this line holds text, which needs the model's tokenizer; none is given here", where);
    return *encoder_;
  }
  std::shared_ptr<const ChatEncoder> loaded() const { return encoder_; }

 private:
  std::function<std::shared_ptr<const ChatEncoder>()> load_;
  std::once_flag once_;
  std::shared_ptr<const ChatEncoder> encoder_;
};

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

// At most kQuoteBytes of a quoted value: a message never carries a whole 64 KiB id or a
// megabyte of brackets.
std::string clip(std::string_view s, size_t limit = kQuoteBytes) { return e3::clip(s, limit); }

std::string quote(const json& v) { return clip(v.dump()); }

constexpr std::array<std::string_view, 3> kKeys = {"id", "input_ids", "loss_mask"};

// What an unknown key most likely meant, with a word on what to do; empty if nothing fits.
std::string advice_for_key(std::string_view key) {
  // Names other tools give to the same things, and HF tokenizer outputs that are not needed.
  static const std::array<std::pair<std::string_view, std::string_view>, 7> kKnown = {{
      {"ids", "did you mean \"input_ids\"?"},
      {"tokens", "did you mean \"input_ids\"?"},
      {"tokenids", "did you mean \"input_ids\"?"},
      {"mask", "did you mean \"loss_mask\"?"},
      {"labels", "give \"loss_mask\" instead: 1 where the label is not -100, else 0"},
      {"attentionmask", "drop it: samples are packed without padding, so every token is attended"},
      {"tokentypeids", "drop it: the model takes only \"input_ids\""},
  }};
  // Keys compared without case, '_' or '-': "lossMask", "loss-mask" and "lossmask" all mean loss_mask.
  const std::string n = loose_name(key);
  for (const auto& [name, advice] : kKnown)
    if (n == name) return std::string(advice);
  const std::optional<std::string_view> best = closest_name(key, {kKeys.begin(), kKeys.end()});
  return best ? fmt::format("did you mean \"{}\"?", *best) : "";
}

// The library's DOM builder, refusing on the way what the DOM would hide or could not
// survive: a repeated key (the DOM keeps the last one silently) and nesting deep enough to
// exhaust the stack of anything that walks the value recursively. A SAX handler rather than
// a parser callback, which made validating a large file about a third slower.
class CheckedDomBuilder {
 public:
  CheckedDomBuilder(json& root, const std::string& where) : dom_(root), where_(where) {}

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const json::string_t& text) { return dom_.number_float(v, text); }
  bool string(json::string_t& v) { return dom_.string(v); }
  bool binary(json::binary_t& v) { return dom_.binary(v); }
  bool start_object(std::size_t n) {
    enter();
    keys_by_level_.emplace_back();
    return dom_.start_object(n);
  }
  bool key(json::string_t& k) {
    E3_REQUIRE(keys_by_level_.back().insert(k).second, ErrorKind::Input,
               "{}: duplicate key \"{}\" (JSON keeps only one of them)", where_, clip(k));
    return dom_.key(k);
  }
  bool end_object() {
    keys_by_level_.pop_back();
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    enter();
    return dom_.start_array(n);
  }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  template <class Exception>
  bool parse_error(std::size_t position, const std::string& last_token, const Exception& ex) {
    return dom_.parse_error(position, last_token, ex);
  }

 private:
  void enter() {
    E3_REQUIRE(++depth_ <= kMaxDepth, ErrorKind::Input, "{}: JSON nested more than {} levels deep", where_, kMaxDepth);
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  const std::string& where_;
  int depth_ = 0;
  std::vector<std::unordered_set<std::string>> keys_by_level_;  // one set per open object
};

json parse_json(const std::string& line, const std::string& where) {
  json doc;
  CheckedDomBuilder builder(doc, where);
  try {
    json::sax_parse(line, &builder);
  } catch (const json::parse_error& e) {
    E3_THROW(ErrorKind::Input, "{}: invalid JSON: {}", where, clip(e.what(), kLibraryMessageBytes));
  } catch (const json::exception& e) {
    // Numbers out of range ("1e400") and the like: still the line's fault.
    E3_THROW(ErrorKind::Input, "{}: invalid JSON value: {}", where, clip(e.what(), kLibraryMessageBytes));
  }
  return doc;
}

// Only the three keys of the contract: a misspelt "loss_mask" must not silently train on the prompt.
void check_keys(const json& doc, const std::string& where) {
  for (const auto& item : doc.items()) {
    const std::string& key = item.key();
    if (std::find(kKeys.begin(), kKeys.end(), key) != kKeys.end()) continue;
    const std::string advice = advice_for_key(key);
    E3_THROW(ErrorKind::Input, "{}: unknown key \"{}\"{}{} (a sample holds only \"id\", \"input_ids\", \"loss_mask\")",
             where, clip(key), advice.empty() ? "" : ": ", advice);
  }
}

Parsed parse_sample(const json& doc, const std::string& where, int64_t vocab) {
  E3_REQUIRE(doc.is_object(), ErrorKind::Input, "{}: a sample must be a JSON object", where);
  check_keys(doc, where);
  Parsed p;
  parse_line_id(doc, where, p.has_id, p.id);
  E3_REQUIRE(doc.contains("input_ids"), ErrorKind::Input, "{}: missing \"input_ids\"", where);
  const json& ids = doc["input_ids"];
  E3_REQUIRE(ids.is_array(), ErrorKind::Input, "{}: \"input_ids\" must be an array of integers", where);
  E3_REQUIRE(!ids.empty(), ErrorKind::Input, "{}: empty sample: \"input_ids\" has no tokens", where);
  p.ids.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const json& t = ids[i];
    E3_REQUIRE(t.is_number_integer(), ErrorKind::Input, "{}: input_ids[{}] is {}, not an integer", where, i,
               quote(t));
    // Above INT64_MAX the value is only representable unsigned; reading it signed would wrap.
    E3_REQUIRE(!t.is_number_unsigned() || t.get<uint64_t>() < static_cast<uint64_t>(vocab), ErrorKind::Input,
               "{}: token id {} at input_ids[{}] is outside the vocabulary [0, {})", where, quote(t), i, vocab);
    const int64_t v = t.get<int64_t>();
    E3_REQUIRE(v >= 0 && v < vocab, ErrorKind::Input,
               "{}: token id {} at input_ids[{}] is outside the vocabulary [0, {})", where, v, i, vocab);
    p.ids.push_back(static_cast<int32_t>(v));
  }
  if (doc.contains("loss_mask") && !doc["loss_mask"].is_null()) {
    const json& m = doc["loss_mask"];
    E3_REQUIRE(m.is_array(), ErrorKind::Input, "{}: \"loss_mask\" must be an array of 0/1", where);
    E3_REQUIRE(m.size() == ids.size(), ErrorKind::Input,
               "{}: loss_mask has {} entries but input_ids has {}", where, m.size(), ids.size());
    p.mask.reserve(m.size());
    for (size_t i = 0; i < m.size(); ++i) {
      const json& v = m[i];
      const bool ok = (v.is_number_integer() && (v.get<int64_t>() == 0 || v.get<int64_t>() == 1)) || v.is_boolean();
      E3_REQUIRE(ok, ErrorKind::Input, "{}: loss_mask[{}] is {}, not 0 or 1", where, i, quote(v));
      p.mask.push_back(v.is_boolean() ? static_cast<uint8_t>(v.get<bool>()) : static_cast<uint8_t>(v.get<int64_t>()));
    }
  } else {
    p.mask.assign(p.ids.size(), 1);
  }
  return p;
}

// Parses and checks one line; `where` is "FILE:LINE". Every problem is an input error.
// The ids of a text line, checked against the model's vocabulary: a tokenizer with tokens beyond
// the embedding table (a mismatched --tokenizer) must not index past it.
Parsed encode_text_line(const json& doc, LineKind kind, const std::string& where, int64_t vocab, ChatSource& chat,
                        EncodedSample* keep) {
  Parsed p;
  p.kind = kind;
  parse_line_id(doc, where, p.has_id, p.id);  // a bad id is named whether or not a tokenizer is at hand
  const ChatEncoder& encoder = chat.get(where);
  EncodedSample s = encoder.encode(doc, kind, where, keep != nullptr);
  E3_REQUIRE(!s.ids.empty(), ErrorKind::Input, "{}: empty sample: the text gives no tokens", where);
  for (size_t i = 0; i < s.ids.size(); ++i)
    E3_REQUIRE(s.ids[i] >= 0 && s.ids[i] < vocab, ErrorKind::Input,
               "{}: the tokenizer gives token id {} (token {}), outside the model's vocabulary [0, {}): is "
               "--tokenizer the model's own?",
               where, s.ids[i], i, vocab);
  p.ids = std::move(s.ids);
  p.mask = std::move(s.mask);
  if (keep) *keep = std::move(s);
  return p;
}

// Parses and checks one line; `where` is "FILE:LINE". Every problem is an input error.
Parsed parse_line(const std::string& line, const std::string& where, int64_t vocab, ChatSource& chat,
                  EncodedSample* keep = nullptr) {
  // The JSON parser takes a NUL for the end of its input and would silently drop the rest of
  // the line. Both the first read and the re-read by offset come through here.
  if (const size_t nul = line.find('\0'); nul != std::string::npos)
    E3_THROW(ErrorKind::Input,
             "{}: a raw NUL byte at column {} (JSON text holds none: is the file UTF-16 or binary?)", where,
             nul + 1);
  const json doc = parse_json(line, where);
  try {
    const LineKind kind = line_kind(doc, where);
    if (kind != LineKind::TokenIds) return encode_text_line(doc, kind, where, vocab, chat, keep);
    return parse_sample(doc, where, vocab);
  } catch (const json::exception& e) {
    E3_THROW(ErrorKind::Input, "{}: {}", where, clip(e.what(), kLibraryMessageBytes));
  }
}


const char* file_kind(mode_t mode) {
  if (S_ISFIFO(mode)) return "FIFO";
  if (S_ISSOCK(mode)) return "socket";
  if (S_ISCHR(mode)) return "character device";
  if (S_ISBLK(mode)) return "block device";
  return "special file";
}

// Opens --data, refusing anything but a regular file: samples are re-read later by byte
// offset, and a FIFO would otherwise block the open until some writer appears.
Fd open_data_file(const std::filesystem::path& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  E3_REQUIRE(fd.get() >= 0, ErrorKind::Input, "cannot read --data {}: {}", path.string(), std::strerror(errno));
  struct stat st {};
  E3_REQUIRE(::fstat(fd.get(), &st) == 0, ErrorKind::Input, "cannot stat --data {}: {}", path.string(),
             std::strerror(errno));
  E3_REQUIRE(!S_ISDIR(st.st_mode), ErrorKind::Input, "--data {} is a directory; give the JSONL file",
             path.string());
  E3_REQUIRE(S_ISREG(st.st_mode), ErrorKind::Input,
             "--data {} is not a regular file (a {}); samples are re-read by offset, so give a JSONL file on disk",
             path.string(), file_kind(st.st_mode));
  return fd;
}

// Lines of a file descriptor, split on '\n' like std::getline: the newline is not part of
// the line, and text after the last newline is a line of its own.
class LineReader {
 public:
  LineReader(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}

  bool next(std::string& line) {
    for (;;) {
      const size_t nl = buf_.find('\n', scanned_);
      if (nl != std::string::npos) {
        line.assign(buf_, begin_, nl - begin_);
        begin_ = scanned_ = nl + 1;
        return true;
      }
      scanned_ = buf_.size();
      if (eof_) {
        if (begin_ == buf_.size()) return false;
        line.assign(buf_, begin_);
        begin_ = scanned_ = buf_.size();
        return true;
      }
      fill();
    }
  }

 private:
  void fill() {
    constexpr size_t kChunk = size_t{1} << 20;
    buf_.erase(0, begin_);
    scanned_ -= begin_;
    begin_ = 0;
    const size_t old = buf_.size();
    buf_.resize(old + kChunk);
    ssize_t n;
    do n = ::read(fd_, buf_.data() + old, kChunk);
    while (n < 0 && errno == EINTR);
    E3_REQUIRE(n >= 0, ErrorKind::Input, "{}: read error: {}", name_, std::strerror(errno));
    buf_.resize(old + static_cast<size_t>(n));
    eof_ = n == 0;
  }

  int fd_;
  std::string name_;
  std::string buf_;
  size_t begin_ = 0;    // start of the next line in buf_
  size_t scanned_ = 0;  // buf_ holds no '\n' in [begin_, scanned_)
  bool eof_ = false;
};

// Collects the bad lines of a file: the first kMaxReported by message, the rest by count.
class BadLines {
 public:
  void add(const std::string& message) {
    if (messages_.size() < kMaxReported) messages_.push_back(message);
    ++count_;
  }
  // One error naming them all, so that one rerun can fix the whole file.
  void throw_if_any() const {
    if (count_ == 0) return;
    std::string text = fmt::format("{}", fmt::join(messages_, "\n"));
    if (count_ > messages_.size())
      text += fmt::format("\nand {} more bad line{} ({} in all)", count_ - messages_.size(),
                          count_ - messages_.size() == 1 ? "" : "s", count_);
    E3_THROW(ErrorKind::Input, "{}", text);
  }

 private:
  std::vector<std::string> messages_;
  size_t count_ = 0;
};

}  // namespace

namespace {

// A block of lines read ahead, checked on several threads, then taken in file order.
struct PendingLine {
  std::string text;
  int64_t line_no = 0;
  uint64_t offset = 0;
};
struct CheckedLine {
  std::optional<Parsed> parsed;
  uint64_t content_hash = 0;         // sample_content_hash of parsed
  std::string error;                 // an input error's message
  std::exception_ptr fatal;          // anything else (a tokenizer that cannot be loaded)
};

constexpr size_t kLinesPerBlock = 4096;

// What a rerun compares of a sample: a sample whose id, ids or mask changed is another sample,
// even with its length kept. Each field is preceded by its length, so that no two samples share
// a stream.
uint64_t sample_content_hash(const Parsed& p) {
  ContentHash h;
  const uint64_t sizes[3] = {p.has_id ? p.id.size() + 1 : 0, p.ids.size(), p.mask.size()};
  h.update(sizes, sizeof sizes).update(p.id.data(), p.id.size());
  h.update(p.ids.data(), p.ids.size() * sizeof(int32_t)).update(p.mask.data(), p.mask.size());
  return h.digest();
}

}  // namespace

Dataset Dataset::open(const std::filesystem::path& path, const DatasetOptions& options) {
  auto fd = std::make_shared<const Fd>(open_data_file(path));
  LineReader in(fd->get(), path.string());
  Dataset ds;
  ds.path_ = path;
  ds.options_ = options;
  ChatSource chat(options);
  BadLines bad;
  std::unordered_map<std::string, int64_t> first_line_of_id;

  // Everything about a line that needs no other line, in parallel; the rest in file order.
  auto check_block = [&](std::vector<PendingLine>& block) {
    std::vector<CheckedLine> checked(block.size());
    const int threads = std::max(1, std::min<int>(options.threads, static_cast<int>(block.size())));
#pragma omp parallel for schedule(dynamic, 16) num_threads(threads)
    for (size_t i = 0; i < block.size(); ++i) {
      const std::string where = fmt::format("{}:{}", path.string(), block[i].line_no);
      try {
        checked[i].parsed = parse_line(block[i].text, where, options.vocab_size, chat);
        checked[i].content_hash = sample_content_hash(*checked[i].parsed);
      } catch (const Error& e) {
        if (e.kind() == ErrorKind::Input)
          checked[i].error = e.what();
        else
          checked[i].fatal = std::current_exception();
      } catch (...) {
        checked[i].fatal = std::current_exception();
      }
    }
    for (size_t i = 0; i < block.size(); ++i) {
      if (checked[i].fatal) std::rethrow_exception(checked[i].fatal);
      const PendingLine& pl = block[i];
      const std::string where = fmt::format("{}:{}", path.string(), pl.line_no);
      try {
        if (!checked[i].parsed) E3_THROW(ErrorKind::Input, "{}", checked[i].error);
        Parsed& p = *checked[i].parsed;
        SampleRecord rec;
        rec.index = static_cast<int64_t>(ds.samples_.size());
        rec.line = pl.line_no;
        rec.offset = pl.offset;
        rec.length = pl.text.size();
        rec.original_tokens = static_cast<int64_t>(p.ids.size());
        rec.num_tokens = rec.original_tokens;
        rec.has_id = p.has_id;
        rec.id = std::move(p.id);
        rec.kind = p.kind;
        rec.content_hash = checked[i].content_hash;
        rec.mask_all_zero =
            p.kind == LineKind::Messages && std::find(p.mask.begin(), p.mask.end(), uint8_t{1}) == p.mask.end();
        if (rec.has_id) {
          auto [it, fresh] = first_line_of_id.emplace(rec.id, pl.line_no);
          E3_REQUIRE(fresh, ErrorKind::Input, "{}: duplicate id \"{}\" (first seen at line {})", where, clip(rec.id),
                     it->second);
        }
        if (rec.original_tokens > options.max_seq_len) {
          switch (options.on_long) {
            case OnLong::Error:
              E3_THROW(ErrorKind::Input, "{}: sample has {} tokens, more than --max-seq-len {} (--on-long error)",
                       where, rec.original_tokens, options.max_seq_len);
            case OnLong::Truncate:
              rec.num_tokens = options.max_seq_len;
              ++ds.truncated_;
              break;
            case OnLong::Skip:
              rec.skipped = true;
              rec.num_tokens = 0;
              ++ds.skipped_;
              break;
          }
        }
        if (rec.kind != LineKind::TokenIds) ++ds.text_lines_;
        if (rec.mask_all_zero) ++ds.mask_all_zero_;
        ds.samples_.push_back(std::move(rec));
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::Input) throw;
        bad.add(e.what());
      }
    }
    block.clear();
  };

  std::vector<PendingLine> block;
  std::string line;
  uint64_t offset = 0;
  int64_t line_no = 0;
  while (in.next(line)) {
    ++line_no;
    const uint64_t line_offset = offset;
    offset += line.size() + 1;
    if (is_blank(line)) continue;
    block.push_back({std::move(line), line_no, line_offset});
    if (block.size() == kLinesPerBlock) check_block(block);
  }
  check_block(block);
  bad.throw_if_any();
  E3_REQUIRE(!ds.samples_.empty(), ErrorKind::Input, "{}: no samples: the file is empty or holds only blank lines",
             path.string());
  ds.chat_ = chat.loaded();
  ds.file_ = std::move(fd);
  return ds;
}

std::string Dataset::shape_fingerprint() const {
  Fnv1a h;
  for (const SampleRecord& r : samples_) h.update(&r.original_tokens, sizeof r.original_tokens);
  return h.hex();
}

std::string Dataset::content_fingerprint() const {
  ContentHash h;
  for (const SampleRecord& r : samples_) h.update(&r.content_hash, sizeof r.content_hash);
  return h.hex();
}

namespace {

std::string read_line_at(const Fd& file, const std::filesystem::path& path, const SampleRecord& rec) {
  std::string line(rec.length, '\0');
  try {
    pread_exact(file.get(), line.data(), line.size(), rec.offset, ErrorKind::Input, path.string());
  } catch (const Error& e) {
    E3_THROW(ErrorKind::Input, "{}:{}: the file changed while running ({})", path.string(), rec.line, e.what());
  }
  return line;
}

}  // namespace

void Dataset::read(const SampleRecord& rec, std::vector<int32_t>& ids, std::vector<uint8_t>& mask) const {
  const std::string line = read_line_at(*file_, path_, rec);
  ChatSource chat(chat_);
  Parsed p = parse_line(line, fmt::format("{}:{}", path_.string(), rec.line), options_.vocab_size, chat);
  E3_REQUIRE(static_cast<int64_t>(p.ids.size()) == rec.original_tokens, ErrorKind::Input,
             "{}:{}: the file changed while running", path_.string(), rec.line);
  p.ids.resize(static_cast<size_t>(rec.num_tokens));
  p.mask.resize(static_cast<size_t>(rec.num_tokens));
  ids = std::move(p.ids);
  mask = std::move(p.mask);
}

EncodedSample Dataset::read_encoded(const SampleRecord& rec) const {
  const std::string line = read_line_at(*file_, path_, rec);
  ChatSource chat(chat_);
  EncodedSample s;
  Parsed p = parse_line(line, fmt::format("{}:{}", path_.string(), rec.line), options_.vocab_size, chat, &s);
  s.ids = std::move(p.ids);
  s.mask = std::move(p.mask);
  return s;
}

}  // namespace e3::io
