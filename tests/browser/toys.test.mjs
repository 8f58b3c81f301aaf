// The browser test of the two toys: serves docs/toys on 127.0.0.1, drives headless Chromium
// (Debian's, through puppeteer-core) through each toy as a reader would (select the duplicate-token
// head and click the second "John", toggle the mask, drag a key with the mouse and a query by
// touch, type a divisor of 8, move the length slider to x8 from the keyboard, type bad input), reads
// the numbers each page shows and compares them with the native library's (toys-expected.json,
// written by tests/test_toys.cpp), and checks its screenshots are not blank.
//
//   node toys.test.mjs --pages docs/toys --expected build/.../toys-expected.json --screenshots DIR
//                      [--chromium /usr/bin/chromium]
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import puppeteer from "puppeteer-core";

const args = Object.fromEntries(process.argv.slice(2).reduce((pairs, a, i, all) =>
  (a.startsWith("--") ? [...pairs, [a.slice(2), all[i + 1]]] : pairs), []));
for (const required of ["pages", "expected", "screenshots"])
  if (!args[required]) throw new Error(`toys.test.mjs: --${required} is required`);
const expected = JSON.parse(fs.readFileSync(args.expected, "utf8"));
fs.mkdirSync(args.screenshots, { recursive: true });

const failures = [];
let checks = 0;
function check(what, ok, detail = "") {
  ++checks;
  if (!ok) failures.push(`${what}${detail ? ": " + detail : ""}`);
}

// A number the page shows (text rounded to `digits`, the whole value in data-value) against the
// native library's: the whole value to 1e-12 (the WebAssembly build and the native one round
// alike but for the last bits of exp and log), the text to its rounding.
function checkNumber(what, shown, want, digits) {
  const whole = Number(shown.value), text = Number(shown.text);
  check(`${what}: the value`, Math.abs(whole - want) <= 1e-12 * Math.max(1, Math.abs(want)), `page ${shown.value}, native ${want}`);
  check(`${what}: the text`, /^-?\d+\.\d+$/.test(shown.text) && shown.text.split(".")[1].length === digits &&
        Math.abs(text - want) <= 0.5 * 10 ** -digits + 1e-12, `page shows "${shown.text}", native ${want}`);
}

// The static server: files under --pages only, by their extension's type.
const root = path.resolve(args.pages);
const types = { ".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".wasm": "application/wasm",
                ".svg": "image/svg+xml", ".png": "image/png", ".json": "application/json" };
const server = http.createServer((request, response) => {
  let file;
  try {
    file = path.resolve(root, "." + decodeURIComponent(new URL(request.url, "http://x").pathname));
  } catch {
    response.writeHead(400).end("bad request");
    return;
  }
  if (!file.startsWith(root + path.sep) || !fs.existsSync(file) || !fs.statSync(file).isFile()) {
    response.writeHead(404).end("not found");
    return;
  }
  response.writeHead(200, { "Content-Type": types[path.extname(file)] || "application/octet-stream" });
  fs.createReadStream(file).pipe(response);
});
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const base = `http://127.0.0.1:${server.address().port}`;

const profile = fs.mkdtempSync(path.join(args.screenshots, "profile-"));  // a fresh one, removed at the end
const browser = await puppeteer.launch({
  executablePath: args.chromium || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", `--user-data-dir=${profile}`],
});

async function open(file, width = 1100) {
  const page = await browser.newPage();
  await page.setViewport({ width, height: 900, hasTouch: true });
  page.on("pageerror", (e) => check(`${file}: no script error`, false, String(e)));
  page.on("console", (m) => { if (m.type() === "error") check(`${file}: no console error`, false, m.text()); });
  await page.goto(`${base}/${file}`, { waitUntil: "load" });
  await page.waitForSelector("body[data-ready=true]", { timeout: 20000 });
  return page;
}

const read = (page, selector) => page.$$eval(selector, (els) => els.map((e) => ({ text: e.textContent.trim(), value: e.dataset.value })));
const readOne = async (page, selector) => (await read(page, selector))[0];
const visibleText = (page) => page.evaluate(() => document.body.innerText);
// What must never show in a page: NaN or an infinity, in any case.
const showsNonNumber = async (page) => /\b(nan|-?inf|infinity)\b/i.test(await visibleText(page));

