// io/jinja's contract beyond the text (tests/test_jinja_constructs.cpp pins the text): the error
// messages and their kind, strftime_now's clock, the provenance of output bytes and the
// {% generation %} spans, rendering from several threads, and the limits that keep a hostile
// template from crashing or exhausting the process.
#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/jinja/template.h"

namespace {

using e3::jinja::Origin;
using e3::jinja::Rendered;
using e3::jinja::RenderOptions;
using e3::jinja::Template;
using Tags = std::vector<std::pair<std::string, int32_t>>;
using Json = nlohmann::ordered_json;

const Json& conversation() {
  static const Json context = Json::parse(R"({"messages": [
      {"role": "user", "content": "  Hello, World  "},
      {"role": "assistant", "content": "<think>r</think>\n\nAnswer",
       "tool_calls": [{"function": {"name": "f", "arguments": {"city": "Paris", "n": 2}}}]}]})");
  return context;
}
const Tags kTags = {{"/messages/0/content", 1}, {"/messages/1/content", 2}, {"/messages/1/tool_calls", 3}};

Rendered render(const std::string& source, const Json& context = conversation(), const Tags& tags = kTags,
                const RenderOptions& options = {}) {
  return Template::parse(source, "t.jinja").render(context, tags, options);
}

// Each origin as (the bytes it covers, its tag), in order.
std::vector<std::pair<std::string, int32_t>> pieces(const Rendered& r) {
  std::vector<std::pair<std::string, int32_t>> out;
  for (const Origin& o : r.origins) out.emplace_back(r.text.substr(o.begin, o.end - o.begin), o.tag);
  return out;
}

// The message of the e3::Error (ErrorKind::Input) that `fn` throws; "" when it does not throw.
template <typename Fn>
std::string input_error(Fn&& fn) {
  try {
    fn();
  } catch (const e3::Error& e) {
    EXPECT_EQ(e.kind(), e3::ErrorKind::Input) << e.what();
    return e.what();
  }
  return "";
}

std::string parse_error(const std::string& source) {
  return input_error([&] { Template::parse(source, "t.jinja"); });
}
std::string render_error(const std::string& source, const Json& context = conversation(),
                         const RenderOptions& options = {}) {
  return input_error([&] { render(source, context, {}, options); });
}

TEST(JinjaErrors, SyntaxErrorsNameTheFileLineAndColumn) {
  EXPECT_EQ(parse_error("line1\n{{ (1 }}"), "t.jinja:2:7: unexpected '}', expected ')'");
  EXPECT_EQ(parse_error("{% if %}{% endif %}"), "t.jinja:1:7: expected an expression, got end of statement block");
  EXPECT_EQ(parse_error("{{ 1 + }}"), "t.jinja:1:8: expected an expression, got end of print statement");
  EXPECT_EQ(parse_error("a\n\n  {% endif %}"), "t.jinja:3:6: encountered unknown tag 'endif'");
  EXPECT_EQ(parse_error("{% foo %}"), "t.jinja:1:4: encountered unknown tag 'foo'");
  EXPECT_EQ(parse_error("{{ 'unterminated }}"), "t.jinja:1:4: unexpected end of string");
  EXPECT_EQ(parse_error("{% if true %}x"),
            "t.jinja:1:15: unexpected end of template: jinja was looking for 'elif' or 'else' or 'endif'; the "
            "innermost block that needs closing is 'if'");
  EXPECT_EQ(parse_error("{% break %}"), "t.jinja:1:4: 'break' outside of a loop");
  // An unknown filter or test is a syntax error, as jinja2's compiler makes it, except where
  // jinja2 defers it to when it is reached: an if's test and bodies, a conditional expression.
  EXPECT_EQ(parse_error("{% for m in [] %}{{ m | nosuch }}{% endfor %}"), "t.jinja:1:25: No filter named 'nosuch'.");
  EXPECT_EQ(parse_error("{% if true %}{% macro f() %}{{ 1 is nosuch }}{% endmacro %}{% endif %}"),
            "t.jinja:1:37: No test named 'nosuch'.");
  EXPECT_EQ(parse_error("{% if false %}{% filter nosuch %}{% endfilter %}{% endif %}"), "t.jinja:1:25: No filter named 'nosuch'.");
  EXPECT_EQ(render("{% if false %}{{ 1|nosuch }}{% elif false %}{{ 1 is nosuch }}{% endif %}{{ 1|nosuch if false else 2 }}").text,
            "2");
  EXPECT_EQ(render_error("{% if true %}{{ 1|nosuch }}{% endif %}"), "t.jinja:1: No filter named 'nosuch' found.");
  EXPECT_EQ(render_error("{{ [1]|map('nosuch')|list }}"), "t.jinja:1: No filter named 'nosuch'.");
  // Columns count code points, not bytes.
  EXPECT_EQ(parse_error("héllo {{ ) }}"), "t.jinja:1:10: unexpected ')'");
}

