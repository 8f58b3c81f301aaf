// What the two toys share: loading headwise's WebAssembly module (headwise_toys.js, built from
// web/toys.cpp by `cmake --workflow --preset wasm`), showing numbers and messages, and drawing a
// pattern as a table. Every number the pages show is computed by the module; these files only draw.
"use strict";

const Toys = {
  /** Loads the module; on failure shows why in the page's message box and rethrows. */
  async load() {
    if (typeof createHeadwiseToys !== "function") {
      Toys.showMessage("headwise_toys.js did not load: open this page from a web server (see docs/toys/README.md).");
      throw new Error("headwise_toys.js missing");
    }
    try {
      const module = await createHeadwiseToys();
      document.getElementById("version").textContent = module.version;
      return module;
    } catch (e) {
      Toys.showMessage("The WebAssembly module did not start: " + e);
      throw e;
    }
  },

  /** x with `digits` decimals, for display; the exact value goes into data-value. */
  format(x, digits) {
    return Number.isFinite(x) ? x.toFixed(digits) : "—";
  },

  /** Writes a number into element el: shown rounded, kept whole in data-value. */
  setNumber(el, x, digits) {
    el.textContent = Toys.format(x, digits);
    el.dataset.value = String(x);
  },

  /** The page's message box: a message (an error from the library, say), or hidden for none. */
  showMessage(text) {
    const box = document.getElementById("message");
    if (!text) {
      box.hidden = true;
      box.textContent = "";
      return;
    }
    box.textContent = text;
    box.hidden = false;
  },

  /** A library message ("headwise: <where>: <what>") as a sentence for the page. */
  plainError(error) {
    const what = error.replace(/^headwise: [A-Za-z_:]+: /, "");
    return what.charAt(0).toUpperCase() + what.slice(1) + (what.endsWith(".") ? "" : ".");
  },

  /**
   * Colours an element by a weight in [0, 1]: the fill blends white into the ink blue (#0b5cad) by
   * the weight; the text is black where the fill is light and white where it is dark, switching
   * at the relative luminance (WCAG) where both read at 4.5 : 1.
   */
  shade(el, w) {
    const a = Math.max(0, Math.min(1, w)) * 0.9;
    el.style.setProperty("--w", String(a));
    const channel = (ink) => {
      const c = (255 * (1 - a) + ink * a) / 255;
      return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
    };
    const luminance = 0.2126 * channel(11) + 0.7152 * channel(92) + 0.0722 * channel(173);
    el.classList.toggle("strong", luminance < 0.175);
  },

  /**
   * Fills table `table` with the pattern `weights` (rows of numbers): row and column labels,
   * every cell shaded by its weight and carrying it in data-value (and as text with `digits`
   * decimals when digits > 0), and each row's entropy at its end when `entropy` is given.
   */
  drawPattern(table, { rowLabels, colLabels, weights, entropy, chosenRow, digits = 0 }) {
    table.replaceChildren();
    const head = table.createTHead().insertRow();
    head.appendChild(document.createElement("th"));
    colLabels.forEach((label) => {
      const th = document.createElement("th");
      th.scope = "col";
      th.textContent = label;
      head.appendChild(th);
    });
    if (entropy) {
      const th = document.createElement("th");
      th.scope = "col";
      th.className = "entropy";
      th.textContent = "entropy";
      head.appendChild(th);
    }
    const body = table.createTBody();
    weights.forEach((row, i) => {
      const tr = body.insertRow();
      tr.classList.toggle("chosen", i === chosenRow);
      const th = document.createElement("th");
      th.scope = "row";
      th.textContent = rowLabels[i];
      tr.appendChild(th);
      row.forEach((w, j) => {
        const td = tr.insertCell();
        td.dataset.value = String(w);
        td.title = `${rowLabels[i]} → ${colLabels[j]}: ${Toys.format(w, 4)}`;
        if (digits > 0) td.textContent = Toys.format(w, digits);
        else td.innerHTML = `<span class="visually-hidden">${Toys.format(w, 4)}</span>`;  // for screen readers
        Toys.shade(td, w);
      });
      if (entropy) {
        const td = tr.insertCell();
        td.className = "entropy number";
        Toys.setNumber(td, entropy[i], 2);
      }
    });
  },
};
