// The KV map (assets/live/kv_map.js) paints a pool's blocks through a layer of pixels (raster.js): each
// block's cell must show what the map's legend says, read from the pool itself. Free dark; cached-evictable
// outlined (filled where too small to outline); held in its request's color up to its tokens' share, a
// faint fill above; reserved and empty hatched; shared striped in its holders' colors inside a white ring;
// other requests than the picked one at 0.22 opacity, the picked one's blocks ringed in white. A pool too
// big for a cell a block groups blocks and shows the request holding most of them (the picked one, if any).
// Seeded pools at 1 and 2 device pixels a pixel. Run by tests/assets/live/test_live_kv_map_js.py.
"use strict";
const assert = require("node:assert/strict");

require("./live_modules.js");
const { random } = require("./seeded.js");
const { recordingContext } = require("./canvas_stub.js");
const { Common, KvBlocks, KvMap } = globalThis;
const { C, reqColor, rgb } = Common;
const DIM = 0.22;

// A pool of n blocks: requests holding tables (some blocks shared with an earlier request, some tokens short
// of a full last block, some reserved and still empty), some freed blocks cached, the rest free.
function pool(rnd, n) {
  const free = [...Array(n).keys()].sort(() => rnd() - 0.5), tables = {}, kvTokens = {};
  const reqs = 1 + Math.floor(rnd() * 12);
  for (let r = 0; r < reqs && free.length; r++) {
    const earlier = Object.values(tables), share = earlier.length && rnd() < 0.4 ? earlier[0].slice(0, 2) : [];
    const table = [...share, ...free.splice(0, Math.min(free.length, Math.floor(rnd() * n / reqs)))];
    tables[100 + r] = table;
    kvTokens[100 + r] = rnd() < 0.2 ? 0 : Math.floor(rnd() * table.length * 16);
  }
  const cached = free.splice(0, Math.floor(rnd() * free.length * 0.3));
  return { num_blocks: n, block_size: 16, block_tables: tables, kv_tokens: kvTokens, cached, used: n - free.length };
}

// The color and opacity (0-255) the map's legend gives the device pixel (px, py) of block cell i, or null
// where the cell leaves the pixel to the canvas.
function expected(kb, g, i, sel, px, py, k, scale) {
  const x = (g.ox + (i % g.cols) * g.s) * k, y = Math.floor(i / g.cols) * g.s * k, s = (g.s - g.gap) * k;
  const cx = px - x, cy = py - y;
  if (cx < 0 || cy < 0 || cx >= s || cy >= s) return null;
  const blocks = [...Array(g.group).keys()].map((j) => i * g.group + j).filter((b) => b < kb.n);
  const held = blocks.filter((b) => kb.owner[b] >= 0);
  const ring = (w) => cx < w * k || cy < w * k || cx >= s - w * k || cy >= s - w * k;
  if (!held.length) {
    const cached = blocks.some((b) => kb.lru[b] >= 0);
    if (!cached) return [C.free, 255];
    if (g.s - g.gap < 4) return [C.cached, 255];
    return ring(g.s - g.gap >= 10 ? 2 : 1) ? [C.cached, 255] : [C.free, 255];
  }
  const count = new Map();
  for (const b of held) count.set(kb.owner[b], (count.get(kb.owner[b]) || 0) + 1);
  const top = Math.max(...count.values());
  const owner = count.has(sel) ? sel : [...count].find(([, c]) => c === top)[0];  // (the first of the most)
  const one = g.group === 1 ? blocks[0] : null, holders = one != null && kb.sharers.get(one);
  const picked = sel == null || (holders ? holders.some((h) => h.rid === sel) : owner === sel);
  const a = picked ? 1 : DIM, color = reqColor(owner), side = g.s - g.gap;
  if (sel != null && picked && side >= 5 && ring(1)) return [C.white, 255];
  const shared = one != null ? !!holders : held.some((b) => kb.refs[b] > 1);
  if (shared) {
    if (side >= 5 && ring(side >= 12 ? 2 : 1)) return [C.white, Math.round(255 * a)];
    const rids = holders ? holders.map((h) => h.rid) : [owner], n = Math.min(rids.length, 4);
    let stripe = null;
    for (let j = 0; j < n; j++) {
      const a0 = Math.round((g.ox + (i % g.cols) * g.s + Math.floor((j * side) / n)) * k) - x;
      if (cx >= a0 && cx < a0 + Math.round(Math.ceil(side / n) * k)) stripe = rids[j];
    }
    return [reqColor(stripe), Math.round(255 * a)];
  }
  const tokens = held.reduce((t, b) => t + kb.tokens[b], 0);
  if (tokens <= 0) {
    const period = Math.max(3, Math.round(6 * scale * k));
    const width = Math.max(1, Math.round(1.6 * Math.SQRT2 * scale * k));
    return [(px + py) % period < width ? color : C.idle, Math.round(255 * a)];
  }
  const h = Math.max(1, Math.round((side * tokens) / (blocks.length * kb.bs)));
  const levelTop = Math.round((Math.floor(i / g.cols) * g.s + side - h) * k) - y;
  return cy >= levelTop ? [color, Math.round(255 * a)] : [color, Math.round(255 * 0.28 * a)];
}

