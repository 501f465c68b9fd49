// How long the live views' reducer (assets/live/state.js) takes over a recorded run's step events, grouped into
// socket messages as the server sends them (12 events each), parse and apply timed apart. The tree it loads
// assets/live from: REPO (default: the one holding this file), so a worktree of an older commit compares.
//   python -c "import json; from engine.events import wire_contract; print(json.dumps(wire_contract()))" > c.json
//   node docs/perf/2026-11-28-raster/reducer_bench.js \
//     docs/perf/2026-11-27-h100-socket/gpu_socket.jsonl.gz c.json [REPO]
"use strict";
const fs = require("node:fs");
const path = require("node:path");
const zlib = require("node:zlib");

const [recording, contractPath, repo = path.join(__dirname, "..", "..", "..")] = process.argv.slice(2);
require(path.join(path.resolve(repo), "tests", "js", "live_modules.js"));
const { Contract, LiveState } = globalThis;
const contract = Contract.fromWire(JSON.parse(fs.readFileSync(contractPath, "utf8")));
const lines = zlib.gunzipSync(fs.readFileSync(recording)).toString("utf8").split("\n").filter(Boolean);
const lanes = Object.keys(JSON.parse(lines[0]).lanes);
const events = lines.slice(1).map((l) => JSON.parse(l).event);
const messages = [];
for (let i = 0; i < events.length; i += 12) {
  messages.push(JSON.stringify({ skipped: 0, events: events.slice(i, i + 12) }));
}
const st = LiveState.newState(lanes, contract);
let parse = 0, apply = 0;
for (const m of messages) {
  const t0 = performance.now(), msg = JSON.parse(m), t1 = performance.now();
  LiveState.applyBatch(st, msg);
  parse += t1 - t0;
  apply += performance.now() - t1;
}
const steps = events.filter((e) => e.type === "step").length;
console.log(JSON.stringify({ events: events.length, steps, messages: messages.length, parse_ms: +parse.toFixed(1),
                             apply_ms: +apply.toFixed(1), us_a_step: +((1000 * (parse + apply)) / steps).toFixed(0) }));
