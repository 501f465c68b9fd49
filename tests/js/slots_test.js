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
const { Contract, LiveState, Slots, Common } = globalThis;
const contract = Contract.fromWire(JSON.parse(fs.readFileSync(process.argv[2], "utf8")));

const ROWS = 256, STEPS = 300, STEP_S = 0.004;

function random(seed) {  // mulberry32: the same cases every run
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// Steps of one lane: each slot's request changes every `swapEvery` iterations or so (a prefill first, then
// decodes), a slot stands empty now and then, and idle time of up to `idle` steps' length follows some steps.
// halves > 0: the steps come from the two engines of a disaggregated lane, in turns of 1..halves steps, each
// engine with requests of its own, and no pools known (one grid holds both, as after a reconfigure).
function events(rnd, swapEvery, idle, halves) {
  const out = [], seen = new Set(), parts = [contract.parts.decode, contract.parts.prefill];
  let t = 0, half = 0, turn = 0;
  for (let i = 0; i < STEPS; i++) {
    if (halves && turn-- <= 0) [half, turn] = [1 - half, Math.floor(rnd() * halves)];
    const entries = [];
    for (let s = 0; s < ROWS; s++) {
      if ((s + i) % 97 === 0) continue;
      const r = s + ROWS * Math.floor((i + 3 * s) / swapEvery) + (halves ? half * 1e6 : 0);
      const first = !seen.has(r);
      if (first) {
        seen.add(r);
        out.push({ type: "request", lane: "a", strategy: "continuous", request_id: r, tag: "t", prompt: "x",
                   num_prompt_tokens: 4, max_tokens: 1000, arrival_s: t });
      }
      entries.push([r, first ? contract.phase.prefill : contract.phase.decode, first ? 4 : 1, first ? 0 : 10 + i, s,
                    0, 0, 0]);
    }
    out.push({ type: "step", lane: "a", strategy: "continuous", step: i + 1, t_start: t, t_end: t + STEP_S, entries,
               ...(halves ? { part: parts[half] } : {}),
               num_waiting: 0, num_running: entries.length, admitted: [], finished: [], preempted: [],
               tokens_used: entries.length, token_budget: 2048, sampled: {}, deltas: {}, waits: {} });
    t += STEP_S * (1 + (rnd() < 0.1 ? idle * rnd() : 0));
  }
  return out;
}

// A canvas context that keeps every fillRect with the fill it was drawn in.
function recordingContext() {
  const rects = [];
  const ctx = { fillStyle: "", globalAlpha: 1, font: "", textAlign: "", textBaseline: "",
                fillRect(x, y, w, h) { rects.push({ x, y, w, h, fill: ctx.fillStyle }); },
                fillText() {}, measureText: () => ({ width: 0 }), createPattern: () => "pattern" };
  return { ctx, rects };
}

// slot -> pixel -> the fill painted there last, by the band's rectangles in a request's color
function painted(rects, sub) {
  const slotOf = (y) => sub.nSlots - 1 - Math.floor((y - sub.y) / sub.slotH);
  const out = new Map();
  for (const r of rects) {
    if (!Common.PALETTE.some((c) => r.fill.includes(c)) && !r.fill.startsWith("rgb")) continue;
    const s = slotOf(r.y + r.h / 2), row = out.get(s) || out.set(s, new Map()).get(s);
    for (let x = Math.round(r.x); x < Math.round(r.x + r.w); x++) row.set(x, r.fill);
  }
  return out;
}

// The oracle: a rectangle per cell, over the columns the band drew (sub.cols: each iteration's pixels).
function perCell(sub, idle) {
  const rects = [];
  for (const c of sub.cols) {
    c.st.bySlot.forEach((cell, s) => {
      const color = Common.reqColor(cell.rid);
      const fill = cell.kind === LiveState.KIND.decode ? color : Common.mix(color, Common.C.white, 0.5);
      rects.push({ x: c.xa, y: sub.y + sub.h - (s + 1) * sub.slotH + 0.5, w: c.xb - c.xa, h: 1, fill });
    });
  }
  return rects.filter((r) => r.fill !== idle);
}

function check(seed) {
  const rnd = random(seed);
  const swapEvery = 2 + Math.floor(rnd() * 90), idle = [0, 0.5, 3, 40][Math.floor(rnd() * 4)];
  const axis = rnd() < 0.75 ? "time" : "iteration", width = [160, 700, 2400][Math.floor(rnd() * 3)];
  const halves = rnd() < 0.25 ? 1 + Math.floor(rnd() * 3) : 0;
  const st = LiveState.newState(["a"], contract);
  LiveState.applyBatch(st, { skipped: 0, events: events(rnd, swapEvery, idle, halves) });
  const S = st.by.get("a");
  const at = (step) => (axis === "time" ? [step.t0, step.t1] : [step.it - 0.5, step.it + 0.5]);
  let lo = at(S.steps[0])[0], hi = at(S.steps[S.steps.length - 1])[1];
  if (rnd() < 0.5) [lo, hi] = [lo + (hi - lo) * 0.3 * rnd(), hi - (hi - lo) * 0.3 * rnd()];  // zoomed in
  const X = (v) => ((v - lo) / (hi - lo)) * width;
  X.invert = (x) => lo + (x / width) * (hi - lo);
  const inst = { contract, sel: null, scale: 1, laneConfig: () => ({ strategy: "continuous", max_num_seqs: ROWS }) };
  const band = { x: 0, y: 0, w: width, h: 2 * ROWS, yticks: [] };
  const { ctx, rects } = recordingContext();
  Slots.draw(ctx, inst, S, { axis }, X, band);
  const sub = band.subs[0];
  const cells = sub.cols.reduce((a, c) => a + c.st.bySlot.filter(Boolean).length, 0);
  const runs = rects.filter((r) => r.fill !== Common.C.idle);
  const got = painted(runs, sub), want = painted(perCell(sub, Common.C.idle), sub);
  const what = `seed ${seed} (${axis} axis, ${width} px, a request every ~${swapEvery} steps, idle ${idle}, `
    + `halves in turns of up to ${halves})`;
  assert.ok(sub.cols.length > 0, what);
  for (const [s, row] of want) {
    for (const [x, fill] of row) assert.equal(got.get(s)?.get(x), fill, `${what}: slot ${s} pixel ${x}`);
  }
  for (const [s, row] of got) for (const x of row.keys()) assert.ok(want.get(s)?.has(x), `${what}: slot ${s} px ${x}`);
  // a rectangle per run: a slot's requests, each a prefill and a run of decodes, split where the slot stood
  // empty and where idle time shows
  const gaps = sub.cols.filter((c, k) => k > 0 && c.xa > sub.cols[k - 1].xb).length;
  const most = ROWS * (2 * (STEPS / swapEvery + 2) + 2 * Math.ceil(STEPS / 97) + gaps);
  if (!halves) assert.ok(runs.length <= most, `${what}: ${runs.length} rectangles for ${cells} cells`);
  return { cells, runs: runs.length };
}

let cells = 0, runs = 0;
for (let seed = 1; seed <= 60; seed++) {
  const r = check(seed);
  cells += r.cells;
  runs += r.runs;
}
console.log(`ok - 60 cases: ${cells} cells painted as ${runs} rectangles, pixel for pixel as a rectangle each`);
