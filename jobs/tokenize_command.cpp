#include "jobs/tokenize_command.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "core/error.h"
#include "io/dataset.h"
#include "model/config.h"
#include "parallel/agreement.h"

namespace e3::jobs {
namespace {

using Clock = std::chrono::steady_clock;

// One token-id line as the extraction reads it back: {"id"?, "input_ids", "loss_mask"}.
std::string token_line(const io::SampleRecord& rec, const io::EncodedSample& s) {
  std::string out;
  out.reserve(s.ids.size() * 9 + 64);
  out += '{';
  if (rec.has_id) out += fmt::format("\"id\": {}, ", nlohmann::json(rec.id).dump());
  out += "\"input_ids\": [";
  for (size_t i = 0; i < s.ids.size(); ++i) fmt::format_to(std::back_inserter(out), "{}{}", i ? ", " : "", s.ids[i]);
  out += "], \"loss_mask\": [";
  for (size_t i = 0; i < s.mask.size(); ++i) {
    if (i) out += ", ";
    out += s.mask[i] ? '1' : '0';
  }
  out += "]}\n";
  return out;
}

// The file OUT.jsonl, written under a temporary name and renamed when complete: a crash leaves
// no half file under the name the extraction would read.
class OutputFile {
 public:
  explicit OutputFile(std::filesystem::path path) : path_(std::move(path)), temp_(path_.string() + ".partial") {
    std::error_code ec;
    E3_REQUIRE(!std::filesystem::exists(path_, ec), ErrorKind::Output,
               "tokenize --out {} exists: remove it or give another path", path_.string());
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    E3_REQUIRE(fd_ >= 0, ErrorKind::Output, "cannot create {}: {}", temp_.string(), std::strerror(errno));
  }
  ~OutputFile() {
    if (fd_ >= 0) {
      ::close(fd_);
      ::unlink(temp_.c_str());  // not committed: an error on the way
    }
  }
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(const std::string& text) {
    for (size_t done = 0; done < text.size();) {
      const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      E3_REQUIRE(n > 0, ErrorKind::Output, "cannot write {}: {}", temp_.string(), std::strerror(errno));
      done += static_cast<size_t>(n);
      bytes_ += static_cast<uint64_t>(n);
    }
  }
  void commit() {
    E3_REQUIRE(::fsync(fd_) == 0, ErrorKind::Output, "cannot sync {}: {}", temp_.string(), std::strerror(errno));
    E3_REQUIRE(::close(fd_) == 0, ErrorKind::Output, "cannot close {}: {}", temp_.string(), std::strerror(errno));
    fd_ = -1;
    E3_REQUIRE(::rename(temp_.c_str(), path_.c_str()) == 0, ErrorKind::Output, "cannot rename {} to {}: {}",
               temp_.string(), path_.string(), std::strerror(errno));
  }
  uint64_t bytes() const { return bytes_; }

