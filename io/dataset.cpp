#include "io/dataset.h"

#include <fstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "kernels/error.h"
#include "kernels/hash.h"

namespace e3::io {
namespace {

using nlohmann::json;

struct Parsed {
  bool has_id = false;
  std::string id;
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;
};

bool is_blank(const std::string& line) {
  return line.find_first_not_of(" \t\r") == std::string::npos;
}

// Parses and checks one line; `where` is "FILE:LINE".
Parsed parse_line(const std::string& line, const std::string& where, int64_t vocab) {
  json doc;
  try {
    doc = json::parse(line);
  } catch (const json::parse_error& e) {
    E3_THROW(ErrorKind::Input, "{}: invalid JSON: {}", where, e.what());
  }
  E3_REQUIRE(doc.is_object(), ErrorKind::Input, "{}: a sample must be a JSON object", where);
  Parsed p;
  if (doc.contains("id") && !doc["id"].is_null()) {
    const json& id = doc["id"];
    E3_REQUIRE(id.is_string() || id.is_number_integer(), ErrorKind::Input,
               "{}: \"id\" must be a string, got {}", where, id.dump());
    p.has_id = true;
    p.id = id.is_string() ? id.get<std::string>() : id.dump();
  }
  E3_REQUIRE(doc.contains("input_ids"), ErrorKind::Input, "{}: missing \"input_ids\"", where);
  const json& ids = doc["input_ids"];
  E3_REQUIRE(ids.is_array(), ErrorKind::Input, "{}: \"input_ids\" must be an array of integers", where);
  E3_REQUIRE(!ids.empty(), ErrorKind::Input, "{}: empty sample: \"input_ids\" has no tokens", where);
  p.ids.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const json& t = ids[i];
    E3_REQUIRE(t.is_number_integer(), ErrorKind::Input, "{}: input_ids[{}] is {}, not an integer", where, i,
               t.dump());
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
      E3_REQUIRE(ok, ErrorKind::Input, "{}: loss_mask[{}] is {}, not 0 or 1", where, i, v.dump());
      p.mask.push_back(v.is_boolean() ? static_cast<uint8_t>(v.get<bool>()) : static_cast<uint8_t>(v.get<int64_t>()));
    }
  } else {
    p.mask.assign(p.ids.size(), 1);
  }
  return p;
}

}  // namespace

OnLong parse_on_long(const std::string& s) {
  if (s == "skip") return OnLong::Skip;
  if (s == "truncate") return OnLong::Truncate;
  if (s == "error") return OnLong::Error;
  E3_THROW(ErrorKind::Usage, "--on-long must be skip, truncate or error, not '{}'", s);
}

const char* on_long_name(OnLong o) {
  switch (o) {
    case OnLong::Skip: return "skip";
    case OnLong::Truncate: return "truncate";
    case OnLong::Error: return "error";
  }
  return "?";
}

Dataset Dataset::open(const std::filesystem::path& path, const DatasetOptions& options) {
  std::ifstream in(path, std::ios::binary);
  E3_REQUIRE(in.good(), ErrorKind::Input, "cannot read --data {}", path.string());
  Dataset ds;
  ds.path_ = path;
  ds.options_ = options;
  std::unordered_map<std::string, int64_t> first_line_of_id;
  std::string line;
  uint64_t offset = 0;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const uint64_t line_offset = offset;
    offset += line.size() + 1;
    if (is_blank(line)) continue;
    const std::string where = fmt::format("{}:{}", path.string(), line_no);
    Parsed p = parse_line(line, where, options.vocab_size);

    SampleRecord rec;
    rec.index = static_cast<int64_t>(ds.samples_.size());
    rec.line = line_no;
    rec.offset = line_offset;
    rec.length = line.size();
    rec.original_tokens = static_cast<int64_t>(p.ids.size());
    rec.num_tokens = rec.original_tokens;
    rec.has_id = p.has_id;
    rec.id = std::move(p.id);
    if (rec.has_id) {
      auto [it, fresh] = first_line_of_id.emplace(rec.id, line_no);
      E3_REQUIRE(fresh, ErrorKind::Input, "{}: duplicate id \"{}\" (first seen at line {})", where, rec.id,
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
    ds.samples_.push_back(std::move(rec));
  }
  E3_REQUIRE(!in.bad(), ErrorKind::Input, "{}: read error", path.string());
  return ds;
}

std::string Dataset::shape_fingerprint() const {
  Fnv1a h;
  for (const SampleRecord& r : samples_) h.update(&r.original_tokens, sizeof r.original_tokens);
  return h.hex();
}

void Dataset::read(const SampleRecord& rec, std::vector<int32_t>& ids, std::vector<uint8_t>& mask) const {
  if (!reader_.is_open()) reader_.open(path_, std::ios::binary);
  std::ifstream& in = reader_;
  in.clear();
  E3_REQUIRE(in.good(), ErrorKind::Input, "cannot reopen --data {}", path_.string());
  std::string line(rec.length, '\0');
  in.seekg(static_cast<std::streamoff>(rec.offset));
  in.read(line.data(), static_cast<std::streamsize>(rec.length));
  E3_REQUIRE(in.good(), ErrorKind::Input, "{}:{}: the file changed while running", path_.string(), rec.line);
  Parsed p = parse_line(line, fmt::format("{}:{}", path_.string(), rec.line), options_.vocab_size);
  E3_REQUIRE(static_cast<int64_t>(p.ids.size()) == rec.original_tokens, ErrorKind::Input,
             "{}:{}: the file changed while running", path_.string(), rec.line);
  p.ids.resize(static_cast<size_t>(rec.num_tokens));
  p.mask.resize(static_cast<size_t>(rec.num_tokens));
  ids = std::move(p.ids);
  mask = std::move(p.mask);
}

}  // namespace e3::io
