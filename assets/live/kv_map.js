// View: the physical KV block pool of one lane, one square cell per block (canvas).

const KvMap = (() => {
  const { C, clamp, fmt, pct, rgba, reqColor, el, setText, hatchPattern, canvasContext } = Common;
  const cellsCache = new WeakMap();  // KV snapshot (an event's kv object) -> its per-block arrays

  function build(inst, cell, name) {
    const caption = el("div", "ifl-caption", "");
    const wrap = el("div", "ifl-canvas-wrap");
    const canvas = el("canvas", "ifl-canvas");
    wrap.appendChild(canvas);
    cell.append(caption, wrap);
    inst.observe(wrap);
    const view = { cell, caption, wrap, canvas, geom: null };
    canvas.onmousemove = (e) => hover(inst, name, view, e);
    canvas.onmouseleave = () => inst.tip.hide();
    canvas.onclick = (e) => {
      const b = blockAt(inst, name, view, e);
      if (b) inst.pick(b.owner >= 0 ? b.owner : null);
    };
    return view;
  }

  // Per-block owner, logical index and tokens held of one KV snapshot (computed once per snapshot).
  function cells(kv) {
    let kc = cellsCache.get(kv);
    if (kc) return kc;
    const n = kv.num_blocks, bs = kv.block_size;
    const owner = new Int32Array(n).fill(-1);  // the block tables' inverse (the wire carries only tables)
    const logical = new Int32Array(n).fill(-1);
    const tokens = new Int32Array(n);
    let held = 0, slots = 0;
    for (const [key, table] of Object.entries(kv.block_tables || {})) {
      const kvTok = (kv.kv_tokens || {})[key] ?? 0;
      held += kvTok;
      slots += table.length * bs;
      table.forEach((b, i) => {
        if (b < 0 || b >= n) return;
        owner[b] = Number(key);
        logical[b] = i;
        tokens[b] = clamp(kvTok - i * bs, 0, bs);
      });
    }
    kc = { n, bs, owner, logical, tokens, held, slots, used: kv.used, reservedUnused: kv.reserved_unused_slots,
           tables: kv.block_tables || {} };
    cellsCache.set(kv, kc);
    return kc;
  }

  // Square cells filling the box: the largest cell size that fits all blocks. A pool too big for
  // 3 px cells is drawn with `group` consecutive blocks per cell (said in the caption).
  function geometry(n, W, H) {
    const MIN = 3;
    const group = Math.max(1, Math.ceil(n / (Math.floor(W / MIN) * Math.floor(H / MIN))));
    const count = Math.ceil(n / group);
    let s = Math.max(MIN, Math.floor(Math.sqrt((W * H) / Math.max(count, 1))));
    while (s > MIN && Math.floor(W / s) * Math.floor(H / s) < count) s--;
    const cols = Math.max(1, Math.floor(W / s));
    return { s, cols, cells: count, group, gap: s >= 7 ? 1 : 0, ox: Math.floor((W - cols * s) / 2) };
  }

  // One cell's content: its block, or for a grouped cell the most common owner (the picked request
  // wins) and the tokens held in the group.
  function cellAt(kc, g, c, sel) {
    if (g.group === 1) return { owner: kc.owner[c], tokens: kc.tokens[c], cap: kc.bs, first: c, last: c, used: null };
    const first = c * g.group, last = Math.min(kc.n, first + g.group) - 1;
    const count = new Map();
    let tokens = 0, used = 0;
    for (let i = first; i <= last; i++) {
      const o = kc.owner[i];
      if (o < 0) continue;
      used++;
      tokens += kc.tokens[i];
      count.set(o, (count.get(o) || 0) + 1);
    }
    let owner = -1, best = 0;
    for (const [o, k] of count) if (k > best || o === sel) { owner = o; best = o === sel ? Infinity : k; }
    return { owner, tokens, cap: (last - first + 1) * kc.bs, first, last, used };
  }

  function draw(inst, S, view) {
    const size = inst.sizes.get(view.wrap);
    const remote = (inst.laneConfig(S.name) || {}).source === "remote";
    const sig = `${S.kvRev}|${inst.sel}|${size ? size.w + "x" + size.h : ""}|${remote}`;
    if (remote) {
      if (inst.changed(view.canvas, sig)) {
        const c = canvasContext(inst.sizes, view);
        if (c) c.ctx.clearRect(0, 0, c.W, c.H);
        setText(view.caption, "A remote server does not expose its KV block map");
      }
      return;
    }
    if (!S.kv) {
      if (inst.changed(view.canvas, sig)) {
        const c = canvasContext(inst.sizes, view);
        if (c) c.ctx.clearRect(0, 0, c.W, c.H);
        setText(view.caption, "no KV snapshot yet (waiting for the first iteration)");
      }
      return;
    }
    if (inst.offscreen(view.wrap) || !inst.changed(view.canvas, sig)) return;
    const c = canvasContext(inst.sizes, view);
    if (!c) return;
    const { ctx, W, H } = c;
    const kc = cells(S.kv);
    const g = geometry(kc.n, W, H);
    view.geom = g;
    ctx.clearRect(0, 0, W, H);
    const inner = g.s - g.gap;
    for (let i = 0; i < g.cells; i++) {
      const cell = cellAt(kc, g, i, inst.sel);
      drawBlock(ctx, inst, g.ox + (i % g.cols) * g.s, Math.floor(i / g.cols) * g.s, inner, cell);
    }
    setText(view.caption, `${kc.used} / ${kc.n} blocks used (${fmt(pct(kc.used, kc.n), 1)}%) · `
      + `${kc.held.toLocaleString()} tokens in ${kc.slots.toLocaleString()} slots`
      + (kc.slots ? ` (${fmt(pct(kc.held, kc.slots), 0)}% full)` : "") + ` · ${kc.bs} tokens/block`
      + (g.group > 1 ? ` · 1 cell = ${g.group} blocks` : ""));
  }

  function drawBlock(ctx, inst, x, y, s, { owner, tokens, cap }) {
    if (owner < 0) {
      ctx.fillStyle = C.free;
      ctx.fillRect(x, y, s, s);
      return;
    }
    const color = reqColor(owner);
    ctx.globalAlpha = inst.sel != null && owner !== inst.sel ? 0.22 : 1;
    if (tokens <= 0) {  // reserved but holding nothing yet
      ctx.fillStyle = C.idle;
      ctx.fillRect(x, y, s, s);
      ctx.fillStyle = hatchPattern(ctx, color, inst.scale);
      ctx.fillRect(x, y, s, s);
    } else {
      ctx.fillStyle = rgba(color, 0.28);
      ctx.fillRect(x, y, s, s);
      const h = Math.max(1, Math.round((s * tokens) / cap));
      ctx.fillStyle = color;
      ctx.fillRect(x, y + s - h, s, h);
    }
    ctx.globalAlpha = 1;
    if (inst.sel === owner && s >= 5) {
      ctx.strokeStyle = C.white;
      ctx.lineWidth = 1;
      ctx.strokeRect(x + 0.5, y + 0.5, s - 1, s - 1);
    }
  }

  function blockAt(inst, name, view, e) {
    const S = inst.state && inst.state.by.get(name);
    if (!S || !S.kv || !view.geom) return null;
    const r = view.canvas.getBoundingClientRect();
    const g = view.geom;
    const cx = Math.floor((e.clientX - r.left - g.ox) / g.s), cy = Math.floor((e.clientY - r.top) / g.s);
    if (cx < 0 || cx >= g.cols || cy < 0) return null;
    const c = cy * g.cols + cx;
    if (c >= g.cells) return null;
    const kc = cells(S.kv);
    const cell = cellAt(kc, g, c, inst.sel);
    return { ...cell, i: cell.first, logical: kc.logical[cell.first], bs: kc.bs, group: g.group };
  }

  function hover(inst, name, view, e) {
    const b = blockAt(inst, name, view, e);
    if (!b) return inst.tip.hide();
    let lines;
    if (b.group > 1) {
      lines = [`blocks ${b.first}–${b.last}`, b.owner < 0 ? "all free"
        : `${b.used} used · mostly request #${b.owner}`, `${b.tokens} / ${b.cap} token slots held`];
    } else {
      lines = b.owner < 0 ? [`block ${b.i}`, "free"]
        : [`block ${b.i} · request #${b.owner}`, `logical block ${b.logical}`,
           b.tokens > 0 ? `${b.tokens} / ${b.bs} tokens held` : `0 / ${b.bs} tokens (reserved, unused)`];
    }
    inst.tip.show(e, lines, b.owner >= 0 ? reqColor(b.owner) : C.muted);
  }

  return { build, draw, cells };
})();