function check(seed) {
  const rnd = random(seed);
  const n = [40, 300, 5000, 131072][Math.floor(rnd() * 4)], k = [1, 2][Math.floor(rnd() * 2)];
  const W = 200 + Math.floor(rnd() * 400), H = 80 + Math.floor(rnd() * 200);
  const kv = pool(rnd, n), kb = KvBlocks.of(kv);
  const rids = Object.keys(kv.block_tables).map(Number);
  const sel = rnd() < 0.4 ? rids[Math.floor(rnd() * rids.length)] : null;
  globalThis.window = { devicePixelRatio: k };
  const { ctx, images } = recordingContext(k);
  const canvas = { width: 0, height: 0, style: {}, getContext: () => ctx };
  const view = { cell: {}, caption: { textContent: "" }, wrap: {}, canvas, geom: null };
  const inst = { sel, scale: 1, sizes: new Map([[view.wrap, { w: W, h: H }]]), changed: () => true,
                 offscreen: () => false, laneConfig: () => ({}), contract: { parts: { prefill: "prefill" } } };
  KvMap.draw(inst, { name: "a", kv, kvRev: 1, pools: null, host: null }, view);
  const what = `seed ${seed} (${n} blocks in ${W} x ${H} px at ${k} device px a px, picked ${sel})`;
  assert.equal(images.length, 1, `${what}: the pool reaches the canvas as one image`);
  const [img] = images, g = view.geom, cells = Math.min(g.cells, 400);
  assert.match(view.caption.textContent, new RegExp(`${kb.used} / ${n} blocks used`), what);
  for (let i = 0; i < g.cells; i += Math.max(1, Math.floor(g.cells / cells))) {  // (a few hundred cells a pool)
    const x0 = (g.ox + (i % g.cols) * g.s) * k, y0 = Math.floor(i / g.cols) * g.s * k;
    for (let py = y0; py < y0 + g.s * k; py++) {
      for (let px = x0; px < x0 + g.s * k; px++) {
        const want = expected(kb, g, i, sel, px, py, k, inst.scale), at = 4 * ((py - img.y) * img.w + px - img.x);
        const got = [...img.bytes.slice(at, at + 4)];
        if (!want) assert.equal(got[3], 0, `${what}: cell ${i} gap pixel ${px}, ${py} painted`);
        else assert.deepEqual(got, [...rgb(want[0]), want[1]], `${what}: cell ${i} (group ${g.group}) px ${px}, ${py}`);
      }
    }
  }
  return g.cells;
}

let cells = 0;
for (let seed = 1; seed <= 30; seed++) cells += check(seed);
console.log(`ok - 30 pools: ${cells} cells, each as the legend says`);