// A screenshot, saved, and not blank: decoded by the browser itself, at least 3% of its pixels
// differ from the background and it has more than 20 colours.
async function screenshot(page, name) {
  const file = path.join(args.screenshots, name);
  const png = await page.screenshot({ path: file, fullPage: true });
  const stats = await page.evaluate(async (data) => {
    const image = new Image();
    image.src = "data:image/png;base64," + data;
    await image.decode();
    const canvas = document.createElement("canvas");
    canvas.width = image.width, canvas.height = image.height;
    const context = canvas.getContext("2d");
    context.drawImage(image, 0, 0);
    const pixels = context.getImageData(0, 0, image.width, image.height).data;
    const colours = new Set();
    let differing = 0;
    for (let i = 0; i < pixels.length; i += 4) {
      const rgb = (pixels[i] << 16) | (pixels[i + 1] << 8) | pixels[i + 2];
      if (colours.size < 1000) colours.add(rgb);
      if (rgb !== ((pixels[0] << 16) | (pixels[1] << 8) | pixels[2])) ++differing;
    }
    return { fraction: differing / (pixels.length / 4), colours: colours.size, width: image.width };
  }, Buffer.from(png).toString("base64"));
  check(`${name}: not blank`, stats.fraction > 0.03 && stats.colours > 20, JSON.stringify(stats));
  console.log(`screenshot ${file}: ${(100 * stats.fraction).toFixed(1)}% drawn, ${stats.colours} colours`);
}

// A phone's width (390 CSS pixels, touch): the page lays out without sideways scrolling; then
// its screenshot, and the page is closed.
async function onAPhone(page, name) {
  await page.setViewport({ width: 390, height: 844, hasTouch: true, isMobile: true });  // (reloads the page)
  await page.waitForSelector("body[data-ready=true]", { timeout: 20000 });
  const widths = await page.evaluate(() => ({ layout: window.innerWidth, content: document.documentElement.scrollWidth }));
  check(`${name}: fits a phone's width`, widths.layout === 390 && widths.content <= 390, JSON.stringify(widths));
  await screenshot(page, `${name}-phone.png`);
  await page.close();
}

// ---- Toy 1: the heads ----
async function checkHeadsState(page, want) {
  const tokens = await read(page, "#tokens .token .word");
  check(`heads, ${want.name}: the tokens`, JSON.stringify(tokens.map((t) => t.text)) === JSON.stringify(want.tokens),
        tokens.map((t) => t.text).join(" "));
  const weights = await read(page, "#tokens .token .weight");
  check(`heads, ${want.name}: a weight per token`, weights.length === want.tokens.length, `${weights.length}`);
  weights.forEach((w, j) => checkNumber(`heads, ${want.name}: weight on token ${j}`, w, want.weights[want.row][j], 4));
  checkNumber(`heads, ${want.name}: the row's entropy`, await readOne(page, "#row-entropy"), want.entropy[want.row], 4);
  checkNumber(`heads, ${want.name}: the row's largest weight`, await readOne(page, "#row-largest"), want.largest[want.row], 4);
  check(`heads, ${want.name}: where the largest weight is`, (await readOne(page, "#row-largest-at")).text === String(want.largest_at[want.row]));
  const entropies = await read(page, "#pattern td.entropy");
  check(`heads, ${want.name}: an entropy per row`, entropies.length === want.entropy.length, `${entropies.length}`);
  entropies.forEach((e, i) => checkNumber(`heads, ${want.name}: entropy of row ${i}`, e, want.entropy[i], 2));
  const cells = await read(page, "#pattern td:not(.entropy)");
  check(`heads, ${want.name}: the whole pattern`, cells.length === want.tokens.length ** 2, `${cells.length}`);
  cells.forEach((c, k) => {
    const i = Math.floor(k / want.tokens.length), j = k % want.tokens.length;
    check(`heads, ${want.name}: pattern (${i}, ${j})`, Math.abs(Number(c.value) - want.weights[i][j]) <= 1e-12, `${c.value} vs ${want.weights[i][j]}`);
  });
  checkNumber(`heads, ${want.name}: mean entropy`, await readOne(page, "#mean-entropy"), want.mean_entropy, 4);
  checkNumber(`heads, ${want.name}: duplicate-token score`, await readOne(page, "#score-duplicate"), want.scores.duplicate_token, 3);
  checkNumber(`heads, ${want.name}: previous-token score`, await readOne(page, "#score-previous"), want.scores.previous_token, 3);
  checkNumber(`heads, ${want.name}: induction score`, await readOne(page, "#score-induction"), want.scores.induction, 3);
  checkNumber(`heads, ${want.name}: first-token score`, await readOne(page, "#score-first"), want.scores.first_token, 3);
}

