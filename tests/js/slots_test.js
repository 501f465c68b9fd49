// The batch slots band (assets/live/slots.js) at a GPU's pace: 256 rows, iterations narrower than a pixel.
// It must paint what each cell says (every pixel a cell covers in its request's color, nothing where no
// cell is) with a rectangle per run of a request in a slot, not one per cell. Run by
// tests/assets/live/test_live_slots_js.py: node tests/js/slots_test.js CONTRACT.json
"use strict";
const assert = require("node:assert/strict");
const fs = require("node:fs");

require("./live_modules.js");
const { Contract, LiveState, Slots, Common } = globalThis;
const contract = Contract.fromWire(JSON.parse(fs.readFileSync(process.argv[2], "utf8")));

const ROWS = 256, STEPS = 300, STEP_S = 0.004, SWAP_EVERY = 70, WIDTH = 160;
const rid = (slot, i) => slot + ROWS * Math.floor((i + 3 * slot) / SWAP_EVERY);  // each slot's request changes now and then

function events() {
  const out = [], seen = new Set();
  for (let i = 0; i < STEPS; i++) {
    const entries = [];
    for (let s = 0; s < ROWS; s++) {
      if ((s + i) % 97 === 0) continue;  // now and then a slot stands empty for an iteration
      const r = rid(s, i);
      if (!seen.has(r)) {
        seen.add(r);
        out.push({ type: "request", lane: "a", strategy: "continuous", request_id: r, tag: "t", prompt: "x",
                   num_prompt_tokens: 4, max_tokens: 1000, arrival_s: i * STEP_S });
      }
      entries.push([r, contract.phase.decode, 1, 10 + i, s, 0, 0, 0]);
    }
    out.push({ type: "step", lane: "a", strategy: "continuous", step: i + 1, t_start: i * STEP_S,
               t_end: (i + 1) * STEP_S, entries, num_waiting: 0, num_running: entries.length, admitted: [],
               finished: [], preempted: [], tokens_used: entries.length, token_budget: 512, sampled: {}, deltas: {},
               waits: {} });
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

const st = LiveState.newState(["a"], contract);
LiveState.applyBatch(st, { skipped: 0, events: events() });
const S = st.by.get("a");
const t0 = S.steps[0].t0, t1 = S.steps[S.steps.length - 1].t1;
const X = (t) => ((t - t0) / (t1 - t0)) * WIDTH;
X.invert = (x) => t0 + (x / WIDTH) * (t1 - t0);
const inst = { contract, sel: null, scale: 1, laneConfig: () => ({ strategy: "continuous", max_num_seqs: ROWS }) };
const band = { x: 0, y: 0, w: WIDTH, h: 2 * ROWS, yticks: [] };
const { ctx, rects } = recordingContext();
Slots.draw(ctx, inst, S, { axis: "time" }, X, band);

// What each cell says: slot -> pixel -> the colors of the cells over it
const sub = band.subs[0], slotOf = (y) => sub.nSlots - 1 - Math.floor((y - sub.y) / sub.slotH);
const want = new Map();
for (const step of S.steps) {
  const xa = Math.round(X(step.t0)), xb = Math.max(Math.round(X(step.t1)), xa + 1);
  step.bySlot.forEach((cell, s) => {
    const row = want.get(s) || want.set(s, new Map()).get(s);
    for (let x = xa; x < xb; x++) (row.get(x) || row.set(x, new Set()).get(x)).add(Common.reqColor(cell.rid));
  });
}
const cellsDrawn = rects.filter((r) => Common.PALETTE.includes(r.fill));
const got = new Map();
for (const r of cellsDrawn) {
  const s = slotOf(r.y + r.h / 2), row = got.get(s) || got.set(s, new Map()).get(s);
  for (let x = Math.round(r.x); x < Math.round(r.x + r.w); x++) row.set(x, r.fill);  // (later rectangles paint over)
}
let cells = 0;
for (const step of S.steps) cells += step.cells.length;
assert.equal(S.steps.length, STEPS);
assert.ok(WIDTH / STEPS < 1, "iterations narrower than a pixel");
for (const [s, row] of want) {
  for (const [x, colors] of row) assert.ok(colors.has(got.get(s)?.get(x)), `slot ${s} pixel ${x}`);
  for (const x of (got.get(s) || new Map()).keys()) assert.ok(row.has(x), `slot ${s} pixel ${x} painted with no cell`);
}
assert.ok(cellsDrawn.length < cells / 20, `${cellsDrawn.length} rectangles for ${cells} cells`);
console.log(`ok - ${cells} cells of ${ROWS} slots painted as ${cellsDrawn.length} runs`);
