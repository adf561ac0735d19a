#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_read.h"
#include "io/tokenizer/config.h"

namespace e3::tok {

std::string token_content(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return "";
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  E3_THROW(ErrorKind::Model, "{}: a token must be a string or an object with \"content\", not {}", where,
           json_excerpt(j));
}

ConfigFile read_tokenizer_config(const std::filesystem::path& dir) {
  ConfigFile out;
  TokenizerConfig& c = out.config;
  const auto path = dir / "tokenizer_config.json";
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    const RegularFile file(path, ErrorKind::Model);
    out.raw = file.read_all(path, ErrorKind::Model);
    const nlohmann::json j = parse_json(out.raw, ErrorKind::Model, path.string());
    E3_REQUIRE(j.is_object(), ErrorKind::Model, "{}: must be a JSON object", path.string());
    const std::string where = path.string();
    auto bool_key = [&](const char* key, bool& value, bool& given) {
      auto it = j.find(key);
      if (it == j.end() || it->is_null()) return;
      E3_REQUIRE(it->is_boolean(), ErrorKind::Model, "{}: '{}' must be true or false", where, key);
      value = it->get<bool>();
      given = true;
    };
    bool_key("add_bos_token", c.add_bos_token, out.has_add_bos);
    bool_key("add_eos_token", c.add_eos_token, out.has_add_eos);
    // What HF passes a chat template: its special tokens, as strings.
    for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
      auto it = j.find(key);
      if (it == j.end()) continue;
      const std::string value = token_content(*it, where + ": " + key);
      if (it->is_null()) continue;
      c.template_variables[key] = value;
      if (std::string_view(key) == "bos_token") c.bos_token = value;
      if (std::string_view(key) == "eos_token") c.eos_token = value;
      if (std::string_view(key) == "pad_token") c.pad_token = value;
      if (std::string_view(key) == "unk_token") c.unk_token = value;
    }
    if (auto it = j.find("additional_special_tokens"); it != j.end() && it->is_array()) {
      nlohmann::json list = nlohmann::json::array();
      for (const auto& t : *it) list.push_back(token_content(t, where + ": additional_special_tokens"));
      c.template_variables["additional_special_tokens"] = list;
    }
    if (auto it = j.find("chat_template"); it != j.end() && !it->is_null()) {
      if (it->is_string()) {
        c.chat_template = it->get<std::string>();
      } else {
        E3_REQUIRE(it->is_array(), ErrorKind::Model, "{}: chat_template must be a string or a list of {{name, template}}",
                   where);
        for (const auto& t : *it) {
          E3_REQUIRE(t.is_object() && t.contains("name") && t["name"].is_string() && t.contains("template") &&
                         t["template"].is_string(),
                     ErrorKind::Model, "{}: each named chat_template needs a string 'name' and 'template'", where);
          const std::string name = t["name"].get<std::string>();
          if (name == "default") {
            c.chat_template = t["template"].get<std::string>();
          } else {
            c.named_templates[name] = t["template"].get<std::string>();
          }
        }
      }
    }
    if (auto it = j.find("added_tokens_decoder"); it != j.end() && it->is_object()) {
      for (auto t = it->begin(); t != it->end(); ++t) {
        AddedToken a;
        try {
          a.id = std::stoi(t.key());
        } catch (const std::exception&) {
          E3_THROW(ErrorKind::Model, "{}: added_tokens_decoder key '{}' is not an id", where, t.key());
        }
        a.content = token_content(t.value(), where + ": added_tokens_decoder");
        const auto& v = t.value();
        if (v.is_object()) {
          a.special = v.value("special", false);
          a.lstrip = v.value("lstrip", false);
          a.rstrip = v.value("rstrip", false);
          a.single_word = v.value("single_word", false);
          a.normalized = v.value("normalized", !a.special);
        }
        out.added_tokens_decoder.push_back(a);
      }
    }
  }
  // Recent transformers read the template from its own file first.
  const auto jinja = dir / "chat_template.jinja";
  if (std::filesystem::exists(jinja, ec)) {
    const RegularFile file(jinja, ErrorKind::Model);
    c.chat_template = file.read_all(jinja, ErrorKind::Model);
  }
  return out;
}

}  // namespace e3::tok