TEST(JinjaErrors, RuntimeErrorsNameTheFileAndLine) {
  EXPECT_EQ(render_error("a\n\n{{ 'a' + 1 }}"), "t.jinja:3: can only concatenate str (not \"int\") to str");
  EXPECT_EQ(render_error("{{ x.y }}"), "t.jinja:1: 'x' is undefined");
  EXPECT_EQ(render_error("{{ 1 // 0 }}"), "t.jinja:1: integer division or modulo by zero");
  EXPECT_EQ(render_error("{% macro m(a) %}{% endmacro %}\n{{ m(1, 2) }}"),
            "t.jinja:2: macro 'm' takes not more than 1 argument(s)");
  // The sandbox (ImmutableSandboxedEnvironment) refuses methods that change a list or dict.
  EXPECT_EQ(render_error("{% set x = [1] %}{% set _ = x.append(2) %}"),
            "t.jinja:1: access to attribute 'append' of 'list' object is unsafe.");
  EXPECT_EQ(render_error("{{ {'a': 1}.pop('a') }}"), "t.jinja:1: access to attribute 'pop' of 'dict' object is unsafe.");
}

TEST(JinjaErrors, RaiseExceptionIsAnInputErrorWithTheTemplateLine) {
  const std::string source =
      "{% for m in messages %}\n"
      "{% if m.role == 'assistant' and loop.first %}\n"
      "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}\n"
      "{% endif %}\n"
      "{% endfor %}";
  const Json context = Json::parse(R"({"messages": [{"role": "assistant", "content": "x"}]})");
  EXPECT_EQ(render_error(source, context),
            "t.jinja:3: Conversation roles must alternate user/assistant/user/assistant/...");
  EXPECT_EQ(render(source).text, "");  // the user turn comes first there: nothing raised
}

TEST(JinjaErrors, UndefinedIsJinja2sDefaultNotStrict) {
  // Printing, testing, iterating, defaulting and comparing an undefined value are fine; using it
  // as a value (arithmetic, attribute of it, a call, tojson) raises.
  EXPECT_EQ(render("[{{ nothing }}][{{ nothing is defined }}][{% for x in nothing %}x{% endfor %}]"
                   "[{{ nothing|default('d') }}][{{ nothing == none }}][{{ nothing|length }}][{{ messages[0].zz }}]")
                .text,
            "[][False][][d][False][0][]");
  EXPECT_EQ(render_error("{{ nothing + 1 }}"), "t.jinja:1: 'nothing' is undefined");
  EXPECT_EQ(render_error("{{ nothing.attr }}"), "t.jinja:1: 'nothing' is undefined");
  EXPECT_EQ(render_error("{{ nothing|tojson }}"), "t.jinja:1: Object of type Undefined is not JSON serializable");
  EXPECT_EQ(render_error("{{ nothing|int }}"), "t.jinja:1: 'nothing' is undefined");
}

