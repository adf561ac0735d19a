// Not a test: how fast HF's JavaScript tokenizer encodes the same corpus as
// tests/tools/tokenizer_bench (the same --min-mb and --max-bytes), for the ratio in
// docs/PERFORMANCE.md ("Tokenizer (issue 19)"). One thread (JS); MB/s by the wall clock and by
// the process's CPU time.
//   node tokenizer_bench.mjs CORPUS.jsonl [NAME] [--min-mb M] [--max-bytes B]
import { loadOracle, readCorpus } from "./tokenize_corpus.mjs";

const args = process.argv.slice(2);
const option = (key, fallback) => {
  const at = args.indexOf(key);
  if (at < 0) return fallback;
  const value = Number(args[at + 1]);
  args.splice(at, 2);
  return value;
};
const minMb = option("--min-mb", 20);
const maxBytes = option("--max-bytes", Infinity);
const [corpus, name = "llama3_1"] = args;
const texts = readCorpus(corpus).filter((t) => Buffer.byteLength(t, "utf8") <= maxBytes);
const bytes = texts.reduce((n, t) => n + Buffer.byteLength(t, "utf8"), 0);
const repeat = Math.max(1, Math.ceil((minMb * 1e6) / bytes));
const oracle = loadOracle(name);
for (const t of texts) oracle.special(t);  // warm-up
const t0 = process.hrtime.bigint();
const c0 = process.cpuUsage();
let tokens = 0;
for (let r = 0; r < repeat; ++r) for (const t of texts) tokens += oracle.special(t).length;
const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
const cpu = process.cpuUsage(c0);
const cpuSeconds = (cpu.user + cpu.system) / 1e6;
const mb = (bytes * repeat) / 1e6;
console.log(`@huggingface/tokenizers ${name}: ${texts.length} texts, ${(bytes / 1e6).toFixed(3)} MB x ${repeat} = ${mb.toFixed(1)} MB, ${tokens / repeat} tokens a pass`);
console.log(`1 thread: ${(mb / seconds).toFixed(2)} MB/s wall, ${(mb / cpuSeconds).toFixed(2)} MB/s per core (CPU time of the process)`);
