/* ================================ the timeline: Gantt, batch slots, utilization ================================ */
// Every time-based view of every strategy column is drawn on one canvas that shares the x axis
// (service seconds, or iterations). A frame is a few hundred fillRect / stroke calls: 2-4 ms of script
// on a 2-core machine, where a plotly figure of the same views took ~130 ms (python -m
// engine.bench.ui_cost; README). Hover, click-to-pick, drag-to-zoom and double-click-to-follow are
// handled here too.

const TIMELINE_VIEWS = ["gantt", "slots", "util"];
const SEG_H = { queued: 0.24, preempted: 0.34, prefill: 0.8, recompute: 0.8, decode: 0.8, held: 0.8, finish: 0.92 };
const SEG_LABEL = { queued: "queued", prefill: "prefill chunk", decode: "decode", preempted: "preempted",
                    recompute: "recompute (prefill after preemption)", held: "finished, held in batch (padding)" };
const UTIL_LINES = [
  { key: "busy", name: "busy slots", color: "#F8FAFC", dash: [], width: 2.8 },
  { key: "budget", name: "token budget", color: "#FBBF24", dash: [2, 3], width: 2.3 },
  { key: "kv", name: "KV blocks", color: "#22D3EE", dash: [7, 4], width: 2.3 },
];
const TPS_COLOR = "#C084FC";
const GPU_LINES = [  // NVML samples, time axis only
  { key: "util", name: "GPU utilization", color: "#4ADE80", dash: [], width: 2 },
  { key: "mem", name: "GPU memory", color: "#F97316", dash: [5, 3], width: 2 },
];
const DRAG_MIN_PX = 5;  // a shorter drag is a click

/* ---------------------------------------- layout ---------------------------------------- */

function buildTimeline(inst, views) {
  const sec = el("section", "ifl-section ifl-timeline");
  const wrap = el("div", "ifl-timeline-wrap");
  const canvas = el("canvas", "ifl-canvas ifl-timeline-canvas");
  canvas.setAttribute("role", "img");
  const zoombox = el("div", "ifl-zoombox");
  zoombox.hidden = true;
  wrap.append(canvas, zoombox);
  const heads = new Map();
  for (const v of views) {
    const head = sectionHead(v);
    head.classList.add("ifl-overlay-head");
    wrap.appendChild(head);
    heads.set(v, head);
    inst.resizeObs.observe(head);  // a legend that wraps (or gains the GPU lines) moves the bands
  }
  sec.appendChild(wrap);
  // fixed height: plots share what is left once headers and axis bands (about 100 px a view) are paid
  if (inst.cfg.height) {
    sec.style.flex = `${views.reduce((a, v) => a + VIEW_HEIGHT[v], 0)} 1 ${Math.round(100 * inst.scale)}px`;
  }
  inst.el.body.appendChild(sec);
  observeView(inst, wrap);
  const tl = { sec, wrap, canvas, zoombox, heads, views, geom: null, geomKey: "", cols: [], drag: null };
  inst.timeline = tl;
  canvas.addEventListener("mousemove", (e) => tlMove(inst, e));
  canvas.addEventListener("mouseleave", () => { hideTip(inst); tlEndDrag(inst, null); });
  canvas.addEventListener("mousedown", (e) => tlDown(inst, e));
  canvas.addEventListener("mouseup", (e) => tlUp(inst, e));
  canvas.addEventListener("dblclick", (e) => tlFollow(inst, e));
}