// Where the JS oracle (@huggingface/jinja) and Python differ, Python's outcome: these are the
// constructs behind KNOWN_JS_GAPS in tests/oracle/render_templates.mjs.
TEST(JinjaErrors, PythonsOutcomeWhereTheJsOracleDiffers) {
  // str + dict (tool arguments given as an object, DeepSeek's templates): a TypeError.
  EXPECT_EQ(render_error("{{ 'args: ' + messages[1].tool_calls[0].function.arguments }}"),
            "t.jinja:1: can only concatenate str (not \"dict\") to str");
  // `content | trim` of a null or missing content (Llama-3.1's tool calls): 'None' or ''.
  const Json context = Json::parse(R"({"messages": [{"role": "assistant", "content": null}, {"role": "assistant"}]})");
  EXPECT_EQ(render("{% for m in messages %}[{{ m.content|trim }}]{% endfor %}", context).text, "[None][]");
  // A for loop over an undefined value iterates nothing (Kimi-K2 without content).
  EXPECT_EQ(render("{% for x in messages[1].content %}x{% else %}none{% endfor %}", context).text, "none");
  // selectattr('tool_calls', 'undefined') selects the messages without tool calls (Mistral-Nemo).
  EXPECT_EQ(render("{{ messages|selectattr('tool_calls', 'undefined')|list|length }}").text, "1");
}

TEST(JinjaRender, StrftimeNowFormatsTheGivenTimeInLocalTime) {
  ASSERT_EQ(setenv("TZ", "UTC", 1), 0);
  tzset();
  RenderOptions options;
  options.now = std::chrono::system_clock::from_time_t(1741338300);  // 2025-03-07 09:05:00 UTC
  EXPECT_EQ(render("{{ strftime_now('%d %B %Y') }}|{{ strftime_now('%Y-%m-%d %H:%M:%S %a %b %j') }}", conversation(),
                   {}, options)
                .text,
            "07 March 2025|2025-03-07 09:05:00 Fri Mar 066");
  ASSERT_EQ(setenv("TZ", "Asia/Tokyo", 1), 0);
  tzset();
  EXPECT_EQ(render("{{ strftime_now('%H:%M') }}", conversation(), {}, options).text, "18:05");
  ASSERT_EQ(setenv("TZ", "UTC", 1), 0);
  tzset();
}

TEST(JinjaProvenance, TagsFollowTheContentThroughStringOperations) {
  using P = std::vector<std::pair<std::string, int32_t>>;
  // Printed as is, and inside a concatenation: only the content's bytes carry its tag.
  EXPECT_EQ(pieces(render("<{{ '[' ~ messages[0].content ~ ']' }}>")), (P{{"  Hello, World  ", 1}}));
  // Slicing, strip(), |trim, and the split of a reply (Qwen3 and DeepSeek drop the reasoning).
  EXPECT_EQ(pieces(render("{{ messages[0].content[2:7] }}|{{ messages[0].content.strip() }}|{{ messages[0].content|trim }}")),
            (P{{"Hello", 1}, {"Hello, World", 1}, {"Hello, World", 1}}));
  EXPECT_EQ(pieces(render("{{ messages[1].content.split('</think>')[-1].lstrip('\\n') }}")), (P{{"Answer", 2}}));
  // replace(): the untouched parts keep their tag, the replacement (a template literal) has none.
  const Rendered replaced = render("{{ messages[0].content.replace('World', 'there') }}");
  EXPECT_EQ(replaced.text, "  Hello, there  ");
  EXPECT_EQ(pieces(replaced), (P{{"  Hello, ", 1}, {"  ", 1}}));
  // Case mapping keeps the tag; repeating and accumulating in a namespace too.
  EXPECT_EQ(pieces(render("{{ messages[0].content|upper }}")), (P{{"  HELLO, WORLD  ", 1}}));
  EXPECT_EQ(pieces(render("{% set ns = namespace(c='') %}{% set ns.c = ns.c + messages[0].content|trim %}<{{ ns.c }}>")),
            (P{{"Hello, World", 1}}));
  // A set block's buffer keeps the tags of what was written into it.
  EXPECT_EQ(pieces(render("{% set x %}A{{ messages[0].content|trim }}B{% endset %}{{ x }}")), (P{{"Hello, World", 1}}));
  // Adjacent pieces of one tag merge into one origin.
  EXPECT_EQ(render("{{ messages[0].content }}{{ messages[0].content }}").origins, (std::vector<Origin>{{0, 32, 1}}));
}