 private:
  std::filesystem::path path_, temp_;
  int fd_ = -1;
  uint64_t bytes_ = 0;
};

// --- tokenize --show

// The start of the UTF-8 character holding byte i (a byte-level token can end inside one).
size_t char_start(const std::string& text, size_t i) {
  while (i > 0 && i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) --i;
  return i;
}

// A token's text as shown: whole characters only (a character split between tokens is shown
// with the token it starts in), a newline as a visible mark before the line break.
std::string shown_piece(const std::string& text, size_t begin, size_t end) {
  begin = char_start(text, begin);
  end = end >= text.size() ? text.size() : char_start(text, end);
  std::string out;
  for (size_t i = begin; i < end; ++i) {
    if (text[i] == '\n')
      out += "\u21b5\n";
    else
      out += text[i];
  }
  return out;
}

std::string show_colored(const io::EncodedSample& s) {
  // Token boundaries as alternating backgrounds; trained-on tokens in green.
  static constexpr const char* kPlain[2] = {"\x1b[48;5;236m", "\x1b[48;5;239m"};
  static constexpr const char* kTrained[2] = {"\x1b[1;97;48;5;22m", "\x1b[1;97;48;5;28m"};
  std::string out;
  for (size_t k = 0; k < s.tokens.size(); ++k) {
    const std::string piece = shown_piece(s.text, s.tokens[k].begin, s.tokens[k].end);
    const char* style = s.mask[k] ? kTrained[k % 2] : kPlain[k % 2];
    // A colour does not cross a line break (terminals would paint the rest of the line).
    size_t at = 0;
    while (at <= piece.size()) {
      const size_t nl = piece.find('\n', at);
      const std::string line = piece.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
      if (!line.empty()) out += fmt::format("{}{}\x1b[0m", style, line);
      if (nl == std::string::npos) break;
      out += '\n';
      at = nl + 1;
    }
  }
  return out + "\n";
}

// Without colour: one token a line, so that every boundary and mask value is unambiguous.
std::string show_plain(const io::EncodedSample& s, const tok::Tokenizer& tokenizer) {
  std::string out = "  index       id  mask  token\n";
  for (size_t k = 0; k < s.ids.size(); ++k) {
    const std::string bytes =
        k < s.tokens.size() ? s.text.substr(s.tokens[k].begin, s.tokens[k].end - s.tokens[k].begin)
                            : tokenizer.token_bytes(s.ids[k]);
    out += fmt::format("{:7} {:8} {:5}  {}\n", k, s.ids[k], s.mask[k] ? 1 : 0, nlohmann::json(bytes).dump(-1, ' ', false,
                                                                                               nlohmann::json::error_handler_t::replace));
  }
  return out;
}

bool use_color(const TokenizeOptions& o) {
  if (o.color == ColorMode::Always) return true;
  if (o.color == ColorMode::Never) return false;
  return ::isatty(STDOUT_FILENO) && !o.env.get("NO_COLOR");
}

const char* kind_name(io::LineKind k) {
  switch (k) {
    case io::LineKind::TokenIds: return "token ids";
    case io::LineKind::Messages: return "conversation";
    case io::LineKind::Text: return "text";
  }
  return "?";
}

void show_sample(const TokenizeOptions& o, const io::Dataset& data) {
  const auto& samples = data.samples();
  const int64_t n = *o.show;
  E3_REQUIRE(n >= 0 && n < static_cast<int64_t>(samples.size()), ErrorKind::Usage,
             "tokenize --show {}: {} holds samples 0 to {}", n, o.data.string(), samples.size() - 1);
  const io::SampleRecord& rec = samples[static_cast<size_t>(n)];
  const io::EncodedSample s = data.read_encoded(rec);
  const int64_t trained = std::count(s.mask.begin(), s.mask.end(), uint8_t{1});
  std::string head = fmt::format("sample {} ({}:{}{}), {}: {} tokens, {} trained on (loss_mask 1, {:.1f}%)", n,
                                 o.data.string(), rec.line,
                                 rec.has_id ? ", id " + nlohmann::json(rec.id).dump() : std::string(),
                                 kind_name(rec.kind), s.ids.size(), trained,
                                 s.ids.empty() ? 0.0 : 100.0 * trained / static_cast<double>(s.ids.size()));
  if (data.chat() && rec.kind == io::LineKind::Messages) head += "; template: " + data.chat()->template_source();
  std::string body;
  if (!s.tokens.empty() && use_color(o)) {
    body = show_colored(s) +
           "\x1b[1;97;48;5;22m trained on \x1b[0m \x1b[48;5;236m not trained on \x1b[0m  (the shade alternates at "
           "each token boundary; \u21b5 is a newline)\n";
  } else {
    if (!data.chat() && rec.kind == io::LineKind::TokenIds) {
      body = "  index       id  mask\n";
      for (size_t k = 0; k < s.ids.size(); ++k) body += fmt::format("{:7} {:8} {:5}\n", k, s.ids[k], s.mask[k] ? 1 : 0);
    } else {
      body = show_plain(s, data.chat()->tokenizer());
    }
  }
  std::fwrite(head.data(), 1, head.size(), stdout);
  std::fputc('\n', stdout);
  std::fwrite(body.data(), 1, body.size(), stdout);
  std::fflush(stdout);
}

void write_token_lines(const TokenizeOptions& o, const io::Dataset& data, int threads) {
  const auto t0 = Clock::now();
  OutputFile out(o.out);
  const auto& samples = data.samples();
  constexpr size_t kBlock = 1024;
  std::vector<std::string> lines(kBlock);
  int64_t tokens = 0, trained = 0;
  for (size_t first = 0; first < samples.size(); first += kBlock) {
    const size_t n = std::min(kBlock, samples.size() - first);
    std::vector<int64_t> block_tokens(n, 0), block_trained(n, 0);
    std::vector<std::exception_ptr> failed(n);
#pragma omp parallel for schedule(dynamic, 8) num_threads(threads)
    for (size_t i = 0; i < n; ++i) {
      try {
        const io::EncodedSample s = data.read_encoded(samples[first + i]);
        lines[i] = token_line(samples[first + i], s);
        block_tokens[i] = static_cast<int64_t>(s.ids.size());
        block_trained[i] = std::count(s.mask.begin(), s.mask.end(), uint8_t{1});
      } catch (...) {
        failed[i] = std::current_exception();
      }
    }
    for (size_t i = 0; i < n; ++i) {
      if (failed[i]) std::rethrow_exception(failed[i]);
      out.write(lines[i]);
      tokens += block_tokens[i];
      trained += block_trained[i];
    }
  }
  out.commit();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  spdlog::info("tokenize: wrote {} ({} samples, {} tokens, {} trained on: {:.1f}%) in {:.1f} s", o.out.string(),
               samples.size(), tokens, trained, tokens ? 100.0 * trained / static_cast<double>(tokens) : 0.0, seconds);
}

}  // namespace

io::ChatOptions chat_options(const std::filesystem::path& tokenizer_dir, const std::filesystem::path& chat_template,
                             io::MaskMode mask) {
  return {tokenizer_dir, chat_template, mask, io::default_template_time()};
}

int run_tokenize(const TokenizeOptions& o, const parallel::MpiEnv& mpi) {
  parallel::agreed_phase(mpi.world(), [&] {
    if (mpi.world_rank() != 0) return;  // one output, whatever the launcher
    const int threads = o.threads > 0 ? o.threads
                                      : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) /
                                                        parallel::ranks_on_node(mpi.world()));
    const std::filesystem::path tokenizer_dir = o.tokenizer_dir.empty() ? o.model_dir : o.tokenizer_dir;
    io::DatasetOptions d;
    // The model's embedding table bounds the ids; without a model, the tokenizer's own vocabulary.
    std::shared_ptr<const io::ChatEncoder> preloaded;
    if (!o.model_dir.empty()) {
      d.vocab_size = model::load_model_config(o.model_dir).vocab_size;
    } else {
      preloaded = io::ChatEncoder::load(chat_options(tokenizer_dir, o.chat_template, o.mask));
      d.vocab_size = preloaded->tokenizer().vocab_size();
    }
    d.max_seq_len = std::numeric_limits<int64_t>::max();  // the extraction applies --max-seq-len to the ids
    d.load_chat = [&] {
      return preloaded ? preloaded : io::ChatEncoder::load(chat_options(tokenizer_dir, o.chat_template, o.mask));
    };
    d.threads = threads;
    const auto t0 = Clock::now();
    const io::Dataset data = io::Dataset::open(o.data, d);
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!o.show) {
      spdlog::info("tokenize: {}: {} samples ({} tokenized with {}{}) checked in {:.1f} s on {} thread{}",
                   o.data.string(), data.samples().size(), data.num_text_lines(), tokenizer_dir.string(),
                   data.chat() ? fmt::format(", --mask {}", name_of(o.mask)) : "", seconds, threads,
                   threads == 1 ? "" : "s");
      if (data.num_mask_all_zero() > 0) {
        std::string lines;
        int listed = 0;
        for (const io::SampleRecord& r : data.samples())
          if (r.mask_all_zero && listed++ < 10) lines += fmt::format("{}{}", lines.empty() ? "" : ", ", r.line);
        spdlog::warn("tokenize: {} conversation{} train on no token (loss_mask all 0: no assistant reply under "
                     "--mask {}), at line{} {}{}",
                     data.num_mask_all_zero(), data.num_mask_all_zero() == 1 ? "" : "s", name_of(o.mask),
                     data.num_mask_all_zero() == 1 ? "" : "s", lines, data.num_mask_all_zero() > 10 ? ", ..." : "");
      }
      write_token_lines(o, data, threads);
    } else {
      show_sample(o, data);
    }
  });
  return 0;
}

}  // namespace e3::jobs