async function heads() {
  const page = await open("heads.html");
  const [first, second] = expected.heads;
  await page.select("#head", first.head);
  await page.select("#sentence", first.text);
  const johns = await page.$$("#tokens .token");
  const positions = (await read(page, "#tokens .token .word")).map((t, j) => (t.text === "John" ? j : -1)).filter((j) => j >= 0);
  check("heads: two Johns", positions.length === 2 && positions[1] === first.row, JSON.stringify(positions));
  await johns[positions[1]].click();  // the second John
  check("heads: the second John is pressed", await page.$eval(`#tokens .token[data-index="${first.row}"]`,
        (b) => b.getAttribute("aria-pressed")) === "true");
  await checkHeadsState(page, first);
  await screenshot(page, "heads.png");
  // From the keyboard: Enter on the first John, then on the second again.
  await page.focus('#tokens .token[data-index="3"]');
  await page.keyboard.press("Enter");
  check("heads: Enter on a token chooses its row", (await page.$eval("#row-index", (e) => e.textContent)) === "3");
  await page.focus(`#tokens .token[data-index="${first.row}"]`);
  await page.keyboard.press("Enter");
  await checkHeadsState(page, first);

  await page.click("#causal");  // the mask off
  await checkHeadsState(page, second);
  await screenshot(page, "heads-mask-off.png");

  // A sentence with no tokens: the library's message, no pattern, no NaN.
  await page.select("#sentence", "");
  const empty = expected.refusals["empty sentence"];
  await page.type("#custom-text", empty.input);
  const message = await page.$eval("#message", (m) => ({ hidden: m.hidden, text: m.textContent }));
  const want = empty.message.replace(/^headwise: [a-z_]+: /, "").toLowerCase();
  check("heads: an empty sentence is refused with the library's message", !message.hidden && message.text.toLowerCase().includes(want),
        JSON.stringify(message));
  check("heads: no number is shown while refused", await page.$$eval("#tokens, #row-summary, #pattern, #summary",
        (els) => els.length === 4 && els.every((e) => e.hidden)));
  check("heads: nothing shows NaN", !(await showsNonNumber(page)));
  await page.type("#custom-text", "a b a");
  check("heads: a sentence again clears the message", await page.$eval("#message", (m) => m.hidden));

  await onAPhone(page, "heads");
}

// ---- Toy 2: the QK playground ----
async function pointAt(page, kind, i) {
  return page.$eval(`#plane .point.${kind}[data-index="${i}"]`, (g) => [Number(g.dataset.x), Number(g.dataset.y)]);
}

// Where plane coordinate (x, y) is on the screen: the plane spans -4 .. 4 over its 400-unit
// box, mapped to the screen by the SVG's own transform (the one the page inverts).
async function screenOf(page, [x, y]) {
  return page.$eval("#plane", (svg, x, y) => {
    const p = new DOMPoint(200 + 50 * x, 200 - 50 * y).matrixTransform(svg.getScreenCTM());
    return [p.x, p.y];
  }, x, y);
}

async function checkPlaygroundState(page, want) {
  for (const [kind, list] of [["query", want.queries], ["key", want.keys]])
    for (let i = 0; i < list.length; ++i) {
      const p = await pointAt(page, kind, i);
      check(`playground, ${want.name}: ${kind} ${i} at (${list[i]})`, Math.abs(p[0] - list[i][0]) < 1e-9 && Math.abs(p[1] - list[i][1]) < 1e-9, `(${p})`);
    }
  const weights = await read(page, "#weights .value");
  check(`playground, ${want.name}: a weight per key`, weights.length === want.keys.length, `${weights.length}`);
  weights.forEach((w, j) => checkNumber(`playground, ${want.name}: weight on key ${j}`, w, want.weights[want.row][j], 4));
  checkNumber(`playground, ${want.name}: entropy`, await readOne(page, "#entropy"), want.entropy[want.row], 4);
  checkNumber(`playground, ${want.name}: largest weight`, await readOne(page, "#largest"), want.largest[want.row], 4);
  const cells = await read(page, "#pattern td");
  check(`playground, ${want.name}: the whole pattern`, cells.length === want.keys.length ** 2, `${cells.length}`);
  cells.forEach((c, k) => {
    const i = Math.floor(k / want.keys.length), j = k % want.keys.length;
    checkNumber(`playground, ${want.name}: pattern (${i}, ${j})`, c, want.weights[i][j], 3);
  });
}

async function typeInto(page, selector, text) {
  await page.$eval(selector, (field) => field.select());
  await page.keyboard.press("Backspace");
  if (text) await page.type(selector, text);
}

