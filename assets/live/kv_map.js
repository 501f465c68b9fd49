// View: the physical KV block pool of one lane, one square cell per block (canvas): owned blocks in
// their request's color, shared blocks (prefix cache) striped in their holders' colors with a white
// border, cached-evictable blocks outlined, free blocks dark; with swap preemption, the host pool
// under a line below it.

defineLive("KvMap", ["Common", "KvBlocks", "LiveState", "Raster"], () => {
  const { C, FONT, fmt, pct, reqColor, el, setText, canvasContext } = Common;
  const MAX_STRIPES = 4;      // a shared block shows its first holders' colors; the count says how many
  const MAX_TIP_HOLDERS = 8;  // a shared block's tooltip lists this many holders
  const HOST_SHARE = 0.2;     // swap preemption: the share of the view's height the host pool takes
  const HOST_GAP = 6;         // px between the device pool and the host pool (a line in it)
  const DIM = 0.22;           // the opacity of blocks other than the picked request's

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
  // wins), the tokens held and how many blocks are shared / cached in the group.
  function cellAt(kc, g, c, sel) {
    if (g.group === 1) {
      const holders = kc.sharers.get(c);
      return { owner: kc.owner[c], tokens: kc.tokens[c], cap: kc.bs, first: c, last: c, used: null,
               holders: holders ? holders.map((h) => h.rid) : null, shared: holders ? 1 : 0, cached: kc.lru[c] >= 0 ? 1 : 0 };
    }
    const first = c * g.group, last = Math.min(kc.n, first + g.group) - 1;
    let tokens = 0, used = 0, shared = 0, cached = 0, owner = -1, best = 0, count = null;
    for (let i = first; i <= last; i++) {
      if (kc.lru[i] >= 0) cached++;
      const o = kc.owner[i];
      if (o < 0) continue;
      used++;
      tokens += kc.tokens[i];
      if (kc.refs[i] > 1) shared++;
      if (owner < 0 || o === owner) [owner, best] = [o, best + 1];  // (a second owner: counted in a map)
      else (count ||= new Map([[owner, best]])).set(o, (count.get(o) || 0) + 1);
    }
    if (count) {
      count.set(owner, best);
      [owner, best] = [-1, 0];
      for (const [o, k] of count) if (k > best || o === sel) { owner = o; best = o === sel ? Infinity : k; }
    }
    return { owner, tokens, cap: (last - first + 1) * kc.bs, first, last, used, holders: null, shared, cached };
  }

  function draw(inst, S, view) {
    const size = inst.sizes.get(view.wrap);
    const remote = LiveState.isRemote(S, inst.laneConfig(S.name));
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
    const kc = KvBlocks.of(S.kv);
    // under the device pool: a disaggregated lane's prefill engine's pool, then swap preemption's host pool
    const sender = S.pools ? S.pools[inst.contract.parts.prefill] : null;
    const below = [sender && { pool: sender, sender: true }, S.host && { pool: S.host, sender: false }].filter(Boolean);
    const lowH = below.length ? Math.min(Math.max(18, Math.round(H * HOST_SHARE / Math.sqrt(below.length))),
                                         Math.floor(H * 0.45 / below.length)) : 0;  // the device pool keeps the most
    const g = geometry(kc.n, W, H - lowH * below.length);
    view.geom = g;
    ctx.clearRect(0, 0, W, H);
    // a cell or a few rectangles a block: tens of thousands at a GPU's pool size, so a layer of pixels
    // (raster.js) takes them, and the canvas only the shared blocks' counts
    const layer = Raster.layer(ctx, 0, 0, W, H), counts = [];
    const inner = g.s - g.gap;
    for (let i = 0; i < g.cells; i++) {
      const cell = cellAt(kc, g, i, inst.sel);
      drawBlock(layer, inst, g.ox + (i % g.cols) * g.s, Math.floor(i / g.cols) * g.s, inner, cell, counts);
    }
    const name = (b) => (b.sender ? "prefill engine's pool" : sender ? "decode engine's host pool" : "host pool");
    view.below = below.map((b, k) => ({ ...drawHost(layer, inst, b.pool, W, H - lowH * (below.length - k), lowH,
                                                    b.sender ? C.transfer : C.swapped), sender: b.sender, name: name(b) }));
    layer.draw();
    for (const c of counts) drawCount(ctx, ...c);
    const copies = view.below.map((h) => (h.sender ? senderCaption(h, S) : hostCaption(h, S, inst.contract))).join("");
    setText(view.caption, (S.pools ? "decode engine's pool: " : "") + `${kc.used} / ${kc.n} blocks used (${fmt(pct(kc.used, kc.n), 1)}%) · `
      + `${kc.held.toLocaleString()} tokens in ${kc.slots.toLocaleString()} slots`
      + (kc.slots ? ` (${fmt(pct(kc.held, kc.slots), 0)}% full)` : "") + ` · ${kc.bs} tokens/block`
      + (kc.sharers.size ? ` · ${kc.sharers.size} shared` : "") + (kc.cached ? ` · ${kc.cached} cached` : "")
      + (g.group > 1 ? ` · 1 cell = ${g.group} blocks` : "") + copies);
  }

  // Swap preemption's host pool, under a line below the device pool: each swapped-out request's blocks
  // in its color, free ones dark. Returns what hover needs: its geometry, its top and block -> owner.
  function drawHost(layer, inst, host, W, top, h, line) {
    const owner = new Map();
    for (const [rid, table] of Object.entries(host.block_tables || {})) for (const b of table) owner.set(b, +rid);
    const g = geometry(host.num_blocks, W, h - HOST_GAP);
    const y0 = top + HOST_GAP;
    layer.rect(0, top + 1, W, 1, line);
    for (let i = 0; i < g.cells; i++) {
      const o = cellOwner(owner, host.num_blocks, g, i);
      layer.rect(g.ox + (i % g.cols) * g.s, y0 + Math.floor(i / g.cols) * g.s, g.s - g.gap, g.s - g.gap,
                 o < 0 ? C.free : reqColor(o), o < 0 || inst.sel == null || o === inst.sel ? 1 : DIM);
    }
    return { g, top: y0, owner, n: host.num_blocks, rids: Object.keys(host.block_tables || {}).map(Number),
             sameRam: !!host.same_ram };
  }

  // A cell's request: its block's, or for a cell of several blocks the first held one's (-1: all free).
  function cellOwner(owner, n, g, i) {
    for (let b = i * g.group; b < Math.min(n, (i + 1) * g.group); b++) if (owner.has(b)) return owner.get(b);
    return -1;
  }

  function hostCaption(host, S, contract) {
    const who = host.rids.length ? ` (${host.rids.slice(0, 4).map((r) => "#" + r).join(", ")}`
      + `${host.rids.length > 4 ? ", …" : ""} swapped out)` : "";
    const moved = S.swapBytes ? ` · ${fmt(S.swapBytes / 1e6, 1)} MB copied in ${fmt(1000 * S.swapS, 1)} ms` : "";
    const ram = host.sameRam ? " (the same RAM as the device pool: a memory copy, not PCIe)" : "";
    const now = (S.swaps || []).map(([rid, way, n]) => `#${rid} ${way === contract.swap.out ? "out" : "back"} ${n}`)
      .join(", ");
    return ` · ${host.name}${ram} ${host.owner.size} / ${host.n} blocks${who}${moved}`
      + (now ? ` · this iteration: ${now} blocks` : "");
  }

  // A disaggregated lane's prefill pool: its blocks held (prompts being prefilled, or handed on and waiting
  // for the decode engine's copy), and the hand-offs so far, each copy timed by the decode engine.
  function senderCaption(pool, S) {
    const moved = S.handoffN ? ` · ${S.handoffN} hand-offs: ${fmt(S.handoffBytes / 1e6, 1)} MB copied in `
      + `${fmt(1000 * S.handoffS, 1)} ms` : "";
    const now = (S.handoffs || []).map(([rid, n]) => `#${rid} ${n}`).join(", ");
    return ` · ${pool.name} ${pool.owner.size} / ${pool.n} blocks${moved}`
      + (now ? ` · this iteration: ${now} blocks copied over` : "");
  }

  // A block's cell (a Raster layer): free dark; held in its request's color, filled from the foot as far as
  // its tokens go; reserved and empty hatched; shared striped (drawShared); the picked request's outlined,
  // the others' dimmed. counts: where a shared block's holders are counted in text, for the canvas.
  function drawBlock(layer, inst, x, y, s, cell, counts) {
    const { owner, tokens, cap } = cell;
    if (owner < 0) {
      layer.rect(x, y, s, s, C.free);
      if (cell.cached) drawCached(layer, x, y, s);
      return;
    }
    const color = reqColor(owner);
    const picked = inst.sel == null || (cell.holders ? cell.holders.includes(inst.sel) : owner === inst.sel);
    const a = picked ? 1 : DIM;
    if (cell.shared) drawShared(layer, inst, x, y, s, cell, a, counts);
    else if (tokens <= 0) {  // reserved but holding nothing yet
      layer.rect(x, y, s, s, C.idle, a);
      layer.hatch(x, y, s, s, color, inst.scale, a);
    } else {
      const h = Math.max(1, Math.round((s * tokens) / cap));
      layer.rect(x, y, s, s, color, 0.28 * a);
      layer.rect(x, y + s - h, s, h, color, a);
    }
    if (inst.sel != null && picked && s >= 5) outline(layer, x, y, s, 1, C.white, 1);
  }

  // A ring w pixels wide just inside the cell.
  function outline(layer, x, y, s, w, color, a) {
    layer.rect(x, y, s, w, color, a);
    layer.rect(x, y + s - w, s, w, color, a);
    layer.rect(x, y + w, w, s - 2 * w, color, a);
    layer.rect(x + s - w, y + w, w, s - 2 * w, color, a);
  }

  // Shared: stripes of its holders' colors (a grouped cell: its main owner's), a white border, and how many
  // hold it where it fits (into counts, drawn on the canvas over the layer).
  function drawShared(layer, inst, x, y, s, cell, a, counts) {
    const holders = cell.holders || [cell.owner];
    const n = Math.min(holders.length, MAX_STRIPES);
    for (let i = 0; i < n; i++) {
      layer.rect(x + Math.floor((i * s) / n), y, Math.ceil(s / n), s, reqColor(holders[i]), a);
    }
    if (s < 5) return;
    outline(layer, x, y, s, s >= 12 ? 2 : 1, C.white, a);
    if (s >= 18 * inst.scale && cell.holders) counts.push([x, y, s, holders.length, a]);
  }

  function drawCount(ctx, x, y, s, n, a) {
    ctx.globalAlpha = a;
    ctx.font = `700 ${Math.round(s * 0.4)}px ${FONT}`;
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    ctx.fillStyle = C.bg;
    ctx.fillText(`×${n}`, x + s / 2, y + s / 2 + 1);
    ctx.globalAlpha = 1;
  }

  // Cached-evictable: no holder, kept for a prefix hit until the pool needs it.
  function drawCached(layer, x, y, s) {
    if (s < 4) layer.rect(x, y, s, s, C.cached);
    else outline(layer, x, y, s, s >= 10 ? 2 : 1, C.cached, 1);
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
    const kc = KvBlocks.of(S.kv);
    const cell = cellAt(kc, g, c, inst.sel);
    return { ...cell, i: cell.first, kc, bs: kc.bs, group: g.group };
  }

  // The block under the pointer in a pool drawn under the device pool: [that pool, block, owner] (owner -1:
  // free), or null.
  function belowBlockAt(view, e) {
    const r = view.canvas.getBoundingClientRect();
    for (const h of view.below || []) {
      const g = h.g;
      const cx = Math.floor((e.clientX - r.left - g.ox) / g.s), cy = Math.floor((e.clientY - r.top - h.top) / g.s);
      const c = cy * g.cols + cx;
      if (cx >= 0 && cx < g.cols && cy >= 0 && c < g.cells) return [h, c * g.group, cellOwner(h.owner, h.n, g, c)];
    }
    return null;
  }

  function hover(inst, name, view, e) {
    const hb = belowBlockAt(view, e);
    if (hb) {
      const [h, i, o] = hb;
      const lines = h.sender
        ? [`${h.name} block ${i}`, o < 0 ? "free" : `#${o}: prefilling, or handed on and waiting to be copied`]
        : [`${h.name} block ${i}`, o < 0 ? "free" : `#${o} swapped out: its KV waits here`];
      return inst.tip.show(e, lines, o < 0 ? C.muted : reqColor(o));
    }
    const b = blockAt(inst, name, view, e);
    if (!b) return inst.tip.hide();
    const lines = b.group > 1 ? groupTip(b) : b.owner < 0 ? unheldTip(b) : heldTip(b);
    inst.tip.show(e, lines, b.owner >= 0 ? reqColor(b.owner) : b.cached ? C.cached : C.muted);
  }

  function groupTip(b) {
    return [`blocks ${b.first}–${b.last}`, b.owner < 0 ? "none held" : `${b.used} used · mostly request #${b.owner}`,
            `${b.tokens} / ${b.cap} token slots held`, b.shared ? `${b.shared} shared by several requests` : "",
            b.cached ? `${b.cached} cached, evictable` : ""].filter(Boolean);
  }

  function unheldTip(b) {
    if (!b.cached) return [`block ${b.i}`, "free"];
    return [`block ${b.i} · cached, evictable`, "held by no request: a prefix hit reuses it",
            `eviction order ${b.kc.lru[b.i] + 1} of ${b.kc.cached} (least recently used first)`];
  }

  function heldTip(b) {
    const tokens = b.tokens > 0 ? `${b.tokens} / ${b.bs} tokens held` : `0 / ${b.bs} tokens (reserved, unused)`;
    const holders = b.kc.sharers.get(b.i);
    if (!holders) return [`block ${b.i} · request #${b.owner}`, `logical block ${b.kc.logical[b.i]}`, tokens];
    const more = holders.length - MAX_TIP_HOLDERS;
    return [`block ${b.i} · shared by ${holders.length} requests (prefix cache)`,
            ...holders.slice(0, MAX_TIP_HOLDERS).map((h) => `#${h.rid} · its logical block ${h.logical}`),
            more > 0 ? `… and ${more} more` : "", tokens].filter(Boolean);
  }

  return { build, draw };
});