// Pixel geometry: header overlays (measured), one band per view with an axis band under it;
// columns side by side, each with room for its own y labels.
function timelineGeometry(inst) {
  const tl = inst.timeline;
  const size = inst.sizes.get(tl.wrap);
  if (!size || size.w < 50) return null;
  const k = inst.scale;
  const headH = (v) => Math.round((inst.sizes.get(tl.heads.get(v)) || {}).outerH ?? tl.heads.get(v).offsetHeight);
  const key = `${Math.round(size.w)}|${inst.cfg.height ? Math.round(size.h) : ""}|${k}|${tl.views.map(headH)}`;
  if (tl.geom && tl.geomKey === key) return tl.geom;
  const W = Math.round(size.w), n = inst.cfg.strategies.length;
  const L = Math.round(58 * k), R = Math.round(24 * k), gap = n > 1 ? Math.round(88 * k) : 0;
  const pw = Math.floor((W - L - R - gap * (n - 1)) / n);
  const xs = [...Array(n).keys()].map((c) => L + c * (pw + gap));
  const axisBand = Math.round(30 * k), sep = Math.round(16 * k), lastBand = Math.round(54 * k);
  const heads = tl.views.map((v) => headH(v) + 6);
  const below = tl.views.map((v, j) => (j === tl.views.length - 1 ? lastBand : v === "gantt" ? axisBand + sep : sep));
  const fixed = heads.reduce((a, b) => a + b, 0) + below.reduce((a, b) => a + b, 0);
  const weights = tl.views.map((v) => VIEW_HEIGHT[v] * (inst.cfg.large ? 1.15 : 1));
  const wsum = weights.reduce((a, b) => a + b, 0);
  const avail = inst.cfg.height ? Math.max(120, size.h - fixed) : wsum;
  let y = 0;
  const bands = [];
  tl.views.forEach((v, j) => {
    tl.heads.get(v).style.top = `${y}px`;
    y += heads[j];
    const ph = Math.round((avail * weights[j]) / wsum);
    if (v === "util") {  // percentages above, tokens/s below, one shared time axis
      const gapPx = Math.round(14 * k), h1 = Math.round((ph - gapPx) * 0.6);
      bands.push({ view: "util", y, h: h1 }, { view: "tps", y: y + h1 + gapPx, h: ph - h1 - gapPx });
    } else bands.push({ view: v, y, h: ph });
    bands[bands.length - 1].labels = v === "gantt" || j === tl.views.length - 1;  // x tick labels under it
    y += ph + below[j];
  });
  const H = y;
  if (!inst.cfg.height) tl.wrap.style.height = `${H}px`;
  tl.geom = { W, H, L, pw, xs, bands, last: bands[bands.length - 1] };
  tl.geomKey = key;
  return tl.geom;
}

function sizeCanvas(canvas, W, H) {
  const dpr = window.devicePixelRatio || 1;
  if (canvas.width !== Math.round(W * dpr) || canvas.height !== Math.round(H * dpr)) {
    canvas.width = Math.round(W * dpr);
    canvas.height = Math.round(H * dpr);
    canvas.style.width = `${W}px`;
    canvas.style.height = `${H}px`;
  }
  // opaque: the compositor takes it without blending (each frame is one full bitmap hand-over)
  const ctx = canvas.getContext("2d", { alpha: false });
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  return ctx;
}

/* ---------------------------------------- scales and ticks ---------------------------------------- */

function xScale(range, x0, w) {
  const a = range[0], span = Math.max(range[1] - range[0], 1e-9);
  const f = (v) => x0 + ((v - a) / span) * w;
  f.invert = (px) => a + ((px - x0) / w) * span;
  return f;
}

// "Nice" ticks (1, 2, 2.5, 5 x 10^n) covering [a, b], about n of them.
function niceTicks(a, b, n, integer) {
  const raw = Math.max((b - a) / Math.max(n, 1), integer ? 1 : 1e-9);
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw * 0.999 && (!integer || Number.isInteger(s)))
    || 10 * mag;
  const digits = Math.max(0, -Math.floor(Math.log10(step) + 1e-9) + (step / mag === 2.5 ? 1 : 0));
  const out = [];
  for (let v = Math.ceil(a / step) * step; v <= b + step * 1e-6 && out.length < 200; v += step) {
    out.push({ v, label: (Math.abs(v) < step * 1e-6 ? 0 : v).toFixed(digits) });
  }
  return out;
}

function font(inst, px, weight = "") {
  return `${weight} ${px * inst.scale}px ${FONT}`.trim();
}

/* ---------------------------------------- frame ---------------------------------------- */

