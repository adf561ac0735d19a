// render_template: the chat-template interpreter (io/jinja) driven by JSON lines, for the oracle
// test (tests/oracle/render_templates.mjs) and for looking at what a template renders.
// Each input line on stdin: {"template": PATH, "context": {...}, "tags": [[POINTER, TAG], ...]?,
// "now": UNIX_SECONDS?}. Each output line: {"text": ..., "origins": [[BEGIN, END, TAG], ...],
// "generation": [[BEGIN, END], ...]} or {"error": MESSAGE} (a template error, as the extractor
// would report it). Templates are parsed once per path. `--time N` renders each line N more
// times and reports the mean render time on stderr.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_read.h"
#include "io/jinja/template.h"

int main(int argc, char** argv) {
  int repeat = 0;
  if (argc == 3 && std::string(argv[1]) == "--time") repeat = std::stoi(argv[2]);
  std::map<std::string, e3::jinja::Template> templates;
  std::string line;
  double total_us = 0;
  long renders = 0;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    nlohmann::ordered_json out;
    try {
      const auto in = nlohmann::ordered_json::parse(line);
      const std::string path = in.at("template").get<std::string>();
      auto it = templates.find(path);
      if (it == templates.end()) {
        const std::string source = e3::RegularFile(path, e3::ErrorKind::Usage).read_all(path, e3::ErrorKind::Usage);
        const auto slash = path.find_last_of('/');
        it = templates.emplace(path, e3::jinja::Template::parse(source, path.substr(slash + 1))).first;
      }
      std::vector<std::pair<std::string, int32_t>> tags;
      if (in.contains("tags"))
        for (const auto& t : in["tags"]) tags.emplace_back(t[0].get<std::string>(), t[1].get<int32_t>());
      e3::jinja::RenderOptions options;
      if (in.contains("now")) options.now = std::chrono::system_clock::from_time_t(in["now"].get<int64_t>());
      const auto& context = in.at("context");
      const e3::jinja::Rendered r = it->second.render(context, tags, options);
      for (int k = 0; k < repeat; ++k) {
        const auto t0 = std::chrono::steady_clock::now();
        const auto again = it->second.render(context, tags, options);
        total_us += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        ++renders;
        if (again.text != r.text) throw std::runtime_error("a second render differs from the first");
      }
      out["text"] = r.text;
      out["origins"] = nlohmann::ordered_json::array();
      for (const auto& o : r.origins) out["origins"].push_back({o.begin, o.end, o.tag});
      out["generation"] = nlohmann::ordered_json::array();
      for (const auto& [b, e] : r.generation) out["generation"].push_back({b, e});
    } catch (const e3::Error& e) {
      out = nlohmann::ordered_json::object();
      out["error"] = e.what();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "render_template: bad input line: %s\n", e.what());
      return 2;
    }
    std::cout << out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
  }
  if (renders) std::fprintf(stderr, "render_template: %ld renders, mean %.1f us\n", renders, total_us / renders);
  return 0;
}