async function playground() {
  const page = await open("playground.html");
  const [start, dragged, divisor8, longer, maskOff, touched] = expected.playground;
  await checkPlaygroundState(page, start);

  // From the keyboard, Enter on query 2 shows its weights; on query 3, back.
  for (const i of [2, 3]) {
    await page.$eval(`#plane .point.query[data-index="${i}"]`, (g) => g.focus());  // (an SVG element)
    await page.keyboard.press("Enter");
    check(`playground: Enter on query ${i} shows it`, (await page.$eval("#row-index", (e) => e.textContent)) === `q${i}` &&
          (await page.$eval("#query", (q) => q.value)) === String(i));
  }
  await checkPlaygroundState(page, start);

  // A click on a point, off its centre, does not move it.
  const [k2X, k2Y] = await screenOf(page, start.keys[2]);
  await page.mouse.click(k2X + 5, k2Y - 4);
  await checkPlaygroundState(page, start);

  // Drag key 2 with the mouse, grabbed off its centre: it moves as the pointer does.
  const [toX, toY] = await screenOf(page, dragged.keys[2]);
  await page.mouse.move(k2X + 5, k2Y - 4);
  await page.mouse.down();
  await page.mouse.move(toX + 5, toY - 4, { steps: 8 });
  await page.mouse.up();
  await checkPlaygroundState(page, dragged);

  await page.click("#divisor-8");  // the divisor's mark at 8
  check("playground: the slider is at 8", Number(await page.$eval("#divisor", (s) => s.value)) === divisor8.divisor);
  check("playground: the typed field shows 8", (await page.$eval("#divisor-value", (f) => f.value)) === "8");
  await checkPlaygroundState(page, divisor8);

  await page.focus("#length");  // the length slider to x8 from the keyboard
  await page.keyboard.press("End");
  check("playground: the length shows x8", (await page.$eval("#length-value", (o) => o.textContent)) === "×8");
  await checkPlaygroundState(page, longer);

  await page.click("#causal");
  await checkPlaygroundState(page, maskOff);
  await screenshot(page, "playground.png");

  // Drag query 0 by touch; it becomes the query shown.
  const [qX, qY] = await screenOf(page, maskOff.queries[0]);
  const [tX, tY] = await screenOf(page, touched.queries[0]);
  await page.touchscreen.touchStart(qX, qY);
  for (let s = 1; s <= 8; ++s) await page.touchscreen.touchMove(qX + (tX - qX) * s / 8, qY + (tY - qY) * s / 8);
  await page.touchscreen.touchEnd();
  await checkPlaygroundState(page, touched);

  // From the keyboard: key 0 five steps right (0.1 each), and back.
  await page.$eval('#plane .point.key[data-index="0"]', (g) => g.focus());  // (an SVG element)
  for (let s = 0; s < 5; ++s) await page.keyboard.press("ArrowRight");
  const moved = await pointAt(page, "key", 0);
  check("playground: arrow keys move a key", Math.abs(moved[0] - (touched.keys[0][0] + 0.5)) < 1e-9 && moved[1] === touched.keys[0][1], `(${moved})`);
  for (let s = 0; s < 5; ++s) await page.keyboard.press("ArrowLeft");
  await checkPlaygroundState(page, touched);

  // A divisor of 0 typed: the library's message, no numbers, no NaN; so for -3, nothing, and 1e400
  // (no double); 8 typed again clears it.
  const zero = expected.refusals["divisor typed"];
  const refused = async (what, text, want) => {
    await typeInto(page, "#divisor-value", text);
    const message = await page.$eval("#message", (m) => ({ hidden: m.hidden, text: m.textContent }));
    check(`playground: ${what} is refused with a message`, !message.hidden && message.text.toLowerCase().includes(want), JSON.stringify(message));
    check(`playground: ${what}: the numbers are hidden`, await page.$eval("#readouts", (r) => r.hidden));
    check(`playground: ${what}: nothing shows NaN`, !(await showsNonNumber(page)));
    const valueText = await page.$eval("#divisor", (d) => d.getAttribute("aria-valuetext"));
    check(`playground: ${what}: the slider says no NaN`, !/\b(nan|-?inf|infinity)\b/i.test(valueText), valueText);
  };
  await refused("a divisor of 0", String(zero.input), zero.message.replace(/^headwise: [a-z_]+: /, "").toLowerCase());
  const negative = expected.refusals["negative divisor typed"];
  await refused("a divisor of -3", String(negative.input), negative.message.replace(/^headwise: [a-z_]+: /, "").toLowerCase());
  await refused("no divisor", "", "type a divisor");
  await refused("a divisor of 1e400", "1e400", "type a divisor");
  await typeInto(page, "#divisor-value", "8");
  check("playground: a divisor again clears the message", await page.$eval("#message", (m) => m.hidden));
  await checkPlaygroundState(page, touched);

  await onAPhone(page, "playground");
}

try {
  await heads();
  await playground();
} catch (e) {
  check("the run", false, e.stack || String(e));
} finally {
  await browser.close();
  server.close();
  fs.rmSync(profile, { recursive: true, force: true });
}
console.log(`${checks} checks, ${failures.length} failed`);
for (const f of failures) console.log(`FAILED: ${f}`);
process.exit(failures.length || checks === 0 ? 1 : 0);
