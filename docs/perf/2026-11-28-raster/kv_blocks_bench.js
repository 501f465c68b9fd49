// KvBlocks.fold + KvBlocks.of (assets/live/kv_blocks.js) a snapshot, as the KV map asks each frame: a pool of
// 131,072 blocks (a GPU's), 256 requests of 13 blocks, one table changed a step, 300 steps. REPO: the tree to
// load assets/live from (default: the one holding this file).
//   node docs/perf/2026-11-28-raster/kv_blocks_bench.js [REPO]
"use strict";
const path = require("node:path");

const repo = path.resolve(process.argv[2] || path.join(__dirname, "..", "..", ".."));
require(path.join(repo, "tests", "js", "live_modules.js"));
const { KvBlocks } = globalThis;
const n = 131072, tables = {}, kvTokens = {}, E = { rid: 0, ctx: 3 };
let b = 0;
for (let r = 0; r < 256; r++) {
  tables[r] = Array.from({ length: 13 }, () => b++);
  kvTokens[r] = 200;
}
let kv = { num_blocks: n, block_size: 16, block_tables: tables, kv_tokens: kvTokens, cached: [], used: b };
const steps = 300, t = performance.now();
for (let i = 0; i < steps; i++) {
  const changes = { num_blocks: n, block_size: 16, used: b, tables: { [i % 256]: [12, b++] }, kv_tokens: {} };
  kv = KvBlocks.fold(kv, changes, Object.keys(tables).map((r) => [+r, 0, 1, 201 + i, 0, 0, 0, 0]), E);
  KvBlocks.of(kv);
}
console.log(JSON.stringify({ blocks: n, steps, ms_a_snapshot: +((performance.now() - t) / steps).toFixed(3) }));
