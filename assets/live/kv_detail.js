// View (mode "kv_detail"): one request's logical blocks -> block table -> physical pool, and how much
// of its allocation is unused, paged vs a contiguous reservation. With prefix caching: which of its
// blocks are shared and with whom, and which came from the cache at its admission.

defineLive("KvDetail", ["Common", "KvBlocks", "LiveState", "TextView", "Waits"], () => {
  const { C, FONT, clamp, fmt, pct, rgba, reqColor, el, hatchPattern, canvasContext } = Common;

  function build(inst, cell) {
    const head = el("div", "ifl-detail-head");
    const wrap = el("div", "ifl-canvas-wrap ifl-detail-canvas");
    wrap.style.height = `${Math.round(230 * inst.scale)}px`;
    const canvas = el("canvas", "ifl-canvas");
    wrap.appendChild(canvas);
    const stats = el("div", "ifl-detail-stats");
    cell.append(head, wrap, stats);
    inst.observe(wrap);
    return { cell, head, wrap, canvas, stats };
  }

  function detailRid(inst, S) {
    const tables = (S.kv && S.kv.block_tables) || {};
    if (inst.sel != null) return inst.sel;
    const live = Object.keys(tables).map(Number).filter((r) => tables[r].length);
    return live.length ? Math.max(...live) : null;
  }

  function draw(inst, S, view) {
    const rid = detailRid(inst, S);
    const size = inst.sizes.get(view.wrap);
    const R = rid != null ? S.reqs.get(rid) : null;
    const remote = LiveState.isRemote(S, inst.laneConfig(S.name));
    const sig = `${S.kvRev}|${rid}|${R ? R.state + R.maxTokens : ""}|${size ? size.w + "x" + size.h : ""}|${remote}`;
    if (inst.offscreen(view.wrap) || !inst.changed(view.canvas, sig)) return;
    const c = canvasContext(inst.sizes, view);
    if (!c) return;
    c.ctx.clearRect(0, 0, c.W, c.H);
    view.head.textContent = "";
    view.stats.textContent = "";
    const table = rid != null && S.kv ? (S.kv.block_tables || {})[String(rid)] : null;
    if (remote) {
      view.head.appendChild(el("span", "ifl-muted", "A remote server does not expose its KV blocks"));
      return;
    }
    if (rid == null || !table) {
      const why = R && !R.done && R.wait ? `: it waits (${Waits.say(inst.contract, R.wait, inst.serviceClock())})` : "";
      const ended = R && R.done ? " (finished: its blocks were freed)" : why;
      view.head.appendChild(el("span", "ifl-muted", rid == null
        ? "No request holds KV blocks right now. Submit one, or pick one in any view."
        : `Request #${rid} holds no KV blocks right now${ended}.`));
      return;
    }
    const kc = KvBlocks.of(S.kv);
    const held = (S.kv.kv_tokens || {})[String(rid)] ?? 0;
    head(view.head, rid, R, S, inst);
    drawBlockTable(c, inst, kc, rid, table, held, fromCache(kc, R));
    detailStats(view.stats, kc, rid, R, table, held, S);
    if (LiveState.prefixOn(S, inst.laneConfig(S.name)) || kc.sharers.size || kc.cached) {
      view.stats.appendChild(sharingNote(kc, rid, R, table));
    }
  }

  function head(box, rid, R, S, inst) {
    const chip = el("span", "ifl-chip", `#${rid}`);
    chip.style.background = reqColor(rid);
    box.append(chip, el("span", "ifl-state", R ? TextView.statusLabel(R, S, inst) : ""));
    if (R && R.prompt) box.appendChild(el("span", "ifl-detail-prompt", R.prompt));
  }

  // Its leading blocks a prefix hit served at its (latest) admission.
  function fromCache(kc, R) {
    return R ? Math.floor(R.cached / kc.bs) : 0;
  }

  // Three aligned rows: logical blocks (fill = tokens; dashed white: from the prefix cache), the block
  // table (physical ids; a white box: shared, with its holder count), and the physical pool as a
  // strip, with a line from each table entry to where its block really lives.
  function drawBlockTable(c, inst, kc, rid, table, held, nCached) {
    const { ctx, W, H } = c;
    const k = inst.scale;
    const color = reqColor(rid);
    const L = Math.round(150 * k), R = 16, n = table.length, bs = kc.bs;
    const span = W - L - R;
    const w = Math.min(64 * k, span / Math.max(n, 1));
    const boxW = Math.max(2, w - (w > 10 ? 4 : 1));
    const rowH = Math.round(34 * k);
    const yA = Math.round(22 * k), yB = yA + rowH + Math.round(26 * k), yC = H - Math.round(58 * k);
    const poolH = Math.round(26 * k);
    ctx.font = `${Math.round(14 * k)}px ${FONT}`;
    ctx.textBaseline = "middle";
    ctx.fillStyle = C.muted;
    ctx.fillText("logical blocks", 0, yA + rowH / 2);
    ctx.fillText("block table", 0, yB + rowH / 2);
    ctx.fillText("physical pool", 0, yC + poolH / 2);
    const xOf = (i) => L + i * w;
    const physX = (b) => L + ((b + 0.5) / kc.n) * span;
    // links: logical -> table (straight), table -> pool (curves)
    ctx.strokeStyle = rgba(color, 0.55);
    ctx.lineWidth = 1.2 * k;
    for (let i = 0; i < n; i++) {
      const cx = xOf(i) + boxW / 2;
      ctx.beginPath();
      ctx.moveTo(cx, yA + rowH);
      ctx.lineTo(cx, yB);
      ctx.moveTo(cx, yB + rowH);
      const px = physX(table[i]);
      ctx.bezierCurveTo(cx, (yB + rowH + yC) / 2, px, (yB + rowH + yC) / 2, px, yC);
      ctx.stroke();
    }
    ctx.textAlign = "center";
    for (let i = 0; i < n; i++) {
      const x = xOf(i), tokens = clamp(held - i * bs, 0, bs);
      // logical block: fill level = tokens held
      if (tokens > 0) {
        ctx.fillStyle = rgba(color, 0.25);
        ctx.fillRect(x, yA, boxW, rowH);
        const h = Math.round((rowH * tokens) / bs);
        ctx.fillStyle = color;
        ctx.fillRect(x, yA + rowH - h, boxW, h);
      } else {
        ctx.fillStyle = C.idle;
        ctx.fillRect(x, yA, boxW, rowH);
        ctx.fillStyle = hatchPattern(ctx, color, k);
        ctx.fillRect(x, yA, boxW, rowH);
      }
      if (boxW >= 26 * k) {
        ctx.fillStyle = tokens > bs / 2 ? C.bg : C.text;
        ctx.fillText(`${tokens}`, x + boxW / 2, yA + rowH / 2);
      }
      if (i < nCached) dashedBox(ctx, k, x, yA, boxW, rowH);
      tableEntry(ctx, k, color, x, yB, boxW, rowH, table[i], kc.refs[table[i]]);
    }
    if (w >= 18 * k) {  // logical indices above the first row
      ctx.fillStyle = C.muted;
      ctx.font = `${Math.round(12 * k)}px ${FONT}`;
      for (let i = 0; i < n; i++) ctx.fillText(String(i), xOf(i) + boxW / 2, yA - 9 * k);
    }
    drawPoolStrip(ctx, inst, kc, rid, table, L, yC, span, poolH);
    ctx.textAlign = "left";
  }

  function dashedBox(ctx, k, x, y, w, h) {
    ctx.strokeStyle = C.white;
    ctx.lineWidth = 1.5 * k;
    ctx.setLineDash([4 * k, 3 * k]);
    ctx.strokeRect(x + 1, y + 1, w - 2, h - 2);
    ctx.setLineDash([]);
  }

  // One table entry: the physical block id; a shared block is boxed in white with its holder count.
  function tableEntry(ctx, k, color, x, y, w, h, block, refs) {
    const shared = refs > 1;
    ctx.fillStyle = shared ? "#2A3347" : "#1B2334";
    ctx.fillRect(x, y, w, h);
    ctx.strokeStyle = shared ? C.white : color;
    ctx.lineWidth = (shared ? 2.5 : 1.5) * k;
    ctx.strokeRect(x + 0.5, y + 0.5, w - 1, h - 1);
    if (w < 30 * k) return;
    ctx.fillStyle = C.text;
    ctx.fillText(shared ? `${block} ×${refs}` : String(block), x + w / 2, y + h / 2);
  }

  function drawPoolStrip(ctx, inst, kc, rid, table, L, y, span, h) {
    const color = reqColor(rid);
    const bw = span / kc.n, mine = new Set(table);  // its shared blocks may list another holder first
    ctx.fillStyle = C.free;
    ctx.fillRect(L, y, span, h);
    for (let b = 0; b < kc.n; b++) {
      const o = kc.owner[b];
      if (kc.lru[b] >= 0) {  // cached-evictable: a low slate mark
        ctx.fillStyle = C.cached;
        ctx.fillRect(L + b * bw, y + h * 0.7, Math.max(bw, 1), h * 0.3);
      }
      if (o < 0) continue;
      const own = mine.has(b);
      ctx.fillStyle = own ? color : rgba(reqColor(o), 0.35);
      ctx.fillRect(L + b * bw, y + (own ? 0 : h * 0.3), Math.max(bw, own ? 2 : 1), own ? h : h * 0.7);
    }
    ctx.fillStyle = C.muted;
    ctx.font = `${Math.round(12 * inst.scale)}px ${FONT}`;
    ctx.textBaseline = "top";
    ctx.textAlign = "left";
    ctx.fillText("block 0", L, y + h + 6);
    ctx.textAlign = "right";
    ctx.fillText(`block ${kc.n - 1}`, L + span, y + h + 6);
    ctx.textBaseline = "middle";
  }

  // Fragmentation: tokens held vs slots allocated (paged) vs a contiguous prompt + max_tokens reservation.
  function detailStats(box, kc, rid, R, table, held, S) {
    const bs = kc.bs, allocated = table.length * bs;
    const contiguous = R && R.nPrompt != null && R.maxTokens != null ? R.nPrompt + R.maxTokens : null;
    const rows = [
      ["tokens held", held, `${held.toLocaleString()} tokens in KV`, "held"],
      ["paged", allocated, `${table.length} blocks × ${bs} = ${allocated.toLocaleString()} slots · `
        + `${(allocated - held).toLocaleString()} unused (${fmt(pct(allocated - held, allocated), 1)}%)`
        + (allocated - held < bs ? " — only in the last block" : " — reserved ahead"), "paged"],
    ];
    if (contiguous != null) {
      rows.push(["contiguous", contiguous, `prompt ${R.nPrompt} + max_tokens ${R.maxTokens} = `
        + `${contiguous.toLocaleString()} slots · ${Math.max(0, contiguous - held).toLocaleString()} unused `
        + `(${fmt(pct(Math.max(0, contiguous - held), contiguous), 1)}%)`, "contig"]);
    }
    const top = Math.max(...rows.map((r) => r[1]), 1);
    for (const [label, value, note, kind] of rows) {
      const row = el("div", "ifl-frag-row");
      const bar = el("div", "ifl-frag-bar");
      const fillEl = el("div", `ifl-frag-fill ifl-frag-${kind}`);
      fillEl.style.width = `${(100 * value) / top}%`;
      fillEl.style.setProperty("--c", reqColor(rid));
      bar.appendChild(fillEl);
      row.append(el("div", "ifl-frag-label", label), bar, el("div", "ifl-frag-note", note));
      box.appendChild(row);
    }
    box.appendChild(poolTotals(kc, S));
  }

  // Which of its blocks are shared and with whom, which came from the cache, and the pool's counts.
  function sharingNote(kc, rid, R, table) {
    const shared = table.filter((b) => kc.refs[b] > 1).length;
    const others = KvBlocks.sharedWith(kc, rid).map((o) => `#${o.rid} (${o.blocks})`);
    const cachedTok = R ? R.cached : 0;
    const text = `Prefix cache: ${shared} of its ${table.length} blocks shared`
      + (others.length ? ` — with ${others.join(", ")} (blocks in common)` : "")
      + ` · ${cachedTok ? `${cachedTok.toLocaleString()} tokens (${fromCache(kc, R)} blocks) came from the cache`
        + " at admission, not computed" : "nothing came from the cache"}`
      + ` · pool: ${kc.sharers.size} shared, ${kc.cached} cached-evictable blocks`;
    return el("div", "ifl-frag-pool", text);
  }

  function poolTotals(kc, S) {
    let contiguous = 0, known = 0, count = 0;
    for (const key of Object.keys(kc.tables)) {
      count++;
      const R = S.reqs.get(Number(key));
      if (R && R.nPrompt != null && R.maxTokens != null) {
        contiguous += R.nPrompt + R.maxTokens;
        known++;
      }
    }
    const text = `Whole pool (${S.name}, ${count} requests holding KV): ${kc.held.toLocaleString()} tokens held in `
      + `${kc.slots.toLocaleString()} paged slots (${fmt(pct(kc.reservedUnused, kc.slots), 1)}% unused)`
      + (known === count && count ? ` · a contiguous prompt + max_tokens reservation would take `
        + `${contiguous.toLocaleString()} slots (${fmt(pct(Math.max(0, contiguous - kc.held), contiguous), 1)}% unused)` : "");
    return el("div", "ifl-frag-pool", text);
  }

  return { build, draw };
});
