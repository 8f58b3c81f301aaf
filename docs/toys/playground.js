// Toy 2, the QK playground: points in a plane the reader drags, and the pattern headwise's module
// computes for them. The plane runs from -4 to 4 on both axes, 50 SVG units to 1.
"use strict";

(async () => {
  const toys = await Toys.load();
  const $ = (id) => document.getElementById(id);
  const svgNS = "http://www.w3.org/2000/svg";
  const span = 4, unit = 50, centre = 200, snap = 0.05;

  // The starting state (tests/browser/toy_scenarios.json's first playground state is this one).
  const state = {
    queries: [[1, 0.5], [-0.5, 1], [0.5, -1], [2, 1]],
    keys: [[1, 1], [-1, 0.5], [0.5, -0.5], [1.5, 0]],
    divisor: Math.SQRT2,  // √d_head
    length: 1,
    causal: true,
    row: 3,
  };
  const n = state.queries.length;

  const toPixel = ([x, y]) => [centre + unit * x, centre - unit * y];
  const clamp = (v) => Math.max(-span, Math.min(span, v));
  const snapped = (v) => Math.round(clamp(v) / snap) * snap;
  const label = (kind, i) => (kind === "query" ? "q" : "k") + i;
  const coordinates = ([x, y]) => `(${x.toFixed(2)}, ${y.toFixed(2)})`;

  function element(name, attributes, parent) {
    const el = document.createElementNS(svgNS, name);
    for (const [k, v] of Object.entries(attributes)) el.setAttribute(k, String(v));
    if (parent) parent.appendChild(el);
    return el;
  }

  // The plane's fixed parts: grid, axes, a layer of rays, then the points on top.
  const plane = $("plane");
  for (let v = -span; v <= span; ++v) {
    const p = centre + unit * v;
    element("line", { x1: p, y1: 0, x2: p, y2: 400, class: v === 0 ? "axis" : "grid" }, plane);
    element("line", { x1: 0, y1: p, x2: 400, y2: p, class: v === 0 ? "axis" : "grid" }, plane);
  }
  const rays = element("g", {}, plane);
  const points = { query: [], key: [] };
  for (const kind of ["key", "query"])
    for (let i = 0; i < n; ++i) {
      const g = element("g", { class: `point ${kind}`, tabindex: 0, role: "button", "aria-roledescription": "draggable point",
                                "data-kind": kind, "data-index": i }, plane);
      element("circle", { r: 18, class: "hit" }, g);  // a target a finger can hit
      if (kind === "query") element("circle", { r: 9, class: "mark" }, g);
      else element("rect", { x: -8, y: -8, width: 16, height: 16, class: "mark" }, g);
      element("text", { x: 11, y: -9 }, g).textContent = label(kind, i);
      points[kind].push(g);
      attachDragging(g, kind, i);
    }
  for (let i = 0; i < n; ++i) $("query").add(new Option(`q${i} (token ${i})`, String(i)));

  function placePoints() {
    for (const kind of ["query", "key"])
      points[kind].forEach((g, i) => {
        const p = state[kind === "query" ? "queries" : "keys"][i];
        const [px, py] = toPixel(p);
        g.setAttribute("transform", `translate(${px} ${py})`);
        g.dataset.x = String(p[0]);
        g.dataset.y = String(p[1]);
        g.setAttribute("aria-label", `${kind} ${i} at ${coordinates(p)}; arrow keys move it${kind === "query" ? ", Enter shows its weights" : ""}`);
        g.classList.toggle("chosen", kind === "query" && i === state.row);
      });
  }

  function move(kind, i, p) {
    state[kind === "query" ? "queries" : "keys"][i] = [snapped(p[0]), snapped(p[1])];
    update();
  }

  // A point follows the pointer from where it was grabbed (a tap does not move it); arrow keys
  // move it by steps; a query moved or chosen (Enter, Space) becomes the query shown.
  function attachDragging(g, kind, i) {
    const list = () => state[kind === "query" ? "queries" : "keys"];
    const planePoint = (event) => {
      const v = new DOMPoint(event.clientX, event.clientY).matrixTransform(plane.getScreenCTM().inverse());
      return [(v.x - centre) / unit, (centre - v.y) / unit];
    };
    const choose = () => { if (kind === "query") { state.row = i; $("query").value = String(i); } };
    let grab = null;  // while dragging: the pointer's id and its offset from the point
    g.addEventListener("pointerdown", (event) => {
      if (grab || (event.pointerType === "mouse" && event.button !== 0)) return;  // one pointer, the main button
      event.preventDefault();
      g.setPointerCapture(event.pointerId);
      g.focus();
      const p = planePoint(event);
      grab = { id: event.pointerId, dx: list()[i][0] - p[0], dy: list()[i][1] - p[1] };
      choose();
      update();
    });
    g.addEventListener("pointermove", (event) => {
      if (!grab || event.pointerId !== grab.id) return;
      const p = planePoint(event);
      move(kind, i, [p[0] + grab.dx, p[1] + grab.dy]);
    });
    const release = (event) => {
      if (!grab || event.pointerId !== grab.id) return;
      if (g.hasPointerCapture(event.pointerId)) g.releasePointerCapture(event.pointerId);
      grab = null;
    };
    g.addEventListener("pointerup", release);
    g.addEventListener("pointercancel", release);
    g.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") {
        event.preventDefault();
        choose();
        update();
        return;
      }
      const step = event.shiftKey ? 0.5 : 0.1;
      const d = { ArrowLeft: [-step, 0], ArrowRight: [step, 0], ArrowUp: [0, step], ArrowDown: [0, -step] }[event.key];
      if (!d) return;
      event.preventDefault();
      choose();
      move(kind, i, [list()[i][0] + d[0], list()[i][1] + d[1]]);
    });
  }

  function drawRays(weights) {
    rays.replaceChildren();
    if (!weights) return;
    const from = toPixel(state.queries[state.row]);
    weights[state.row].forEach((w, j) => {
      if (w <= 0) return;
      const to = toPixel(state.keys[j]);
      element("line", { x1: from[0], y1: from[1], x2: to[0], y2: to[1], class: "ray", "stroke-width": 1 + 9 * w,
                        "stroke-opacity": 0.15 + 0.7 * w }, rays);
    });
  }

  function drawWeights(result) {
    const list = $("weights");
    list.replaceChildren();
    result.weights[state.row].forEach((w, j) => {
      const li = document.createElement("li");
      li.innerHTML = '<span></span><span class="bar"></span><span class="value number"></span>';
      li.firstChild.textContent = `k${j} (token ${j})`;
      li.querySelector(".bar").style.width = `${100 * w}%`;
      Toys.setNumber(li.querySelector(".value"), w, 4);
      list.appendChild(li);
    });
    $("row-index").textContent = `q${state.row}`;
    Toys.setNumber($("entropy"), result.entropy[state.row], 4);
    Toys.setNumber($("largest"), result.largest[state.row], 4);
    const labels = [...Array(n).keys()];
    Toys.drawPattern($("pattern"), { rowLabels: labels.map((i) => `q${i}`), colLabels: labels.map((j) => `k${j}`),
                                     weights: result.weights, chosenRow: state.row, digits: 3 });
  }

  function update() {
    placePoints();
    // Nothing typed, or no number a double holds (1e400): nothing to compute with. Otherwise the
    // library decides, and its message is shown: a divisor of 0, say.
    const result = Number.isFinite(state.divisor)
        ? toys.qkPattern(state.queries, state.keys, state.divisor, state.length, state.causal)
        : { error: "Type a divisor: a number greater than 0 (the slider goes from 1 to 16)." };
    if (result.error) {
      Toys.showMessage(Toys.plainError(result.error));
      $("readouts").hidden = true;
      drawRays(null);
      return;
    }
    Toys.showMessage("");
    $("readouts").hidden = false;
    drawRays(result.weights);
    drawWeights(result);
  }

  // The divisor from the slider (1 to 16), a mark, or typed (any number the library takes: 0 or a
  // negative one is refused there, with its message).
  function setDivisor(value, from) {
    state.divisor = value;
    if (from !== "typed") $("divisor-value").value = String(Math.round(value * 1e4) / 1e4);
    if (from !== "slider" && Number.isFinite(value)) $("divisor").value = String(Math.max(1, Math.min(16, value)));
    const onSlider = value >= 1 && value <= 16;
    $("divisor").setAttribute("aria-valuetext", onSlider ? Toys.format(value, 3)
        : Number.isFinite(value) ? `beyond the slider: the divisor typed is ${value}` : "no divisor typed");
    update();
  }

  $("divisor").addEventListener("input", () => setDivisor(Number($("divisor").value), "slider"));
  $("divisor-value").addEventListener("input", () => {
    const text = $("divisor-value").value.trim();
    const value = text === "" ? NaN : Number(text);
    setDivisor(value, "typed");
  });
  $("divisor-sqrt").addEventListener("click", () => setDivisor(Math.SQRT2, "mark"));
  $("divisor-8").addEventListener("click", () => setDivisor(8, "mark"));
  $("length").addEventListener("input", () => {
    state.length = Number($("length").value);
    $("length-value").textContent = `×${state.length}`;
    $("length").setAttribute("aria-valuetext", `×${state.length}`);
    update();
  });
  $("causal").addEventListener("change", () => { state.causal = $("causal").checked; update(); });
  $("query").addEventListener("change", () => { state.row = Number($("query").value); update(); });

  $("query").value = String(state.row);
  setDivisor(state.divisor, "mark");
  document.body.dataset.ready = "true";
})();
