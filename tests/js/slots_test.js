// The batch slots band (assets/live/slots.js): it paints each run of a request in a slot as one rectangle,
// and what it paints must be what a rectangle per cell would paint, pixel for pixel: at a GPU's pace (256
// rows, iterations narrower than a pixel), zoomed in (iterations wider than a pixel), with idle time between
// iterations (wider and narrower than the 1.5 px the band leaves undrawn), on the time and the iteration
// axis, with a slot now and then empty, and with both engines of a disaggregated lane in one grid. Run by
// tests/assets/live/test_live_slots_js.py: node tests/js/slots_test.js CONTRACT.json
"use strict";
const assert = require("node:assert/strict");
const fs = require("node:fs");

require("./live_modules.js");
const { random } = require("./seeded.js");
const { recordingContext } = require("./canvas_stub.js");
const { Contract, LiveState, Slots, Common, Raster } = globalThis;
const contract = Contract.fromWire(JSON.parse(fs.readFileSync(process.argv[2], "utf8")));

const ROWS = 256, STEPS = 300, STEP_S = 0.004;

// Steps of one lane: each slot's request changes every `swapEvery` iterations or so (a prefill first, then
// decodes), a slot stands empty now and then, and idle time of up to `idle` steps' length follows some steps.
// halves > 0: the steps come from the two engines of a disaggregated lane, in turns of 1..halves steps, each
// engine with requests of its own, the prefill engine mostly a quarter of the rows (check draws them as one grid, as after a reconfigure, or as two); overlap:
// now and then an engine's turn starts before the other's last step ended (the two run side by side).
const wide = (i) => i >= 0.7 * STEPS && i < 0.8 * STEPS;  // (each case keeps these steps: check's few.steps)

function events(rnd, swapEvery, idle, halves, overlap) {
  const out = [], seen = new Set(), parts = [contract.parts.decode, contract.parts.prefill];
  let t = 0, half = 0, turn = 0;
  const ended = [0, 0];  // each engine's last step's end (an engine's own steps never overlap)
  for (let i = 0; i < STEPS; i++) {
    if (halves && turn-- <= 0) {
      [half, turn] = [1 - half, Math.floor(rnd() * halves)];
      t = Math.max(ended[half], overlap && rnd() < 0.5 ? t - STEP_S * 4 * rnd() : t);
    }
    const entries = [], finished = [];
    const r0 = (s, i) => s + ROWS * Math.floor((i + 3 * s) / swapEvery) + (halves ? half * 1e6 : 0);
    for (let s = 0; s < ROWS; s++) {
      const last = (i + 3 * s) % swapEvery === swapEvery - 1;  // (a request's last step: padding, as static)
      if ((s + i) % 97 === 0) {  // (left out of this step; a request whose last step it was ends all the same)
        if (last && seen.has(r0(s, i))) finished.push(r0(s, i));
        continue;
      }
      if (half === 1 && s >= ROWS / 4 && !wide(i)) continue;  // (a prefill engine runs few rows, for a while more)
      const r = r0(s, i);
      const first = !seen.has(r);
      if (first) {
        seen.add(r);
        out.push({ type: "request", lane: "a", strategy: "continuous", request_id: r, tag: "t", prompt: "x",
                   num_prompt_tokens: 4, max_tokens: 1000, arrival_s: t });
      }
      const held = !first && last;
      if (held) finished.push(r);
      const phase = first ? contract.phase.prefill : held ? contract.phase.padding : contract.phase.decode;
      entries.push([r, phase, first ? 4 : 1, first ? 0 : 10 + i, s, 0, 0, 0]);
    }
    out.push({ type: "step", lane: "a", strategy: "continuous", step: i + 1, t_start: t, t_end: t + STEP_S, entries,
               ...(halves ? { part: parts[half] } : {}),
               num_waiting: 0, num_running: entries.length, admitted: [], finished, preempted: [],
               tokens_used: entries.length, token_budget: 2048, sampled: {}, deltas: {}, waits: {} });
    ended[half] = t + STEP_S;
    t += STEP_S * (1 + (rnd() < 0.1 ? idle * rnd() : 0));
  }
  return out;
}

// The rectangles a band's layers get, counted.
function countingRects() {
  const layer = Raster.layer, counts = { rects: 0 };
  Raster.layer = (...args) => {
    const l = layer(...args), rect = l.rect;
    l.rect = (...r) => { counts.rects++; rect(...r); };
    return l;
  };
  return { counts, restore: () => { Raster.layer = layer; } };
}