TEST(JinjaProvenance, TojsonTagsTheEncodingOfATaggedValue) {
  using P = std::vector<std::pair<std::string, int32_t>>;
  // A tagged string's JSON encoding, quotes and escapes included, carries its tag; so does every
  // value of a tagged subtree (tool_calls), while the keys and values around it do not.
  EXPECT_EQ(pieces(render("{{ messages[1].content|tojson }}")), (P{{"\"<think>r</think>\\n\\nAnswer\"", 2}}));
  EXPECT_EQ(pieces(render("{{ messages[1].tool_calls[0].function.arguments|tojson }}")),
            (P{{"{\"city\": \"Paris\", \"n\": 2}", 3}}));
  const Rendered whole = render("{{ messages[1]|tojson }}");
  EXPECT_EQ(pieces(whole), (P{{"\"<think>r</think>\\n\\nAnswer\"", 2},
                              {"[{\"function\": {\"name\": \"f\", \"arguments\": {\"city\": \"Paris\", \"n\": 2}}}]", 3}}));
  // Non-string values of a tagged subtree carry the tag when printed.
  EXPECT_EQ(pieces(render("{{ messages[1].tool_calls[0].function.arguments.n }}|{{ messages[1].tool_calls[0].function.name }}")),
            (P{{"2", 3}, {"f", 3}}));
  // With ensure_ascii the escapes of a tagged string are tagged.
  const Json context = Json::parse(R"({"messages": [{"role": "user", "content": "é"}]})");
  EXPECT_EQ(pieces(render("{{ messages[0].content|tojson(ensure_ascii=true) }}", context, {{"/messages/0/content", 7}})),
            (P{{"\"\\u00e9\"", 7}}));
}

TEST(JinjaProvenance, InnerPointersWinAndMissingOnesTagNothing) {
  const Tags tags = {{"/messages", 1}, {"/messages/1/content", 2}, {"/messages/9/content", 5}, {"/nope", 6}};
  const Rendered r = render("{{ messages[0].role }}:{{ messages[1].content }}", conversation(), tags);
  EXPECT_EQ(r.text, "user:<think>r</think>\n\nAnswer");
  EXPECT_EQ(r.origins, (std::vector<Origin>{{0, 4, 1}, {5, 29, 2}}));
  EXPECT_TRUE(render("{{ messages[0].content }}", conversation(), {}).origins.empty());
}