function drawTimeline(inst, fc) {
  const tl = inst.timeline;
  const g = timelineGeometry(inst);
  if (!g || offscreen(inst, tl.wrap)) return;
  const revs = [...inst.state.by.values()].map((S) => S.rev).join(",") + `,${inst.state.gpuRev}`;
  const ranges = inst.cfg.strategies.map((n) => xRange(fc, inst.state.by.get(n)).join(":")).join(",");
  const sig = `${revs}|${inst.sel}|${ranges}|${g.W}x${g.H}|${fc.axis}|${inst.statusRev}|${fc.open ? fc.now : ""}`;
  if (!changed(inst, tl.canvas, sig)) return;
  const ctx = sizeCanvas(tl.canvas, g.W, g.H);
  ctx.fillStyle = C.bg;
  ctx.fillRect(0, 0, g.W, g.H);
  tl.cols = inst.cfg.strategies.map((name, c) => drawColumn(ctx, inst, fc, g, inst.state.by.get(name), g.xs[c]));
  // which requests have a row (for screen readers and tests); touched only when it changes
  const rows = JSON.stringify(Object.fromEntries(tl.cols.map((col) => [col.name, col.rows])));
  if (tl.canvas.dataset.rows !== rows) {
    tl.canvas.dataset.rows = rows;
    tl.canvas.setAttribute("aria-label", tl.cols.map((c) => `${c.name}: rows ${c.rows.map((r) => `#${r}`).join(" ")}`).join("; "));
  }
}

// One strategy's column: every band, its axes, and what hover and clicks need to find marks again.
function drawColumn(ctx, inst, fc, g, S, x0) {
  const range = xRange(fc, S);
  const X = xScale(range, x0, g.pw);
  const integer = fc.axis !== "time";
  const ticks = niceTicks(range[0], range[1], Math.max(3, Math.round(g.pw / (110 * inst.scale))), integer);
  const col = { name: S.name, x0, w: g.pw, X, range, bands: [], rows: [] };
  for (const b of g.bands) {
    const band = { ...b, x: x0, w: g.pw };
    ctx.fillStyle = C.plot;
    ctx.fillRect(band.x, band.y, band.w, band.h);
    xGrid(ctx, X, ticks, band);
    ctx.save();
    ctx.beginPath();
    ctx.rect(band.x, band.y, band.w, band.h);
    ctx.clip();
    if (b.view === "gantt") drawGantt(ctx, inst, S, fc, X, band, col);
    else if (b.view === "slots") drawSlots(ctx, inst, S, fc, X, band);
    else if (b.view === "util") drawUtil(ctx, inst, S, fc, X, band);
    else drawTps(ctx, inst, S, fc, X, band);
    ctx.restore();
    yAxis(ctx, inst, band);
    frameBand(ctx, band);
    if (b.labels) xLabels(ctx, inst, X, ticks, band, b === g.last ? xTitle(fc) : "");
    col.bands.push(band);
  }
  return col;
}

function xTitle(fc) {
  return fc.axis === "time" ? "service time (s)" : "iteration (published steps)";
}

function xGrid(ctx, X, ticks, band) {
  ctx.strokeStyle = C.grid;
  ctx.lineWidth = 1;
  ctx.beginPath();
  for (const t of ticks) {
    const x = Math.round(X(t.v)) + 0.5;
    if (x < band.x || x > band.x + band.w) continue;
    ctx.moveTo(x, band.y);
    ctx.lineTo(x, band.y + band.h);
  }
  ctx.stroke();
}

function frameBand(ctx, band) {
  ctx.strokeStyle = C.axis;
  ctx.lineWidth = 1;
  ctx.beginPath();
  ctx.moveTo(band.x - 0.5, band.y);
  ctx.lineTo(band.x - 0.5, band.y + band.h + 0.5);
  ctx.lineTo(band.x + band.w, band.y + band.h + 0.5);
  ctx.stroke();
}

function xLabels(ctx, inst, X, ticks, band, title) {
  const k = inst.scale, y = band.y + band.h;
  ctx.strokeStyle = C.axis;
  ctx.beginPath();
  for (const t of ticks) {
    const x = Math.round(X(t.v)) + 0.5;
    ctx.moveTo(x, y);
    ctx.lineTo(x, y + 4);
  }
  ctx.stroke();
  ctx.fillStyle = C.muted;
  ctx.font = font(inst, 13);
  ctx.textAlign = "center";
  ctx.textBaseline = "top";
  for (const t of ticks) ctx.fillText(t.label, X(t.v), y + 6 * k);
  if (title) ctx.fillText(title, band.x + band.w / 2, y + 26 * k);
}

// The band's y axis: labels left of it and an optional rotated title.
function yAxis(ctx, inst, band) {
  const k = inst.scale;
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  for (const strong of [false, true]) {  // setting a font is costly: once per style
    ctx.fillStyle = strong ? C.white : C.muted;
    ctx.font = font(inst, 13, strong ? "bold" : "");
    for (const t of band.yticks || []) {
      if (!!t.strong !== strong || t.y < band.y - 1 || t.y > band.y + band.h + 1) continue;
      ctx.fillText(t.label, band.x - 6 * k, t.y);
    }
  }
  if (band.ytitle) {
    ctx.save();
    ctx.translate(band.x - 44 * k, band.y + band.h / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "center";
    ctx.fillStyle = C.muted;
    ctx.font = font(inst, 13);
    ctx.fillText(band.ytitle, 0, 0);
    ctx.restore();
  }
}

function yGrid(ctx, band) {
  ctx.strokeStyle = C.grid;
  ctx.lineWidth = 1;
  ctx.beginPath();
  for (const t of band.yticks) {
    const y = Math.round(t.y) + 0.5;
    ctx.moveTo(band.x, y);
    ctx.lineTo(band.x + band.w, y);
  }
  ctx.stroke();
}

/* ---------------------------------------- view: Gantt ---------------------------------------- */

// Phase shading, the same language as the slots grid: decode = the request's color, prefill = a light
// tint of it, padding (finished, still held) = grey tinted by it; waits are thin bars.
function segFill(kind, color, reason) {
  switch (kind) {
    case "queued": return rgba(color, 0.5);
    case "prefill": case "recompute": return mix(color, C.white, 0.5);
    case "preempted": return C.preempt;
    case "held": return mix(C.held, color, 0.25);
    case "finish": return reason === "abort" || reason === "error" ? C.preempt : C.white;
    default: return color;
  }
}

function segTip(R, s) {
  const its = s.it0 != null ? (s.it0 === s.it1 ? `iteration ${s.it0}` : `iterations ${s.it0}–${s.it1}`) : "";
  return [`#${R.rid} · ${SEG_LABEL[s.kind]}`, `${fmt(s.t0)}–${fmt(s.t1)} s (${fmt(s.t1 - s.t0, 3)} s)`,
          s.open ? "still waiting" : its].filter(Boolean);
}

function finishTip(R) {
  return [`#${R.rid} · finished${R.reason ? ` (${R.reason})` : ""}`, `at ${fmt(R.finishT)} s`
    + (R.nOut ? ` · ${R.nOut} tokens` : ""), R.error ? String(R.error) : ""].filter(Boolean);
}

function drawGantt(ctx, inst, S, fc, X, band, col) {
  const k = inst.scale, timeMode = fc.axis === "time";
  const rows = fc.rows.get(S.name) || [];
  const rowSet = new Set(rows);
  const top = rows.length ? rows[0] : 0;
  const bottom = rows.length ? Math.min(rows[rows.length - 1], top - MIN_ROWS + 1) : -MIN_ROWS + 1;
  const rowH = band.h / (top - bottom + 1);
  const Y = (rid) => band.y + (top + 0.5 - rid) * rowH;  // the row's center; newest on top
  band.hits = [];
  if (inst.sel != null && rowSet.has(inst.sel)) {
    ctx.fillStyle = "rgba(255,255,255,0.08)";
    ctx.fillRect(band.x, Y(inst.sel) - rowH / 2, band.w, rowH);
  }
  const bar = (R, a, b, kind, tip) => {
    const h = SEG_H[kind] * rowH, y = Y(R.rid) - h / 2;
    const xa = X(a), xb = Math.max(X(b), xa + 1);
    const picked = inst.sel === R.rid;
    ctx.globalAlpha = inst.sel != null && !picked ? 0.16 : 1;
    ctx.fillStyle = segFill(kind, reqColor(R.rid), R.reason);
    ctx.fillRect(xa, y, xb - xa, h);
    const lw = picked && kind !== "finish" ? 2 * k : kind === "recompute" ? 2 * k
      : kind === "prefill" && xb - xa > 3 ? 1 : 0;  // outlines show chunk boundaries
    if (lw) {
      ctx.strokeStyle = picked ? C.white : kind === "recompute" ? C.preempt : C.plot;
      ctx.lineWidth = lw;
      ctx.strokeRect(xa + lw / 2, y + lw / 2, Math.max(xb - xa - lw, 0), Math.max(h - lw, 0));
    }
    band.hits.push({ xa, xb, ya: y, yb: y + h, rid: R.rid, tip, color: reqColor(R.rid) });
  };
  const range = col.range;
  for (const rid of rows) {
    const R = S.reqs.get(rid);
    if (!R) continue;
    const segs = R.open ? [...R.segs, { kind: R.open.kind, t0: R.open.t0, t1: fc.now, x0: R.open.x0,
                                        x1: S.lastIt + 0.5, it0: null, open: true }] : R.segs;
    for (const sg of segs) {
      const a = timeMode ? sg.t0 : sg.x0, b = timeMode ? sg.t1 : sg.x1;
      if (a == null || b == null || b < range[0] || a > range[1]) continue;
      bar(R, a, b, sg.kind, () => segTip(R, sg));
    }
    const fx = timeMode ? R.finishT : R.finishX;
    if (fx != null && fx >= range[0] && fx <= range[1]) {
      const half = X.invert(X(fx) + 1.75 * k) - fx;  // a finish tick is ~3.5 px wide
      bar(R, fx - half, fx + half, "finish", () => finishTip(R));
    }
  }
  ctx.globalAlpha = 1;
  const every = Math.max(1, Math.ceil((15 * k) / rowH));  // labels that fit
  band.yticks = rows.filter((r) => r % every === 0 || r === inst.sel)
    .map((r) => ({ y: Y(r), label: `#${r}`, strong: r === inst.sel }));
  col.rows = rows.slice();
}

/* ---------------------------------------- view: batch slots ---------------------------------------- */
// Slot x iteration: each cell is the request in that batch slot in that iteration, shaded by phase
// (prefill light, decode full, padding hatched grey); runs of the same request and phase are drawn
// as one rectangle. On the time axis an iteration spans [t_start, t_end]; idle time stays empty.

// The engine's batch limit. The service status reports the configured value; if the engine kept an
// older config (a failed reconfigure), the rows it really ran are the better bound.
function maxBatch(inst, S) {
  const cfg = inst.service && inst.service.config;
  const configured = cfg ? (S.name === "continuous" ? cfg.max_num_seqs : cfg.static_batch_size) : 0;
  let seen = 0;
  for (const st of S.steps) seen = Math.max(seen, st.rows);
  return Math.max(configured || 0, seen) || null;
}

// Columns of the grid, as edges: one column per iteration; on the time axis idle time between
// iterations (e.g. a static batch filling up) is an empty column, so both strategies align in time.
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
  return kind === "held" ? mix(C.held, color, 0.25) : kind === "decode" ? color : mix(color, C.white, 0.5);
}

function drawSlots(ctx, inst, S, fc, X, band) {
  const range = [X.invert(band.x), X.invert(band.x + band.w)];
  const { cols, edges } = slotColumns(S, fc, range, band.w / Math.max(range[1] - range[0], 1e-9));
  let nSlots = maxBatch(inst, S) || 1;
  for (const st of cols) if (st) for (const c of st.cells) nSlots = Math.max(nSlots, c.slot + 1);
  const slotH = band.h / nSlots, gapY = slotH > 8 ? 1.5 : 0;
  const Y = (s) => band.y + band.h - (s + 1) * slotH;
  const px = edges.map((e) => Math.round(X(e)));
  band.cols = [];
  ctx.fillStyle = C.idle;  // iterations that ran: empty slots first
  cols.forEach((st, j) => {
    if (!st) return;
    ctx.fillRect(px[j], band.y, Math.max(px[j + 1] - px[j], 1), band.h);
    band.cols.push({ xa: px[j], xb: Math.max(px[j + 1], px[j] + 1), st });
  });
  for (let s = 0; s < nSlots; s++) {  // then runs of one request and phase per slot
    let run = null;
    const flush = () => {
      if (run) drawCellRun(ctx, inst, run, Y(s) + gapY / 2, slotH - gapY);
      run = null;
    };
    cols.forEach((st, j) => {
      const cell = st && cellsBySlot(st)[s];
      if (!cell) return flush();
      if (run && run.rid === cell.rid && run.kind === cell.kind && run.xb === px[j]) run.xb = Math.max(px[j + 1], px[j] + 1);
      else {
        flush();
        run = { rid: cell.rid, kind: cell.kind, xa: px[j], xb: Math.max(px[j + 1], px[j] + 1) };
      }
    });
    flush();
  }
  band.nSlots = nSlots;
  band.slotH = slotH;
  const dtick = nSlots > 12 ? 2 : 1;
  band.yticks = [];
  for (let s = 0; s < nSlots; s += dtick) band.yticks.push({ y: Y(s) + slotH / 2, label: String(s) });
  band.ytitle = "slot";
}

// A step's cells indexed by slot (steps never change once folded in: computed once).
function cellsBySlot(st) {
  if (!st.bySlot) {
    st.bySlot = [];
    for (const c of st.cells) if (c.slot >= 0) st.bySlot[c.slot] = c;
  }
  return st.bySlot;
}

function drawCellRun(ctx, inst, run, y, h) {
  const color = reqColor(run.rid);
  ctx.globalAlpha = inst.sel != null && run.rid !== inst.sel ? 0.25 : 1;
  ctx.fillStyle = cellFill(run.kind, color);
  ctx.fillRect(run.xa, y, run.xb - run.xa, h);
  if (run.kind === "held") {
    ctx.fillStyle = hatchPattern(ctx, mix(C.heldDim, color, 0.12), inst.scale);
    ctx.fillRect(run.xa, y, run.xb - run.xa, h);
  }
  ctx.globalAlpha = 1;
}

function cellTip(cell, st) {
  const what = cell.kind === "held" ? "padding (finished, still in the batch)"
    : cell.kind === "recompute" ? "recompute" : cell.kind;
  const toks = cell.real ? `${cell.real} tok` : "";
  const pad = cell.pad ? `${toks ? " + " : ""}${cell.pad} pad` : "";
  return [`#${cell.rid} · slot ${cell.slot} · ${what}`, `${toks}${pad} · context ${cell.ctx}`,
          `iteration ${st.it} (engine step ${st.step}) · ${fmt(1000 * (st.t1 - st.t0), 1)} ms`];
}

/* ---------------------------------------- view: utilization ---------------------------------------- */

// Per-iteration series inside the window (plus one point either side so lines reach the edges);
// an idle gap over 1 s breaks the lines instead of bridging it.
function utilSeries(inst, S, fc, range) {
  const timeMode = fc.axis === "time";
  const maxB = maxBatch(inst, S);
  const out = { x: [], st: [], busy: [], budget: [], kv: [], tps: [], top: 100, tpsTop: 10 };
  const steps = S.steps;
  let prev = null;
  for (let i = 0; i < steps.length; i++) {
    const st = steps[i];
    const x = timeMode ? st.t1 : st.it;
    const nextX = i + 1 < steps.length ? (timeMode ? steps[i + 1].t1 : steps[i + 1].it) : x;
    if (nextX < range[0] || (prev && (timeMode ? prev.t1 : prev.it) > range[1])) continue;  // off screen
    if (prev && timeMode && st.t0 - prev.t1 > 1.0) {
      out.x.push(null);
      out.st.push(null);
      for (const key of ["busy", "budget", "kv", "tps"]) out[key].push(null);
    }
    prev = st;
    const v = { busy: pct(st.busy, maxB || Math.max(st.rows, 1)), budget: pct(st.used, st.budget),
                kv: pct(st.kvUsed, st.kvBlocks), tps: st.tps };
    out.x.push(x);
    out.st.push(st);
    for (const key in v) out[key].push(v[key]);
    if (x >= range[0] && x <= range[1]) {
      out.top = Math.max(out.top, v.busy, v.budget, v.kv);
      out.tpsTop = Math.max(out.tpsTop, v.tps);
    }
  }
  return out;
}

// The utilization and tokens/s bands share one series per frame.
function utilCache(inst, S, fc, X, band) {
  const range = [X.invert(band.x), X.invert(band.x + band.w)];
  const key = `${S.rev}|${range}|${inst.statusRev}|${fc.axis}`;
  if (S.utilKey !== key) {
    S.utilKey = key;
    S.util = utilSeries(inst, S, fc, range);
  }
  return S.util;
}

// A stepped line (each value holds until the next iteration ends); null breaks the line.
function stepLine(ctx, X, Y, xs, ys, close) {
  let started = false, lastY = 0, firstX = 0, lastX = 0;
  ctx.beginPath();
  for (let i = 0; i < xs.length; i++) {
    if (xs[i] == null || ys[i] == null) {
      if (close && started) closeArea(ctx, firstX, lastX, Y(0));
      started = false;
      continue;
    }
    const x = X(xs[i]), y = Y(ys[i]);
    if (!started) { ctx.moveTo(x, y); firstX = x; started = true; }
    else { ctx.lineTo(x, lastY); ctx.lineTo(x, y); }
    lastY = y;
    lastX = x;
  }
  if (close && started) closeArea(ctx, firstX, lastX, Y(0));
}

function closeArea(ctx, x0, x1, y0) {
  ctx.lineTo(x1, y0);
  ctx.lineTo(x0, y0);
  ctx.closePath();
}

function yScale(band, top) {
  return (v) => band.y + band.h - (v / top) * band.h;
}

function valueTicks(Y, top, n, suffix) {
  return niceTicks(0, top, n, false).map((t) => ({ y: Y(t.v), label: `${Number(t.label)}${suffix}`, v: t.v }));
}

function drawUtil(ctx, inst, S, fc, X, band) {
  const k = inst.scale;
  const u = utilCache(inst, S, fc, X, band);
  const top = u.top * 1.06, Y = yScale(band, top);
  band.yticks = valueTicks(Y, top, 4, "%");
  yGrid(ctx, band);
  for (const l of UTIL_LINES) {
    ctx.strokeStyle = l.color;
    ctx.lineWidth = l.width * k;
    ctx.setLineDash(l.dash.map((d) => d * l.width * k));
    stepLine(ctx, X, Y, u.x, u[l.key], false);
    ctx.stroke();
  }
  ctx.setLineDash([]);
  if (fc.axis === "time") drawGpu(ctx, inst, X, Y);
  band.series = u;
}

// The device's utilization and memory (shared by every engine): straight lines between samples.
function drawGpu(ctx, inst, X, Y) {
  const samples = inst.state.gpu;
  if (!samples.length) return;
  for (const l of GPU_LINES) {
    ctx.strokeStyle = l.color;
    ctx.lineWidth = l.width * inst.scale;
    ctx.setLineDash(l.dash.map((d) => d * inst.scale));
    ctx.beginPath();
    samples.forEach((p, i) => (i ? ctx.lineTo(X(p.t), Y(p[l.key])) : ctx.moveTo(X(p.t), Y(p[l.key]))));
    ctx.stroke();
  }
  ctx.setLineDash([]);
}

function drawTps(ctx, inst, S, fc, X, band) {
  const u = utilCache(inst, S, fc, X, band);
  const top = u.tpsTop * 1.15, Y = yScale(band, top);
  band.yticks = valueTicks(Y, top, 3, "");
  band.ytitle = "tok/s";
  yGrid(ctx, band);
  ctx.fillStyle = rgba(TPS_COLOR, 0.12);
  stepLine(ctx, X, Y, u.x, u.tps, true);
  ctx.fill();
  ctx.strokeStyle = TPS_COLOR;
  ctx.lineWidth = 2.4 * inst.scale;
  stepLine(ctx, X, Y, u.x, u.tps, false);
  ctx.stroke();
  band.series = u;
}

function utilTip(inst, u, i) {
  const st = u.st[i];
  const lines = [`iteration ${st.it} · ${fmt(st.t1)} s`,
                 `busy slots ${fmt(u.busy[i], 0)}% · token budget ${fmt(u.budget[i], 0)}%`,
                 `KV blocks ${fmt(u.kv[i], 0)}% · ${fmt(u.tps[i], 0)} tokens/s`];
  const g = nearestGpu(inst.state.gpu, st.t1);
  if (g) lines.push(`GPU ${fmt(g.util, 0)}% · memory ${fmt(g.mem, 0)}% (NVML at ${fmt(g.t)} s)`);
  return lines;
}

function nearestGpu(samples, t) {
  let best = null;
  for (const p of samples) if (Math.abs(p.t - t) < 1 && (!best || Math.abs(p.t - t) < Math.abs(best.t - t))) best = p;
  return best;
}

/* ---------------------------------------- pointer: hover, pick, zoom ---------------------------------------- */

function tlLocate(inst, e) {
  const tl = inst.timeline;
  const r = tl.canvas.getBoundingClientRect();
  const x = e.clientX - r.left, y = e.clientY - r.top;
  for (const col of tl.cols) {
    if (x < col.x0 || x > col.x0 + col.w) continue;
    const band = col.bands.find((b) => y >= b.y && y <= b.y + b.h);
    return { col, band, x, y };
  }
  return null;
}

// What is under the pointer: { rid, tip: [lines], color } or null.
function tlHit(inst, at) {
  const { band, x, y } = at;
  if (!band) return null;
  if (band.view === "gantt") {
    for (let i = band.hits.length - 1; i >= 0; i--) {
      const h = band.hits[i];
      if (x >= h.xa - 1 && x <= h.xb + 1 && y >= h.ya && y <= h.yb) return { rid: h.rid, tip: h.tip(), color: h.color };
    }
    return null;
  }
  if (band.view === "slots") {
    const c = band.cols.find((k) => x >= k.xa && x < k.xb);
    if (!c) return null;
    const slot = Math.floor((band.y + band.h - y) / band.slotH);
    const cell = cellsBySlot(c.st)[slot];
    if (!cell) return { rid: null, tip: [`slot ${slot} · empty`, `iteration ${c.st.it}`], color: C.muted };
    return { rid: cell.rid, tip: cellTip(cell, c.st), color: reqColor(cell.rid) };
  }
  const u = band.series;
  if (!u) return null;
  const v = at.col.X.invert(x);
  let best = -1;
  for (let i = 0; i < u.x.length; i++) {
    if (u.x[i] != null && (best < 0 || Math.abs(u.x[i] - v) < Math.abs(u.x[best] - v))) best = i;
  }
  return best < 0 ? null : { rid: null, tip: utilTip(inst, u, best), color: C.muted };
}

function tlMove(inst, e) {
  const tl = inst.timeline;
  const at = tlLocate(inst, e);
  if (tl.drag) {
    const d = tl.drag, x = Math.max(d.col.x0, Math.min(d.col.x0 + d.col.w, e.clientX - tl.canvas.getBoundingClientRect().left));
    d.x1 = x;
    Object.assign(tl.zoombox.style, { left: `${Math.min(d.x0, x)}px`, width: `${Math.abs(x - d.x0)}px`,
                                      top: `${d.col.bands[0].y}px`,
                                      height: `${d.col.bands[d.col.bands.length - 1].y + d.col.bands[d.col.bands.length - 1].h - d.col.bands[0].y}px` });
    tl.zoombox.hidden = Math.abs(x - d.x0) < DRAG_MIN_PX;
    hideTip(inst);
    return;
  }
  const hit = at && tlHit(inst, at);
  tl.canvas.style.cursor = hit && hit.rid != null ? "pointer" : at && at.band ? "crosshair" : "";
  if (hit) showTip(inst, e, hit.tip, hit.color);
  else hideTip(inst);
}

function tlDown(inst, e) {
  const at = tlLocate(inst, e);
  if (!at || !at.band || e.button !== 0) return;
  inst.timeline.drag = { col: at.col, x0: at.x, x1: at.x, at };
  e.preventDefault();
}

function tlUp(inst, e) {
  const d = inst.timeline.drag;
  if (!d) return;
  if (Math.abs(d.x1 - d.x0) < DRAG_MIN_PX) {  // a click: pick the request under the pointer
    tlEndDrag(inst, null);
    const hit = tlHit(inst, d.at);
    if (hit && hit.rid != null) pick(inst, hit.rid);
    return;
  }
  const a = d.col.X.invert(Math.min(d.x0, d.x1)), b = d.col.X.invert(Math.max(d.x0, d.x1));
  tlEndDrag(inst, [a, b], d.col.name);
}

function tlEndDrag(inst, range, name) {
  const tl = inst.timeline;
  tl.drag = null;
  tl.zoombox.hidden = true;
  if (!range) return;
  inst.zoom[zoomKey(inst, name)] = range;
  markDirty(inst);
}

// Double-click: back to following "now" (time axis: both columns; iterations: this column).
function tlFollow(inst, e) {
  const at = tlLocate(inst, e);
  if (!at) return;
  delete inst.zoom[zoomKey(inst, at.col.name)];
  markDirty(inst);
}

function zoomKey(inst, name) {
  return inst.cfg.axis === "time" ? "time" : `it:${name}`;
}