// The oracle, without raster.js: RGBA bytes of the device pixels under the grid, where each column the band
// drew (sub.cols) is an empty slot's color, and then each cell a rectangle of its own in its color, with edges
// rounded to device pixels; padding hatched; requests other than the picked one at a quarter over the empty
// slot's color.
function perCell(sub, k, sel, scale) {
  const { C, mix, reqColor } = Common, { KIND } = LiveState;
  const ox = Math.round(sub.x * k), oy = Math.round(sub.y * k);
  const W = Math.round((sub.x + sub.w) * k) - ox, H = Math.round((sub.y + sub.h) * k) - oy;
  const out = new Uint8ClampedArray(4 * W * H);
  const fill = (x, y, w, h, hex, keep = null) => {
    const [R, G, B] = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
    const xa = Math.max(0, Math.round(x * k) - ox), xb = Math.min(W, Math.round((x + w) * k) - ox);
    const ya = Math.max(0, Math.round(y * k) - oy), yb = Math.min(H, Math.round((y + h) * k) - oy);
    for (let r = ya; r < yb; r++) {
      for (let c = xa; c < xb; c++) {
        if (keep && !keep(ox + c, oy + r)) continue;
        const i = 4 * (r * W + c);
        out[i] = R; out[i + 1] = G; out[i + 2] = B; out[i + 3] = 255;
      }
    }
  };
  const period = Math.max(3, Math.round(6 * scale * k)), line = Math.max(1, Math.round(1.6 * Math.SQRT2 * scale * k));
  for (const c of sub.cols) fill(c.xa, sub.y, c.xb - c.xa, sub.h, C.idle);
  for (const c of sub.cols) {
    c.st.bySlot.forEach((cell, s) => {
      if (!cell || s >= sub.nSlots) return;
      const color = reqColor(cell.rid), dim = (hex) => (sel != null && cell.rid !== sel ? mix(C.idle, hex, 0.25) : hex);
      const own = cell.kind === KIND.decode ? color : cell.kind === KIND.held ? mix(C.held, color, 0.25)
        : mix(color, C.white, 0.5);
      const y = sub.y + sub.h - (s + 1) * sub.slotH, h = sub.y + sub.h - s * sub.slotH - y;
      fill(c.xa, y, c.xb - c.xa, h, dim(own));
      if (cell.kind !== KIND.held) return;
      const hatch = mix(C.heldDim, color, 0.12);
      fill(c.xa, y, c.xb - c.xa, h, sel != null && cell.rid !== sel ? mix(dim(own), hatch, 0.25) : hatch,
           (gx, gy) => (gx + gy) % period < line);
    });
  }
  return { bytes: out, W, H, ox, oy };
}

// A lane's state from the events; limits: LiveState's (fewer steps kept, fewer with a cell a row).
// pools: a disaggregated lane's two pools known, so each engine has a grid of its own.
function folded(evs, limits, pools) {
  const st = LiveState.newState(["a"], contract, limits);
  LiveState.applyBatch(st, { skipped: 0, events: evs });
  const S = st.by.get("a");
  if (pools) S.pools = { [contract.parts.decode]: {}, [contract.parts.prefill]: {} };  // (what their kv sets)
  return S;
}

// Slots.draw of a lane over [lo, hi]: the band (its grids as drawn) and the one image it made.
function drawn(S, axis, lo, hi, width, k, height, sel) {
  const X = (v) => ((v - lo) / (hi - lo)) * width;
  X.invert = (x) => lo + (x / width) * (hi - lo);
  const inst = { contract, sel, scale: 1, laneConfig: () => ({ strategy: "continuous", max_num_seqs: ROWS }) };
  const band = { x: 3, y: 7, w: width, h: height, yticks: [] };
  const { ctx, images } = recordingContext(k);
  const counting = countingRects();
  Slots.draw(ctx, inst, S, { axis }, X, band);
  counting.restore();
  return { inst, band, images, rects: counting.counts.rects };
}

