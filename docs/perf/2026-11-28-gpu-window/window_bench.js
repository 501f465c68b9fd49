// What the timeline's batch slots and utilization bands cost a frame when a lane has stepped at a GPU's pace for
// longer than the time axis's 20 s window: one lane of 256 rows, each request a prefill step and 127 decode steps,
// a step every STEP_MS, 12 events a socket message. The reducer (assets/live/state.js) folds them with its own
// limits, or with LIMITS' fields given as JSON ('{"steps": 300, "cells": 76800, "chunk": 1}': what a lane kept
// before 2026-11-28); then each band is drawn over the window ending at the last step, moved a little each frame
// (as it follows the clock), into a context that does nothing (the canvas's work is the browser's; this is the
// script's, in node's V8: in a traced chromium tab the slots' loop took about a fifth of it). The heap: what the lane's
// state holds after a full collection.
//   python -c "import json; from engine.events import wire_contract; print(json.dumps(wire_contract()))" > c.json
// --packed: output lengths of 1-256 tokens instead, each step's rows packed in order as the engine packs them
// (a row's slot its place in the list: it moves up whenever one before it ends), a finished request replaced
// at once.
//   node --expose-gc docs/perf/2026-11-28-gpu-window/window_bench.js c.json [LIMITS_JSON] [REPO] [--packed]
"use strict";
const fs = require("node:fs");
const path = require("node:path");

const packed = process.argv.includes("--packed");
const [contractPath, limits = "{}", repo = path.join(__dirname, "..", "..", "..")] =
  process.argv.slice(2).filter((a) => a !== "--packed");
require(path.join(path.resolve(repo), "tests", "js", "live_modules.js"));
const { Contract, LiveState, Slots, UtilView } = globalThis;
const contract = Contract.fromWire(JSON.parse(fs.readFileSync(contractPath, "utf8")));
const ROWS = 256, TOKENS = 128, STEP_MS = 5, SECONDS = 30, WINDOW_S = 20, FRAMES = 60;
const E = contract.entry, P = contract.phase;

// The lane's events: slot s starts a new request every TOKENS steps, offset by s (a steady state).
function events() {
  const out = [];
  for (let i = 0; i < (SECONDS * 1000) / STEP_MS; i++) {
    const entries = [];
    for (let s = 0; s < ROWS; s++) {
      const age = (i + s) % TOKENS, rid = s + ROWS * Math.floor((i + s) / TOKENS);
      if (age === 0) {
        out.push({ type: "request", lane: "a", strategy: "continuous", request_id: rid, tag: "t", prompt: "x",
                   num_prompt_tokens: 16, max_tokens: TOKENS, arrival_s: (i * STEP_MS) / 1000 });
      }
      entries.push(entry(rid, age, s));
    }
    out.push(step(i, entries, []));
  }
  return out;
}

// The same with output lengths of 1-256 (seeded) and rows packed in order (--packed).
function packedEvents() {
  const out = [], running = [];
  let next = 0, seed = 1;
  const rnd = () => ((seed = (seed * 16807) % 2147483647) / 2147483647);
  for (let i = 0; i < (SECONDS * 1000) / STEP_MS; i++) {
    while (running.length < ROWS) {
      const rid = next++, tokens = 1 + Math.floor(256 * rnd());
      out.push({ type: "request", lane: "a", strategy: "continuous", request_id: rid, tag: "t", prompt: "x",
                 num_prompt_tokens: 16, max_tokens: tokens, arrival_s: (i * STEP_MS) / 1000 });
      running.push({ rid, tokens, age: 0 });
    }
    const entries = running.map((r, s) => entry(r.rid, r.age, s));
    for (const r of running) r.age++;
    const finished = running.filter((r) => r.age >= r.tokens).map((r) => r.rid);
    out.push(step(i, entries, finished));
    running.splice(0, running.length, ...running.filter((r) => r.age < r.tokens));
  }
  return out;
}

function entry(rid, age, slot) {
  const e = new Array(contract.entryWidth).fill(0);
  [e[E.rid], e[E.phase], e[E.tokens], e[E.ctx], e[E.slot]] = [rid, age ? P.decode : P.prefill, age ? 1 : 16,
                                                               16 + age, slot];
  return e;
}

function step(i, entries, finished) {
  const t = (i * STEP_MS) / 1000;
  return { type: "step", lane: "a", strategy: "continuous", step: i + 1, t_start: t, t_end: t + STEP_MS / 1000,
           entries, num_waiting: 0, num_running: ROWS, admitted: [], finished, preempted: [],
           tokens_used: ROWS + 15, token_budget: 2048, kv: { used: 3000, num_blocks: 131072 }, sampled: {},
           deltas: {}, waits: {} };
}

const noop = () => undefined, special = { getTransform: () => ({ a: 1 }), measureText: () => ({ width: 10 }) };
const context = new Proxy({}, { get: (o, k) => special[k] || noop, set: () => true });  // every call does nothing
const anything = () => context;
globalThis.ImageData = class {
  constructor(w, h) { Object.assign(this, { width: w, height: h, data: new Uint8ClampedArray(4 * w * h) }); }
};
globalThis.document = { createElement: () => ({ width: 0, height: 0, getContext: () => anything() }) };

const st = LiveState.newState(["a"], contract, JSON.parse(limits));
const t0 = performance.now();
const evs = packed ? packedEvents() : events();
for (let i = 0; i < evs.length; i += 12) LiveState.applyBatch(st, { skipped: 0, events: evs.slice(i, i + 12) });
const fold = performance.now() - t0;
evs.length = 0;
if (globalThis.gc) globalThis.gc();
const heapMb = process.memoryUsage().heapUsed / 2 ** 20;
const S = st.by.get("a"), last = S.steps[S.steps.length - 1].t1;
const inst = { contract, sel: null, scale: 1, server: { rev: 0 }, state: st,
               laneConfig: () => ({ strategy: "continuous", max_num_seqs: ROWS, enable_prefix_caching: false }) };
const times = { slots: [], util: [] };
for (let f = 0; f < FRAMES; f++) {
  const right = last - 0.5 + f / FRAMES, lo = right - WINDOW_S, width = 1100;
  const X = (v) => ((v - lo) / WINDOW_S) * width;
  X.invert = (x) => lo + (x / width) * WINDOW_S;
  for (const [name, draw] of [["slots", Slots.draw], ["util", UtilView.draw]]) {
    const band = { x: 0, y: 0, w: width, h: name === "slots" ? 256 : 120, yticks: [], hits: [] };
    const a = performance.now();
    draw(anything(), inst, S, { axis: "time" }, X, band);
    times[name].push(performance.now() - a);
  }
}
const median = (xs) => xs.sort((a, b) => a - b)[xs.length >> 1];
const kept = S.steps.length, detailed = S.steps.filter((x) => x.cells).length;
console.log(`${kept} steps kept (${((last - S.steps[0].t0)).toFixed(1)} s), ${detailed} with a cell a row; fold `
  + `${(fold / S.lastIt * 1000).toFixed(0)} us a step; a frame (median of ${FRAMES}): slots `
  + `${median(times.slots).toFixed(2)} ms, utilization ${median(times.util).toFixed(2)} ms; heap `
  + `${heapMb.toFixed(0)} MB`);
