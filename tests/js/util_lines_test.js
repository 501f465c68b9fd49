// The utilization band's stepped lines (assets/live/util_view.js stepLine): iterations less than a pixel
// apart share one vertical stroke. What it draws must still pass through every iteration's value within a
// pixel of where the iteration is, invent no value, break where the series breaks, and stay a few vertices a
// pixel however many iterations a pixel holds. Run by tests/assets/live/test_live_util_lines_js.py.
"use strict";
const assert = require("node:assert/strict");

require("./live_modules.js");
const { random } = require("./seeded.js");
const { UtilView } = globalThis;

// A context that keeps the path: subpaths of [x, y] vertices, and how many were closed.
function pathContext() {
  const paths = [];
  let closed = 0;
  return {
    paths, closed: () => closed,
    beginPath() {}, moveTo(x, y) { paths.push([[x, y]]); }, lineTo(x, y) { paths[paths.length - 1].push([x, y]); },
    closePath() { closed++; },
  };
}

// A series of n iterations: values that hold, drift or jump; a null now and then (an idle gap); with back,
// now and then an x behind the one before (a lane whose two engines' steps interleave).
function series(rnd, n, back) {
  const xs = [], ys = [];
  let x = 0, y = 50 * rnd();
  for (let i = 0; i < n; i++) {
    x += back && rnd() < 0.02 ? -3 * rnd() : 0.5 + rnd();
    const r = rnd();
    y = r < 0.5 ? y : r < 0.9 ? Math.max(0, Math.min(100, y + 10 * (rnd() - 0.5))) : 100 * rnd();
    const gap = rnd() < 0.01;
    xs.push(gap ? null : x);
    ys.push(gap ? null : y);
  }
  return { xs, ys };
}

function check(seed) {
  const rnd = random(seed);
  const n = 50 + Math.floor(rnd() * 6000), width = [120, 700, 2400][Math.floor(rnd() * 3)];
  const back = rnd() < 0.25, { xs, ys } = series(rnd, n, back);
  const last = Math.max(...xs.filter((x) => x != null));
  const X = (v) => (v / last) * width, Y = (v) => 300 - 2.5 * v;
  const close = rnd() < 0.3;
  const ctx = pathContext();
  UtilView.stepLine(ctx, X, Y, xs, ys, close);
  const what = `seed ${seed}: ${n} iterations over ${width} px${close ? ", closed" : ""}`
    + `${back ? ", x back now and then" : ""}`;
  // the same pieces as the series has between its breaks, each closed where asked
  const pieces = xs.filter((x, i) => x != null && (i === 0 || xs[i - 1] == null)).length;
  assert.equal(ctx.paths.length, pieces, what);
  assert.equal(ctx.closed(), close ? pieces : 0, what);
  // every iteration's value, within a pixel of its x (on a vertical stroke, or on a flat stretch), but for
  // an iteration alone between two breaks (no line through it: a line through every vertex draws none either)
  const segs = ctx.paths.flatMap((p) => p.slice(1).map((v, i) => [p[i], v]));
  const on = (x, y) => segs.some(([[x0, y0], [x1, y1]]) =>
    (x0 === x1 && Math.abs(x0 - x) < 1 && Math.min(y0, y1) - 1e-9 <= y && y <= Math.max(y0, y1) + 1e-9)
    || (y0 === y1 && Math.abs(y0 - y) < 1e-9 && Math.min(x0, x1) - 1 < x && x < Math.max(x0, x1) + 1));
  for (let i = 0; i < n; i++) {
    const alone = xs[i - 1] == null && xs[i + 1] == null;
    if (xs[i] != null && !alone) assert.ok(on(X(xs[i]), Y(ys[i])), `${what}: iteration ${i} at ${X(xs[i])}, ${Y(ys[i])}`);
  }
  // no value it did not have (the closing edges aside: they run along the band's zero)
  const values = new Set(ys.filter((y) => y != null).map(Y)), xsAt = new Set(xs.filter((x) => x != null).map(X));
  for (const p of ctx.paths) {
    for (const [x, y] of p) assert.ok((values.has(y) || (close && y === Y(0))) && xsAt.has(x), `${what}: (${x}, ${y})`);
  }
  // an open line (the closed one adds the edges along zero): each stroke flat or upright, and between pixel
  // columns of iterations it holds the value of the last iteration at or before it
  const line = pathContext();
  UtilView.stepLine(line, X, Y, xs, ys, false);
  for (const p of line.paths) {
    p.slice(1).forEach(([x1, y1], i) => {
      const [x0, y0] = p[i];
      assert.ok(x0 === x1 || y0 === y1, `${what}: a slanted stroke ${x0}, ${y0} -> ${x1}, ${y1}`);
      if (back || y0 !== y1 || x1 - x0 <= 2) return;
      const m = (x0 + x1) / 2, j = xs.findLastIndex((x) => x != null && X(x) <= m);
      assert.equal(Y(ys[j]), y0, `${what}: at ${m} the line holds ${y0}, not iteration ${j}'s value`);
    });
  }
  const vertices = ctx.paths.reduce((a, p) => a + p.length, 0);
  assert.ok(vertices <= 4 * (width + 2 * pieces) + 6 * pieces, `${what}: ${vertices} vertices`);
  return { n, vertices };
}

let iterations = 0, vertices = 0;
for (let seed = 1; seed <= 40; seed++) {
  const r = check(seed);
  iterations += r.n;
  vertices += r.vertices;
}
console.log(`ok - 40 series: ${iterations} iterations drawn with ${vertices} vertices, each within a pixel`);
