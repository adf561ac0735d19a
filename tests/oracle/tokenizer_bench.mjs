// Not a test: how fast HF's JavaScript tokenizer encodes the same corpus as
// tests/tools/tokenizer_bench, for the ratio in docs/PERFORMANCE.md ("Tokenizer speed").
//   node tokenizer_bench.mjs CORPUS.jsonl [NAME] [--repeat R] [--max-bytes B]
import { loadOracle, readCorpus } from "./tokenize_corpus.mjs";

const args = process.argv.slice(2);
const option = (key, fallback) => {
  const at = args.indexOf(key);
  if (at < 0) return fallback;
  const value = Number(args[at + 1]);
  args.splice(at, 2);
  return value;
};
const repeat = option("--repeat", 3);
const maxBytes = option("--max-bytes", Infinity);
const [corpus, name = "llama3_1"] = args;
const texts = readCorpus(corpus).filter((t) => Buffer.byteLength(t, "utf8") <= maxBytes);
const bytes = texts.reduce((n, t) => n + Buffer.byteLength(t, "utf8"), 0);
const oracle = loadOracle(name);
for (const t of texts) oracle.special(t);  // warm-up
const t0 = process.hrtime.bigint();
let tokens = 0;
for (let r = 0; r < repeat; ++r) for (const t of texts) tokens += oracle.special(t).length;
const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
console.log(`@huggingface/tokenizers ${name}: ${texts.length} texts, ${(bytes / 1e6).toFixed(2)} MB, ${tokens / repeat} tokens`);
console.log(`1 thread: ${((bytes * repeat) / 1e6 / seconds).toFixed(2)} MB/s`);
