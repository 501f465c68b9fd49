// Timeline band: batch slots. Slot x iteration: each cell is the request in that batch slot in that
// iteration, shaded by phase (prefill light, decode full, padding hatched grey); runs of the same request
// and phase are drawn as one rectangle. A speculating row's drafts are ticks along its cell's foot:
// white where accepted, red where rejected. On the time axis an iteration spans [t_start, t_end]; idle time
// stays empty. A disaggregated lane has a grid per engine: the decode engine's above the prefill engine's.
// An iteration whose decoding rows waited for a prefill (a stall, state.js) is marked amber. A continuous
// lane's slot is the seat its request holds while it runs (state.js seatRows).

defineLive("Slots", ["Common", "LiveState", "Raster"], () => {
  const { C, FONT, fmt, mix, reqColor, stallTip, drawStall } = Common;
  const { KIND, maxBatch, engineSteps, isRemote } = LiveState;
  const REMOTE_NOTE = "A remote server does not expose its batch slots (its rows are timed at this client)";

  // Columns of the grid, as edges: one column per iteration; on the time axis idle time between
  // iterations (e.g. a static batch filling up) is an empty column, so both lanes align in time.
  function slotColumns(S, fc, range, pxPerX) {
    const cols = [], edges = [];
    if (fc.axis !== "time") {
      for (const st of S.steps) {
        if (st.it < range[0] - 1 || st.it > range[1] + 1) continue;
        if (cols.length && st.it !== cols[cols.length - 1].it + 1) {
          cols.push(null);
          edges.push(st.it - 0.5);
        }
        if (!edges.length) edges.push(st.it - 0.5);
        cols.push(st);
        edges.push(st.it + 0.5);
      }
      return { cols, edges };
    }
    const minGap = 1.5 / Math.max(pxPerX, 1e-9);  // gaps under ~1.5 px are not drawn
    for (const st of S.steps) {
      if (st.t1 < range[0] || st.t0 > range[1]) continue;
      if (!edges.length) edges.push(st.t0);
      else if (st.t0 - edges[edges.length - 1] > minGap) {
        cols.push(null);
        edges.push(st.t0);
      } else edges[edges.length - 1] = st.t0;
      cols.push(st);
      edges.push(Math.max(st.t1, edges[edges.length - 1] + 1e-6));
    }
    return { cols, edges };
  }

  function cellFill(kind, color) {
    return kind === KIND.held ? mix(C.held, color, 0.25) : kind === KIND.decode ? color : mix(color, C.white, 0.5);
  }

  function draw(ctx, inst, S, fc, X, band) {
    if (isRemote(S, inst.laneConfig(S.name))) return drawNote(ctx, inst, band, REMOTE_NOTE);
    const range = [X.invert(band.x), X.invert(band.x + band.w)];
    const grids = engineGrids(inst, S, fc, range, band.w / Math.max(range[1] - range[0], 1e-9));
    const slotH = band.h / grids.reduce((a, g) => a + g.nSlots, 0);
    let top = band.y;
    band.subs = [];
    for (const g of grids) {
      const sub = { x: band.x, w: band.w, y: top, h: g.nSlots * slotH, slotH, nSlots: g.nSlots, cols: [], yticks: [],
                    prefix: g.prefix, steps: g.steps };
      drawGrid(ctx, inst, g, X, sub);
      band.yticks.push(...sub.yticks);
      if (top > band.y) divider(ctx, inst, sub);
      band.subs.push(sub);
      top += sub.h;
    }
    band.ytitle = "slot";
  }

  // One grid of slots per engine: a lane's own; a disaggregated lane's decode engine above its prefill
  // engine (as in the KV map), each with its own slots, "p" before the prefill engine's. The prefill
  // engine's grid has as many slots as its steps kept have used (it runs few rows: long prompts).
  function engineGrids(inst, S, fc, range, pxPerX) {
    const grid = (steps, nSlots, prefix) => {
      for (const st of steps) nSlots = Math.max(nSlots, st.slots);  // (its highest slot + 1)
      return { ...slotColumns({ steps }, fc, range, pxPerX), steps, nSlots, prefix };
    };
    const [own, prefill] = engineSteps(S, inst.contract);
    const grids = [grid(own, maxBatch(S, inst.laneConfig(S.name)) || 1, "")];
    return prefill ? [...grids, grid(prefill, 1, "p")] : grids;
  }

  function divider(ctx, inst, sub) {
    ctx.fillStyle = C.transfer;
    ctx.fillRect(sub.x, sub.y, sub.w, Math.max(1, inst.scale));
  }

  function drawGrid(ctx, inst, g, X, sub) {
    const { cols, edges, nSlots, prefix } = g, slotH = sub.slotH, gapY = slotH > 8 ? 1.5 : 0;
    const Y = (s) => sub.y + sub.h - (s + 1) * slotH;
    const px = edges.map((e) => Math.round(X(e)));
    const xb = (j) => Math.max(px[j + 1], px[j] + 1);  // column j's right edge: at least a pixel wide
    // Runs (state.js linkRuns) link an engine's consecutive steps: a column opens a stretch where the one
    // before it is a gap or another engine's step (a grid that holds both halves of a disaggregated lane,
    // just reconfigured to one engine); stop[j]: the first column after j that a run from j cannot reach.
    const opens = (j) => !!cols[j] && (j === 0 || !cols[j - 1] || cols[j - 1].part !== cols[j].part);
    const stop = Array(cols.length).fill(cols.length);
    for (let j = cols.length - 2; j >= 0; j--) stop[j] = cols[j + 1] && !opens(j + 1) ? stop[j + 1] : j + 1;
    // iterations that ran: empty slots first, a rectangle a stretch; then each run of one request and phase
    // in a slot as one rectangle, from the column it starts in (or where its stretch opens: every run there,
    // found by a sweep through the grid's steps, state.js runSweep) to its last column in view or its
    // stretch's end. At a GPU's pace iterations are narrower than a pixel: a rectangle per cell would be tens
    // of thousands a frame at 256 rows, and a look at every cell as many (older steps keep no cell a row at
    // all). The rectangles go to a layer of pixels (raster.js), the canvas gets them as one image.
    const layer = Raster.layer(ctx, sub.x, sub.y, sub.w, sub.h);
    cols.forEach((st, j) => {
      if (!st) return;
      sub.cols.push({ xa: px[j], xb: xb(j), st });
      if (opens(j)) layer.rect(px[j], sub.y, xb(stop[j] - 1) - px[j], sub.h, C.idle);
    });
    const lastCol = columnOf(cols), sweep = LiveState.runSweep(g.steps);
    cols.forEach((st, j) => {
      if (!st) return;
      for (const cell of opens(j) ? sweep.at(st) : st.starts) {
        if (!cell || cell.slot >= nSlots) continue;
        const end = Math.min(lastCol(cell.run.last), stop[j] - 1);
        const s = cell.slot;  // (its height from the edges it shares: neighbours tile, whatever the rounding)
        drawCellRun(layer, inst, cell, px[j], xb(end), Y(s) + gapY / 2, Y(s - 1) - Y(s) - gapY);
      }
    });
    layer.draw();
    cols.forEach((st, j) => {  // speculative decoding: each step's drafts over its cells
      if (st && st.drafted && st.cells) drawDrafts(ctx, inst, st, px[j], xb(j), Y, slotH, gapY);
    });
    cols.forEach((st, j) => {  // iterations whose decoding rows waited for a prefill (state.js: stall)
      if (st && st.stall) drawStall(ctx, inst.scale, px[j], xb(j), sub.y, sub.h, "stall");
    });
    const fit = Math.max(1, Math.floor(sub.h / (16 * inst.scale)));  // labels a line apart at the least
    const dtick = [1, 2, 4, 5, 8, 10, 16, 20, 32, 50, 64, 100].find((d) => nSlots / d <= fit)
      ?? Math.ceil(nSlots / fit);
    for (let s = 0; s < nSlots; s += dtick) sub.yticks.push({ y: Y(s) + slotH / 2, label: prefix + s });
  }

  // The column of a step (a run's last) among cols (steps in order, null for a gap), looked up by its
  // iteration; the last column where the step is not one of them (past the columns in view).
  function columnOf(cols) {
    const first = cols.length ? cols[0].it : 0;
    const byIt = new Int32Array(cols.length ? cols[cols.length - 1].it - first + 1 : 0).fill(-1);
    cols.forEach((st, j) => { if (st) byIt[st.it - first] = j; });
    return (st) => {
      const j = st.it - first < byIt.length ? byIt[st.it - first] : -1;
      return j >= 0 ? j : cols.length - 1;
    };
  }

  // A strip along the cell's foot, one tick per draft token: accepted ones white, rejected ones red.
  function drawDrafts(ctx, inst, st, xa, xb, Y, slotH, gapY) {
    for (const cell of st.cells) {
      if (!cell.drafted || cell.slot < 0) continue;
      const w = (xb - xa) / cell.drafted, h = Math.max(2, (slotH - gapY) * 0.35);
      if (w < 1) continue;
      const y = Y(cell.slot) + slotH - gapY / 2 - h;
      ctx.globalAlpha = inst.sel != null && cell.rid !== inst.sel ? 0.25 : 1;
      for (let i = 0; i < cell.drafted; i++) {
        ctx.fillStyle = i < cell.accepted ? C.white : C.preempt;
        ctx.fillRect(xa + i * w + (w > 3 ? 0.5 : 0), y, Math.max(w - (w > 3 ? 1 : 0), 1), h);
      }
      ctx.globalAlpha = 1;
    }
  }

  function drawNote(ctx, inst, band, text) {
    ctx.fillStyle = C.muted;
    ctx.font = `${13 * inst.scale}px ${FONT}`;
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    ctx.fillText(text, band.x + band.w / 2, band.y + band.h / 2, band.w - 8);
  }

  // cell: the first of a run drawn from xa to xb (a Raster layer). Another request than the one picked is
  // dimmed: its colors at a quarter over the empty slot's (opaque, so runs that share a pixel do not add up).
  function drawCellRun(layer, inst, cell, xa, xb, y, h) {
    const color = reqColor(cell.rid), dim = inst.sel != null && cell.rid !== inst.sel;
    const fill = dim ? mix(C.idle, cellFill(cell.kind, color), 0.25) : cellFill(cell.kind, color);
    layer.rect(xa, y, xb - xa, h, fill);
    if (cell.kind !== KIND.held) return;
    const hatch = mix(C.heldDim, color, 0.12);
    layer.hatch(xa, y, xb - xa, h, dim ? mix(fill, hatch, 0.25) : hatch, inst.scale);
  }

  const kindText = (kind) => (kind === KIND.held ? "padding (finished, still in the batch)" : kind);

  function cellTip(cell, st, prefix) {
    const what = kindText(cell.kind);
    const toks = cell.real ? `${cell.real} tok` : "";
    const pad = cell.pad ? `${toks ? " + " : ""}${cell.pad} pad` : "";
    const drafts = cell.drafted ? `${cell.accepted} of ${cell.drafted} drafted tokens accepted: ${1 + cell.accepted} `
      + `token${cell.accepted ? "s" : ""} this step` : "";
    return [`#${cell.rid} · slot ${prefix}${cell.slot} · ${what}`, `${toks}${pad} · context ${cell.ctx}`, drafts,
            iterationLine(st)].filter(Boolean);
  }

  // A step that kept no cell a row (state.js LIMITS): what its run says.
  function runTip(cell, st, prefix) {
    const what = kindText(cell.kind), last = cell.run.last.it > st.it ? ` to ${cell.run.last.it}` : "";
    return [`#${cell.rid} · slot ${prefix}${cell.slot} · ${what}`,
            `in this slot from iteration ${cell.run.from}${last}`,
            iterationLine(st), "(tokens and context: the newest iterations only)"];
  }

  const iterationLine = (st) => `iteration ${st.it}${partOf(st)} · ${fmt(1000 * (st.t1 - st.t0), 1)} ms`;

  // A disaggregated lane's iteration: which of its two engines ran it.
  const partOf = (st) => (st.part ? ` (${st.part} engine)` : "");

  // The cell under (x, y): { rid, tip: [lines], color } or null.
  function hit(inst, band, x, y) {
    const sub = (band.subs || []).find((b) => y >= b.y && y < b.y + b.h);
    const c = sub && sub.cols.find((k) => x >= k.xa && x < k.xb);
    if (!c) return null;
    const slot = sub.nSlots - 1 - Math.floor((y - sub.y) / sub.slotH);  // slot s spans [Y(s), Y(s) + slotH)
    const cell = c.st.bySlot ? c.st.bySlot[slot]
      : LiveState.runSweep(sub.steps).at(c.st).find((x) => x.slot === slot);  // (a step without its cells)
    const stalled = c.st.stall ? ["", ...stallTip(c.st)] : [];
    if (!cell) {
      return { rid: null, tip: [`slot ${sub.prefix}${slot} · empty`, `iteration ${c.st.it}${partOf(c.st)}`, ...stalled],
               color: C.muted };
    }
    const tip = c.st.bySlot ? cellTip(cell, c.st, sub.prefix) : runTip(cell, c.st, sub.prefix);
    return { rid: cell.rid, tip: [...tip, ...stalled], color: reqColor(cell.rid) };
  }

  return { draw, hit };
});