TEST(JinjaProvenance, GenerationBlocksAreReported) {
  const Rendered r = render(
      "{% for m in messages %}<{{ m.role }}>{% if m.role == 'assistant' %}{% generation %}{{ m.content|trim }}</s>"
      "{% endgeneration %}{% else %}{{ m.content|trim }}</s>{% endif %}{% endfor %}");
  EXPECT_EQ(r.text, "<user>Hello, World</s><assistant><think>r</think>\n\nAnswer</s>");
  ASSERT_EQ(r.generation.size(), 1u);
  EXPECT_EQ(r.text.substr(r.generation[0].first, r.generation[0].second - r.generation[0].first),
            "<think>r</think>\n\nAnswer</s>");
  // A generation block rendered into a macro's buffer is no position in the output.
  EXPECT_TRUE(render("{% macro m() %}{% generation %}x{% endgeneration %}{% endmacro %}{{ m() }}").generation.empty());
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(JinjaRender, RenderIsConstAndThreadSafe) {
  const std::string source = read_file(std::string(E3_GOLDEN_DIR) + "/../data/chat/glm46.jinja");
  ASSERT_FALSE(source.empty());
  const Template t = Template::parse(source, "glm46.jinja");
  const Json context = Json::parse(R"({"messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "", "reasoning_content": "Call the tool.",
       "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "content": "18 C"},
      {"role": "assistant", "content": "It is 18 C."}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
    "add_generation_prompt": true})");
  const Tags tags = {{"/messages/2/content", 3}, {"/messages/2/tool_calls", 3}, {"/messages/4/content", 5}};
  const Rendered once = t.render(context, tags);
  ASSERT_NE(once.text.find("It is 18 C."), std::string::npos);
  ASSERT_FALSE(once.origins.empty());
  std::vector<int> same(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int i = 0; i < 50; ++i) {
        const Rendered r = t.render(context, tags);
        same[k] += r.text == once.text && r.origins == once.origins && r.generation == once.generation;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(same, (std::vector<int>{50, 50, 50, 50}));
}

TEST(JinjaLimits, DeepNestingIsASyntaxErrorNotACrash) {
  const int n = 100000;
  EXPECT_EQ(parse_error("{{ " + std::string(n, '(') + "1" + std::string(n, ')') + " }}"),
            "t.jinja:1:70: the template nests too deeply");
  std::string ifs;
  for (int k = 0; k < 5000; ++k) ifs += "{% if true %}";
  EXPECT_NE(parse_error(ifs).find("the template nests too deeply"), std::string::npos);
  std::string chain = "{{ 1";
  for (int k = 0; k < n; ++k) chain += " + 1";
  EXPECT_NE(parse_error(chain + " }}").find("the tag is too long"), std::string::npos);
  std::string filters = "{{ 'a'";
  for (int k = 0; k < n; ++k) filters += "|trim";
  EXPECT_NE(parse_error(filters + " }}").find("the tag is too long"), std::string::npos);
  // A long line lexes in linear time (columns are counted incrementally).
  std::string many;
  for (int k = 0; k < 20000; ++k) many += std::string(20, 'x') + "{{ 1 }}";
  EXPECT_EQ(render(many).text.size(), 20000u * 21u);
}

TEST(JinjaLimits, RecursionEndsWithAnInputError) {
  EXPECT_EQ(render_error("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}"),
            "t.jinja:1: maximum recursion depth exceeded: macro calls nest deeper than 100");
  EXPECT_EQ(render_error("{% set a = [1] %}{% for n in a recursive %}{{ loop(a) }}{% endfor %}"),
            "t.jinja:1: maximum recursion depth exceeded: calls nest deeper than 100");
  // Recursion inside deep nesting: the stack budget ends it, whatever the mix.
  std::string deep = "{% macro m(n) %}";
  for (int k = 0; k < 150; ++k) deep += "{% if true %}";
  deep += "{{ [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[m(n)]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]] }}";
  for (int k = 0; k < 150; ++k) deep += "{% endif %}";
  deep += "{% endmacro %}{{ m(0) }}";
  const std::string e = render_error(deep);
  EXPECT_TRUE(e.find("too deeply") != std::string::npos || e.find("maximum recursion depth") != std::string::npos) << e;
}

TEST(JinjaLimits, ValuesNestedWithoutLimitAreFreedAndRefusedWhenWalked) {
  const std::string build =
      "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}";
  EXPECT_EQ(render(build + "ok").text, "ok");  // 100000 levels freed without recursing
  EXPECT_EQ(render_error(build + "{{ ns.x }}"),
            "t.jinja:1: maximum recursion depth exceeded while getting the repr of an object");
  EXPECT_EQ(render_error(build + "{{ ns.x|tojson }}"), "t.jinja:1: tojson: the value nests too deeply");
  EXPECT_EQ(render_error(build + "{{ ns.x == [ns.x] }}"), "t.jinja:1: maximum recursion depth exceeded in comparison");
  // A chain through namespaces, built by mutation, and a namespace holding itself.
  EXPECT_EQ(render("{% set st = namespace(cur=namespace()) %}{% for i in range(100000) %}{% set nxt = namespace() %}"
                   "{% set c = st.cur %}{% set c.x = [nxt] %}{% set st.cur = nxt %}{% endfor %}ok")
                .text,
            "ok");
  EXPECT_NE(render_error("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}").find("maximum recursion depth"),
            std::string::npos);
  // The cycle is freed with the render (the sanitizer build's leak check sees it), and a loop
  // making namespaces by the thousand is fine.
  EXPECT_EQ(render("{% set ns = namespace() %}{% set ns.me = [ns] %}{{ ns.me|length }}").text, "1");
  EXPECT_EQ(render("{% for i in range(100000) %}{% set n = namespace(a=i) %}{% endfor %}{{ n is defined }}").text, "False");
  // The context itself may not nest past the limit either.
  Json context = Json::array();
  for (int k = 0; k < 1000; ++k) context = Json::array({context});
  EXPECT_EQ(input_error([&] { render("x", Json{{"deep", context}}, {}); }),
            "t.jinja: the context nests deeper than 128 levels");
}

TEST(JinjaLimits, WorkAndOutputAreBounded) {
  EXPECT_EQ(render_error("{% for x in range(100000000) %}{% endfor %}"),
            "t.jinja:1: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  RenderOptions small;
  small.max_steps = 100000;
  small.max_output_bytes = 1 << 20;
  const std::string busy =
      "t.jinja:1: the template ran more than 100000 steps (loop iterations, calls, items walked or copied); a template "
      "this busy is refused";
  EXPECT_EQ(render_error("{% for x in range(1000) %}{% for y in range(1000) %}{% endfor %}{% endfor %}", conversation(), small),
            busy);
  // Quadratic work on a short loop counts item by item.
  EXPECT_EQ(render_error("{% set ns = namespace(l=[]) %}{% for i in range(5000) %}{% set ns.l = ns.l + [i] %}{% endfor %}",
                         conversation(), small),
            busy);
  const std::string big = "t.jinja:1: the rendered text would exceed 1048576 bytes";
  EXPECT_EQ(render_error("{{ 'a' * 100000000000 }}", conversation(), small), big);
  EXPECT_EQ(render_error("{{ 'x'|center(10000000000000) }}", conversation(), small), big);
  EXPECT_EQ(render_error("{{ '%999999999999999999999d' % 1 }}", conversation(), small), big);
  EXPECT_EQ(render_error("{{ '{:99999999999}'.format(1) }}", conversation(), small), big);
  EXPECT_EQ(render_error("{% set ns = namespace(s='a') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                         conversation(), small),
            big);
  // Python's integers are unbounded; 64 bits are plenty for a chat template, and past them it is
  // an error, never a wrapped value or a trap.
  const std::string overflow = "t.jinja:1: integer overflow: the result does not fit in 64 bits";
  EXPECT_EQ(render_error("{{ 2 ** 64 }}"), overflow);
  EXPECT_EQ(render_error("{{ 9223372036854775807 + 1 }}"), overflow);
  EXPECT_EQ(render_error("{{ (-9223372036854775807 - 1) // -1 }}"), overflow);
  EXPECT_EQ(render_error("{{ -(-9223372036854775807 - 1) }}"), overflow);
  EXPECT_EQ(render_error("{{ (-9223372036854775807 - 1)|abs }}"), overflow);
  EXPECT_EQ(render("{{ (-9223372036854775807 - 1) % -1 }}{{ (-9223372036854775807 - 1) is divisibleby(-1) }}").text, "0True");
  EXPECT_EQ(render_error("{{ (1e308 * 10)|int }}"), "t.jinja:1: cannot convert float infinity to integer");
}

}  // namespace
