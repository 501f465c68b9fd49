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

// A mark at opacity a over acc (RGBA bytes), as a canvas draws it: opaque replaces, translucent blends.
function mark(acc, hex, a) {
  const [r, g, b] = rgb(hex);
  if (a >= 1) return [r, g, b, 255];
  const da = (acc[3] / 255) * (1 - a), out = a + da;
  return [(r * a + acc[0] * da) / out, (g * a + acc[1] * da) / out, (b * a + acc[2] * da) / out, 255 * out];
}
const paint = (marks) => marks.reduce((acc, [hex, a]) => mark(acc, hex, a), [0, 0, 0, 0]).map(Math.round);

// The marks (color, opacity), in the order drawn, that the map's legend puts on the device pixel (px, py) of
// block cell i; none where the cell leaves the pixel to the canvas.
function expected(kb, g, i, sel, px, py, k, scale) {
  const X0 = g.ox + (i % g.cols) * g.s, Y0 = Math.floor(i / g.cols) * g.s, side = g.s - g.gap;
  const edge = (v0, v) => Math.round((v0 + v) * k);  // device pixel edges, rounded as the layer rounds them
  if (px < edge(X0, 0) || py < edge(Y0, 0) || px >= edge(X0, side) || py >= edge(Y0, side)) return [];
  // the device pixels of a ring w CSS px wide just inside the cell
  const ring = (w) => px < edge(X0, w) || py < edge(Y0, w) || px >= edge(X0, side - w) || py >= edge(Y0, side - w);
  const blocks = [...Array(g.group).keys()].map((j) => i * g.group + j).filter((b) => b < kb.n);
  const held = blocks.filter((b) => kb.owner[b] >= 0);
  if (!held.length) {
    if (!blocks.some((b) => kb.lru[b] >= 0)) return [[C.free, 1]];
    if (side < 4) return [[C.free, 1], [C.cached, 1]];
    return ring(side >= 10 ? 2 : 1) ? [[C.free, 1], [C.cached, 1]] : [[C.free, 1]];
  }
  const count = new Map();
  for (const b of held) count.set(kb.owner[b], (count.get(kb.owner[b]) || 0) + 1);
  const top = Math.max(...count.values());
  const owner = count.has(sel) ? sel : [...count].find(([, c]) => c === top)[0];  // (the first of the most)
  const one = g.group === 1 ? blocks[0] : null, holders = one != null && kb.sharers.get(one);
  const picked = sel == null || (holders ? holders.some((h) => h.rid === sel) : owner === sel);
  const a = picked ? 1 : DIM, color = reqColor(owner), out = [];
  const shared = one != null ? !!holders : held.some((b) => kb.refs[b] > 1);
  if (shared) {
    const rids = holders ? holders.map((h) => h.rid) : [owner], n = Math.min(rids.length, 4);
    for (let j = 0; j < n; j++) {
      const left = Math.floor((j * side) / n);
      if (px >= edge(X0, left) && px < edge(X0, left + Math.ceil(side / n))) out.push([reqColor(rids[j]), a]);
    }
    if (side >= 5 && ring(side >= 12 ? 2 : 1)) out.push([C.white, a]);
  } else {
    const tokens = held.reduce((t, b) => t + kb.tokens[b], 0);
    if (tokens <= 0) {
      const period = Math.max(3, Math.round(6 * scale * k));
      const width = Math.max(1, Math.round(1.6 * Math.SQRT2 * scale * k));
      out.push([C.idle, a]);
      if ((px + py) % period < width) out.push([color, a]);
    } else {
      const h = Math.max(1, Math.round((side * tokens) / (blocks.length * kb.bs)));
      out.push([color, 0.28 * a]);
      if (py >= edge(Y0, side - h)) out.push([color, a]);
    }
  }
  if (sel != null && picked && side >= 5 && ring(1)) out.push([C.white, 1]);
  return out;
}

const near = (got, want) => got.every((v, j) => Math.abs(v - want[j]) <= 1);

