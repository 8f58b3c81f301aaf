// Toy 1, the heads: the page's state, and drawing what headwise's module computes for it.
"use strict";

(async () => {
  const toys = await Toys.load();
  const $ = (id) => document.getElementById(id);
  const state = { row: null };

  for (const head of toys.toyHeads()) $("head").add(new Option(head.name, head.id));
  $("head").value = "duplicate-token";

  const sentence = () => ($("sentence").value === "" ? $("custom-text").value : $("sentence").value);

  function drawTokens(result) {
    const box = $("tokens");
    box.replaceChildren();
    result.tokens.forEach((word, j) => {
      const button = document.createElement("button");
      button.type = "button";
      button.className = "token";
      button.dataset.index = String(j);
      button.setAttribute("aria-pressed", String(j === state.row));
      const w = result.weights[state.row][j];
      const masked = w === 0 && j > state.row;  // the causal mask's exact zeros
      button.classList.toggle("future", masked);
      button.innerHTML = '<span class="word"></span><span class="weight number"></span>';
      button.querySelector(".word").textContent = word;
      Toys.setNumber(button.querySelector(".weight"), w, 4);
      button.setAttribute("aria-label", `${word}, position ${j}: weight ${Toys.format(w, 4)}${masked ? ", masked (in the future)" : ""}`);
      Toys.shade(button, w);
      button.addEventListener("click", () => {
        state.row = j;
        update();
        box.querySelector(`[data-index="${j}"]`).focus();
      });
      box.appendChild(button);
    });
  }

  function drawRow(result) {
    const largest = result.largest_at[state.row];
    $("row-index").textContent = String(state.row);
    $("row-token").textContent = result.tokens[state.row];
    Toys.setNumber($("row-entropy"), result.entropy[state.row], 4);
    Toys.setNumber($("row-largest"), result.largest[state.row], 4);
    $("row-largest-token").textContent = result.tokens[largest];
    $("row-largest-at").textContent = String(largest);
  }

  function drawScores(result) {
    Toys.setNumber($("mean-entropy"), result.mean_entropy, 4);
    Toys.setNumber($("score-previous"), result.scores.previous_token, 3);
    Toys.setNumber($("score-duplicate"), result.scores.duplicate_token, 3);
    Toys.setNumber($("score-induction"), result.scores.induction, 3);
    Toys.setNumber($("score-first"), result.scores.first_token, 3);
  }

  function update() {
    $("custom-label").hidden = $("sentence").value !== "";
    const result = toys.headPattern($("head").value, sentence(), $("causal").checked);
    const shown = document.querySelectorAll("#tokens, #row-summary, #pattern, #summary");
    if (result.error) {  // the library's own message, e.g. a sentence with no tokens
      Toys.showMessage(Toys.plainError(result.error));
      shown.forEach((el) => { el.hidden = true; });
      return;
    }
    Toys.showMessage("");
    shown.forEach((el) => { el.hidden = false; });
    const n = result.tokens.length;
    if (state.row === null || state.row >= n) state.row = n - 1;
    drawTokens(result);
    drawRow(result);
    Toys.drawPattern($("pattern"), { rowLabels: result.tokens, colLabels: result.tokens, weights: result.weights,
                                     entropy: result.entropy, chosenRow: state.row });
    drawScores(result);
  }

  for (const id of ["head", "causal"]) $(id).addEventListener("change", update);
  $("sentence").addEventListener("change", () => {
    state.row = null;
    update();
    if ($("sentence").value === "") $("custom-text").focus();
  });
  $("custom-text").addEventListener("input", () => { state.row = null; update(); });
  update();
  document.body.dataset.ready = "true";
})();
