// View: the physical KV block pool of one lane, one square cell per block (canvas): owned blocks in
// their request's color, shared blocks (prefix cache) striped in their holders' colors with a white
// border, cached-evictable blocks outlined, free blocks dark; with swap preemption, the host pool
// under a line below it.

defineLive("KvMap", ["Common", "KvBlocks", "LiveState"], () => {
  const { C, FONT, fmt, pct, rgba, reqColor, el, setText, hatchPattern, canvasContext } = Common;
  const MAX_STRIPES = 4;      // a shared block shows its first holders' colors; the count says how many
  const MAX_TIP_HOLDERS = 8;  // a shared block's tooltip lists this many holders
  const HOST_SHARE = 0.2;     // swap preemption: the share of the view's height the host pool takes
  const HOST_GAP = 6;         // px between the device pool and the host pool (a line in it)

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
    const count = new Map();
    let tokens = 0, used = 0, shared = 0, cached = 0;
    for (let i = first; i <= last; i++) {
      if (kc.lru[i] >= 0) cached++;
      const o = kc.owner[i];
      if (o < 0) continue;
      used++;
      tokens += kc.tokens[i];
      if (kc.refs[i] > 1) shared++;
      count.set(o, (count.get(o) || 0) + 1);
    }
    let owner = -1, best = 0;
    for (const [o, k] of count) if (k > best || o === sel) { owner = o; best = o === sel ? Infinity : k; }
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
    const inner = g.s - g.gap;
    for (let i = 0; i < g.cells; i++) {
      const cell = cellAt(kc, g, i, inst.sel);
      drawBlock(ctx, inst, g.ox + (i % g.cols) * g.s, Math.floor(i / g.cols) * g.s, inner, cell);
    }
    const name = (b) => (b.sender ? "prefill engine's pool" : sender ? "decode engine's host pool" : "host pool");
    view.below = below.map((b, k) => ({ ...drawHost(ctx, inst, b.pool, W, H - lowH * (below.length - k), lowH,
                                                    b.sender ? C.transfer : C.swapped), sender: b.sender, name: name(b) }));
    const copies = view.below.map((h) => (h.sender ? senderCaption(h, S) : hostCaption(h, S, inst.contract))).join("");
    setText(view.caption, (S.pools ? "decode engine's pool: " : "") + `${kc.used} / ${kc.n} blocks used (${fmt(pct(kc.used, kc.n), 1)}%) · `
      + `${kc.held.toLocaleString()} tokens in ${kc.slots.toLocaleString()} slots`
      + (kc.slots ? ` (${fmt(pct(kc.held, kc.slots), 0)}% full)` : "") + ` · ${kc.bs} tokens/block`
      + (kc.sharers.size ? ` · ${kc.sharers.size} shared` : "") + (kc.cached ? ` · ${kc.cached} cached` : "")
      + (g.group > 1 ? ` · 1 cell = ${g.group} blocks` : "") + copies);
  }

  // Swap preemption's host pool, under a line below the device pool: each swapped-out request's blocks
  // in its color, free ones dark. Returns what hover needs: its geometry, its top and block -> owner.
  function drawHost(ctx, inst, host, W, top, h, line) {
    const owner = new Map();
    for (const [rid, table] of Object.entries(host.block_tables || {})) for (const b of table) owner.set(b, +rid);
    const g = geometry(host.num_blocks, W, h - HOST_GAP);
    const y0 = top + HOST_GAP;
    ctx.fillStyle = line;
    ctx.fillRect(0, top + 1, W, 1);
    for (let i = 0; i < g.cells; i++) {
      const o = cellOwner(owner, host.num_blocks, g, i);
      ctx.globalAlpha = o < 0 || inst.sel == null || o === inst.sel ? 1 : 0.22;
      ctx.fillStyle = o < 0 ? C.free : reqColor(o);
      ctx.fillRect(g.ox + (i % g.cols) * g.s, y0 + Math.floor(i / g.cols) * g.s, g.s - g.gap, g.s - g.gap);
    }
    ctx.globalAlpha = 1;
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

  function drawBlock(ctx, inst, x, y, s, cell) {
    const { owner, tokens, cap } = cell;
    if (owner < 0) {
      ctx.fillStyle = C.free;
      ctx.fillRect(x, y, s, s);
      if (cell.cached) drawCached(ctx, x, y, s);
      return;
    }
    const color = reqColor(owner);
    const picked = inst.sel == null || (cell.holders ? cell.holders.includes(inst.sel) : owner === inst.sel);
    ctx.globalAlpha = picked ? 1 : 0.22;
    if (cell.shared) drawShared(ctx, inst, x, y, s, cell);
    else if (tokens <= 0) {  // reserved but holding nothing yet
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
    if (inst.sel != null && picked && s >= 5) {
      ctx.strokeStyle = C.white;
      ctx.lineWidth = 1;
      ctx.strokeRect(x + 0.5, y + 0.5, s - 1, s - 1);
    }
  }

  // Shared: stripes of its holders' colors (a grouped cell: its main owner's), a white border, and
  // how many hold it where it fits.
  function drawShared(ctx, inst, x, y, s, cell) {
    const holders = cell.holders || [cell.owner];
    const n = Math.min(holders.length, MAX_STRIPES);
    for (let i = 0; i < n; i++) {
      ctx.fillStyle = reqColor(holders[i]);
      ctx.fillRect(x + Math.floor((i * s) / n), y, Math.ceil(s / n), s);
    }
    if (s < 5) return;
    ctx.strokeStyle = C.white;
    ctx.lineWidth = s >= 12 ? 2 : 1;
    ctx.strokeRect(x + ctx.lineWidth / 2, y + ctx.lineWidth / 2, s - ctx.lineWidth, s - ctx.lineWidth);
    if (s < 18 * inst.scale || !cell.holders) return;
    ctx.font = `700 ${Math.round(s * 0.4)}px ${FONT}`;
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    ctx.fillStyle = C.bg;
    ctx.fillText(`×${holders.length}`, x + s / 2, y + s / 2 + 1);
  }

  // Cached-evictable: no holder, kept for a prefix hit until the pool needs it.
  function drawCached(ctx, x, y, s) {
    if (s < 4) {
      ctx.fillStyle = C.cached;
      ctx.fillRect(x, y, s, s);
      return;
    }
    ctx.strokeStyle = C.cached;
    ctx.lineWidth = s >= 10 ? 2 : 1;
    ctx.strokeRect(x + ctx.lineWidth / 2, y + ctx.lineWidth / 2, s - ctx.lineWidth, s - ctx.lineWidth);
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