function check(seed) {
  const rnd = random(seed);
  const swapEvery = 2 + Math.floor(rnd() * 90), idle = [0, 0.5, 3, 40][Math.floor(rnd() * 4)];
  const axis = rnd() < 0.75 ? "time" : "iteration", width = [160, 700, 2400][Math.floor(rnd() * 3)];
  const halves = rnd() < 0.25 ? 1 + Math.floor(rnd() * 3) : 0;
  const k = [1, 1, 1.5, 2][Math.floor(rnd() * 4)], height = [0.45, 0.94, 2][Math.floor(rnd() * 3)] * ROWS;
  const overlap = halves && rnd() < 0.5, pools = halves && rnd() < 0.5;
  const evs = events(rnd, swapEvery, idle, halves, overlap);
  const S = folded(evs, {}, pools);
  // the same events kept as a long run keeps them: the oldest steps without their cells, the oldest of all gone
  const few = { cells: ROWS * Math.floor(1 + rnd() * STEPS), steps: rnd() < 0.4 ? STEPS : 20 + Math.floor(rnd() * 0.6 * STEPS),
                chunk: 1 + Math.floor(rnd() * 60), check: 1 + Math.floor(rnd() * 40) };
  const kept = folded(evs, few, pools);
  const at = (step) => (axis === "time" ? [step.t0, step.t1] : [step.it - 0.5, step.it + 0.5]);
  let lo = at(kept.steps[2])[0], hi = at(S.steps[S.steps.length - 1])[1];  // (what both keep)
  if (rnd() < 0.5) [lo, hi] = [lo + (hi - lo) * 0.3 * rnd(), hi - (hi - lo) * 0.3 * rnd()];  // zoomed in
  const some = S.steps[Math.floor(S.steps.length / 2)].bySlot.find(Boolean);
  const sel = rnd() < 0.3 && some ? some.rid : null;  // a request picked: the others dimmed
  const { inst, band, images, rects } = drawn(S, axis, lo, hi, width, k, height, sel);
  const sub = band.subs[0];
  const cells = sub.cols.reduce((a, c) => a + c.st.bySlot.filter(Boolean).length, 0);
  const what = `seed ${seed} (${axis} axis, ${width} px at ${k} device px each, ${height} px tall, a request every `
    + `~${swapEvery} steps, idle ${idle}, halves in turns of up to ${halves}${overlap ? ", overlapping" : ""}`
    + `${pools ? " in two grids" : ""}, picked ${sel})`;
  assert.ok(sub.cols.length > 0, what);
  assert.equal(images.length, band.subs.length, `${what}: each grid reaches the canvas as one image`);
  const want = band.subs.map((g) => perCell(g, k, sel, inst.scale));
  images.forEach((img, i) => {
    assert.deepEqual([img.x, img.y, img.w, img.h], [want[i].ox, want[i].oy, want[i].W, want[i].H], what);
    samePixels(img.bytes, want[i], what);
  });
  // a rectangle per run: a slot's requests, each a prefill, a run of decodes and a step of padding, split where
  // the slot stood empty and where idle time shows; and one per stretch of iterations for the empty slots
  const gaps = sub.cols.filter((c, j) => j > 0 && c.xa > sub.cols[j - 1].xb).length;
  const most = ROWS * (3 * (STEPS / swapEvery + 2) + 2 * Math.ceil(STEPS / 97) + gaps) + gaps + 1;
  if (!halves) assert.ok(rects <= most, `${what}: ${rects} rectangles for ${cells} cells`);
  // kept as a long run keeps them, the same pixels and the same request under every point
  const old = drawn(kept, axis, lo, hi, width, k, height, sel);
  const compact = old.band.subs.reduce((a, g) => a + g.cols.filter((c) => !c.st.bySlot).length, 0);
  const how = `${what}, ${kept.steps.length} of ${S.steps.length} steps kept, ${compact} in view without their cells`;
  assert.deepEqual(old.band.subs.map((g) => g.nSlots), band.subs.map((g) => g.nSlots), `${how}: each grid's slots`);
  assert.equal(old.images.length, images.length, how);
  old.images.forEach((img, i) => samePixels(img.bytes, want[i], how));
  for (let i = 0; i < 100; i++) {
    const x = band.x + rnd() * band.w, y = band.y + rnd() * band.h;
    const a = Slots.hit(inst, band, x, y), b = Slots.hit(old.inst, old.band, x, y);
    assert.equal(b && b.rid, a && a.rid, `${how}: the request under ${x}, ${y}`);
    if (a && a.rid != null) assert.equal(b.tip[0], a.tip[0], `${how}: the tip's first line at ${x}, ${y}`);
  }
  return { cells, runs: rects, compact };
}

function samePixels(bytes, want, what) {
  for (let i = 0; i < want.bytes.length; i++) {
    if (bytes[i] !== want.bytes[i]) {
      const p = i >> 2;
      assert.fail(`${what}: pixel ${p % want.W}, ${Math.floor(p / want.W)} is ${bytes.slice(4 * p, 4 * p + 4)}, `
                  + `not ${want.bytes.slice(4 * p, 4 * p + 4)}`);
    }
  }
}

// One grid holding both engines (pools not known), on the time axis: an engine's step that starts past the
// window's right edge can come before, in iteration order, the other's that started inside it; a run that
// ends at the first is drawn to its stretch's end, as a rectangle a cell would draw it.
function pastTheEdge() {
  const ev = (n, t0, t1, rid, phase, part) => ({ type: "step", lane: "a", strategy: "continuous", step: n, t_start: t0,
    t_end: t1, part, entries: [[rid, phase, 1, 10, 0, 0, 0, 0]], num_waiting: 0, num_running: 1, admitted: [],
    finished: [], preempted: [], sampled: {}, deltas: {}, waits: {} });
  const { decode, prefill } = contract.parts, P = contract.phase;
  const S = folded([ev(1, 0, 0.01, 1, P.decode, decode), ev(2, 0.01, 0.02, 1, P.decode, decode),
                    ev(3, 0.02, 0.03, 1, P.decode, decode), ev(4, 0.034, 0.04, 1, P.decode, decode),
                    ev(5, 0.025, 0.05, 2, P.prefill, prefill)], {});
  const { band, images } = drawn(S, "time", 0, 0.032, 320, 1, ROWS, null);  // (a pixel a slot)
  assert.equal(band.subs[0].cols.length, 4);
  samePixels(images[0].bytes, perCell(band.subs[0], 1, null, 1), "a run whose last step is past the right edge");
}

pastTheEdge();
let cells = 0, runs = 0, compact = 0;
for (let seed = 1; seed <= 60; seed++) {
  const r = check(seed);
  cells += r.cells;
  runs += r.runs;
  compact += r.compact;
}
console.log(`ok - 60 cases: ${cells} cells painted as ${runs} rectangles, pixel for pixel as a rectangle each; `
            + `the same with the oldest steps gone and ${compact} steps in view without their cells`);