function check(seed) {
  const rnd = random(seed);
  const n = [40, 300, 5000, 131072][Math.floor(rnd() * 4)], k = [1, 1.5, 2][Math.floor(rnd() * 3)];
  const scale = [1, 1.25][Math.floor(rnd() * 2)];
  const W = 200 + Math.floor(rnd() * 400), H = 80 + Math.floor(rnd() * 200);
  const kv = pool(rnd, n), kb = KvBlocks.of(kv);
  const rids = Object.keys(kv.block_tables).map(Number);
  const sel = rnd() < 0.4 ? rids[Math.floor(rnd() * rids.length)] : null;
  const host = rnd() < 0.3 ? { num_blocks: 64 + Math.floor(rnd() * 2000), block_tables: { 7: [0, 1, 2], 8: [5, 40] } }
    : null;
  globalThis.window = { devicePixelRatio: k };
  const { ctx, images, calls } = recordingContext(k);
  const canvas = { width: 0, height: 0, style: {}, getContext: () => ctx };
  const view = { cell: {}, caption: { textContent: "" }, wrap: {}, canvas, geom: null };
  const inst = { sel, scale, sizes: new Map([[view.wrap, { w: W, h: H }]]), changed: () => true,
                 offscreen: () => false, laneConfig: () => ({}), contract: { parts: { prefill: "prefill" } } };
  KvMap.draw(inst, { name: "a", kv, kvRev: 1, pools: null, host }, view);
  const what = `seed ${seed} (${n} blocks in ${W} x ${H} px at ${k} device px a px, scale ${scale}, picked ${sel}`
    + `${host ? `, a host pool of ${host.num_blocks}` : ""})`;
  assert.equal(images.length, 1, `${what}: the pool reaches the canvas as one image`);
  assert.deepEqual(calls.filter((c) => c !== "fillText" && c !== "clearRect"), [], `${what}: nothing else drawn`);
  const [img] = images, g = view.geom, cells = Math.min(g.cells, 400);
  const pixel = (px, py) => {
    const at = 4 * ((py - img.y) * img.w + px - img.x);
    return [...img.bytes.slice(at, at + 4)];
  };
  assert.match(view.caption.textContent, new RegExp(`${kb.used} / ${n} blocks used`), what);
  for (let i = 0; i < g.cells; i += Math.max(1, Math.floor(g.cells / cells))) {  // (a few hundred cells a pool)
    const x0 = Math.round((g.ox + (i % g.cols) * g.s) * k), y0 = Math.round(Math.floor(i / g.cols) * g.s * k);
    for (let py = y0; py < Math.round((Math.floor(i / g.cols) + 1) * g.s * k); py++) {
      for (let px = x0; px < Math.round((g.ox + (i % g.cols + 1) * g.s) * k); px++) {
        const got = pixel(px, py), want = paint(expected(kb, g, i, sel, px, py, k, scale));
        assert.ok(near(got, want), `${what}: cell ${i} (group ${g.group}) px ${px}, ${py}: ${got}, not ${want}`);
      }
    }
  }
  for (const h of view.below || []) {  // the host pool: each cell's first held block's request, or free
    for (let i = 0; i < h.g.cells; i++) {
      const o = [...Array(h.g.group).keys()].map((j) => h.owner.get(i * h.g.group + j)).find((r) => r != null) ?? -1;
      const c = [Math.round((h.g.ox + (i % h.g.cols) * h.g.s + (h.g.s - h.g.gap) / 2) * k) - (k > 1 ? 1 : 0),
                 Math.round((h.top + Math.floor(i / h.g.cols) * h.g.s + (h.g.s - h.g.gap) / 2) * k) - (k > 1 ? 1 : 0)];
      const want = paint([[o < 0 ? C.free : reqColor(o), o < 0 || sel == null || o === sel ? 1 : DIM]]);
      assert.ok(near(pixel(...c), want), `${what}: host cell ${i} at ${c}: ${pixel(...c)}, not ${want}`);
    }
  }
  return [g.cells, host ? 1 : 0];
}

let cells = 0, hosts = 0;
for (let seed = 1; seed <= 30; seed++) {
  const [c, h] = check(seed);
  cells += c;
  hosts += h;
}
assert.ok(hosts > 0, "some pools have a host pool under them");
console.log(`ok - 30 pools (${hosts} with a host pool): ${cells} cells, each as the legend says`);
