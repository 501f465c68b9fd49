// The timeline: every time-based view of every lane's column (Gantt, batch slots, utilization) on one
// canvas sharing the x axis (service seconds, or iterations). A frame is a few hundred fillRect / stroke
// calls: 2-4 ms of script on a 2-core machine, where a plotly figure of the same views took ~130 ms
// (python -m engine.bench.ui_cost; docs/room.md). Hover, click-to-pick, drag-to-zoom and double-click-to-follow
// are handled here too; each band's drawing and hit test live in its own module.

defineLive("Timeline", ["Axes", "Common", "Gantt", "Layout", "LiveState", "Slots", "UtilView"], () => {
  const { C, el } = Common;
  const { computing, runExtent } = LiveState;
  const { VIEW_HEIGHT } = Layout;
  const BANDS = { gantt: Gantt, slots: Slots, util: UtilView, tps: { draw: UtilView.drawTps, hit: UtilView.hit } };
  const WINDOW_S = 20;    // sliding window on the time axis (s)
  const WINDOW_IT = 90;   // sliding window on the iteration axis
  const WHOLE_MAX_S = 600, WHOLE_MAX_IT = 5000;  // an ended run shown whole, up to this much of its end
  const DRAG_MIN_PX = 5;  // a shorter drag is a click

  // The timeline's own state. prev: the timeline this one replaces (a new layout): its zoom carries over.
  function build(inst, views, prev) {
    const sec = el("section", "ifl-section ifl-timeline");
    const wrap = el("div", "ifl-timeline-wrap");
    const canvas = el("canvas", "ifl-canvas ifl-timeline-canvas");
    canvas.setAttribute("role", "img");
    const zoombox = el("div", "ifl-zoombox");
    zoombox.hidden = true;
    wrap.append(canvas, zoombox);
    const heads = new Map();
    for (const v of views) {
      const head = Layout.sectionHead(v);
      head.classList.add("ifl-overlay-head");
      wrap.appendChild(head);
      heads.set(v, head);
      inst.observeSize(head);  // a legend that wraps (or gains the GPU lines) moves the bands
    }
    sec.appendChild(wrap);
    // fixed height: plots share what is left once headers and axis bands (about 100 px a view) are paid
    if (inst.cfg.height) {
      sec.style.flex = `${views.reduce((a, v) => a + VIEW_HEIGHT[v], 0)} 1 ${Math.round(100 * inst.scale)}px`;
    }
    inst.body.appendChild(sec);
    inst.observe(wrap);
    // zoom: the x ranges the user dragged ("time", or "it:<lane>" on the iteration axis); none: follow now
    const tl = { sec, wrap, canvas, zoombox, heads, views, geom: null, geomKey: "", cols: [], drag: null,
                 zoom: prev ? prev.zoom : {} };
    canvas.addEventListener("mousemove", (e) => tlMove(inst, tl, e));
    canvas.addEventListener("mouseleave", () => { inst.tip.hide(); tlEndDrag(inst, tl, null); });
    canvas.addEventListener("mousedown", (e) => tlDown(tl, e));
    canvas.addEventListener("mouseup", (e) => tlUp(inst, tl, e));
    canvas.addEventListener("dblclick", (e) => tlFollow(inst, tl, e));
    return tl;
  }

  // Pixel geometry: header overlays (measured), one band per view with an axis band under it;
  // columns side by side, each with room for its own y labels.
  function timelineGeometry(inst, tl) {
    const size = inst.sizes.get(tl.wrap);
    if (!size || size.w < 50) return null;
    const k = inst.scale;
    const headH = (v) => Math.round((inst.sizes.get(tl.heads.get(v)) || {}).outerH ?? tl.heads.get(v).offsetHeight);
    const named = tl.views.includes("gantt") && inst.state.named > 0;  // row labels carry names: wider margins
    const fit = inst.cfg.fit ? firstScreen(tl.wrap) : null;
    const key = `${Math.round(size.w)}|${inst.cfg.height ? Math.round(size.h) : ""}|${k}|${tl.views.map(headH)}|`
      + `${named}|${fit}`;
    if (tl.geom && tl.geomKey === key) return tl.geom;
    const W = Math.round(size.w), n = inst.cfg.lanes.length;
    const extra = named ? 64 : 0;
    const L = Math.round((58 + extra) * k), R = Math.round(24 * k), gap = n > 1 ? Math.round((88 + extra) * k) : 0;
    const pw = Math.floor((W - L - R - gap * (n - 1)) / n);
    const xs = [...Array(n).keys()].map((c) => L + c * (pw + gap));
    const axisBand = Math.round(30 * k), sep = Math.round(16 * k), lastBand = Math.round(54 * k);
    const heads = tl.views.map((v) => headH(v) + 6);
    const below = tl.views.map((v, j) => (j === tl.views.length - 1 ? lastBand : v === "gantt" ? axisBand + sep : sep));
    const fixed = heads.reduce((a, b) => a + b, 0) + below.reduce((a, b) => a + b, 0);
    const weights = fitWeights(tl.views, heads, below, fit)
      || tl.views.map((v) => VIEW_HEIGHT[v] * (inst.cfg.large ? 1.15 : 1));
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

  // Pixels from the timeline's top to the bottom of the browser's first screen (a projector's view).
  // Measured from the page's top, not the viewport's: Streamlit scrolls a section of its page, not the
  // window, so without its scroll the fit grew as the presenter scrolled (the slots from 110 px to 560).
  function firstScreen(wrap) {
    let top = wrap.getBoundingClientRect().top + window.scrollY;
    for (let el = wrap.parentElement; el; el = el.parentElement) top += el.scrollTop;
    return Math.round(window.innerHeight - top - 8);
  }

  // Fit mode: the Gantt and the batch slots share what the first screen has left (their headers and axes
  // paid first), in their usual proportions; a view after them keeps its usual height. null: too little
  // room to fit (the usual heights then).
  function fitWeights(views, heads, below, fit) {
    if (fit == null) return null;
    const first = views.map((v, j) => j).filter((j) => views[j] === "gantt" || views[j] === "slots");
    const fixed = first.reduce((a, j) => a + heads[j] + below[j], 0);
    const room = fit - fixed;
    const usual = first.reduce((a, j) => a + VIEW_HEIGHT[views[j]], 0);
    if (!first.length || room < 0.3 * usual) return null;
    return views.map((v, j) => (first.includes(j) ? (room * VIEW_HEIGHT[v]) / usual : VIEW_HEIGHT[v]));
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

  function draw(inst, tl) {
    const g = timelineGeometry(inst, tl);
    if (!g || inst.offscreen(tl.wrap)) return;
    const fc = frameContext(inst, tl);
    const revs = [...inst.state.by.values()].map((S) => S.rev).join(",") + `,${inst.state.gpuRev}`;
    const ranges = inst.cfg.lanes.map((n) => xRange(fc, inst.state.by.get(n)).join(":")).join(",");
    const sig = `${revs}|${inst.sel}|${ranges}|${g.W}x${g.H}|${fc.axis}|${inst.server.rev}|${fc.open ? fc.now : ""}`;
    if (!inst.changed(tl.canvas, sig)) return;
    const ctx = sizeCanvas(tl.canvas, g.W, g.H);
    ctx.fillStyle = C.bg;
    ctx.fillRect(0, 0, g.W, g.H);
    tl.cols = inst.cfg.lanes.map((name, c) => drawColumn(ctx, inst, fc, g, inst.state.by.get(name), g.xs[c]));
    // which requests have a row (for screen readers and tests); touched only when it changes
    const rows = JSON.stringify(Object.fromEntries(tl.cols.map((col) => [col.name, col.rows])));
    if (tl.canvas.dataset.rows !== rows) {
      tl.canvas.dataset.rows = rows;
      tl.canvas.setAttribute("aria-label", tl.cols.map((c) => `${c.name}: rows ${rowLabels(inst, c)}`).join("; "));
    }
  }

  // One lane's column: every band, its axes, and what hover and clicks need to find marks again.
  function drawColumn(ctx, inst, fc, g, S, x0) {
    const range = xRange(fc, S);
    const X = Axes.xScale(range, x0, g.pw);
    const integer = fc.axis !== "time";
    const ticks = Axes.niceTicks(range[0], range[1], Math.max(3, Math.round(g.pw / (110 * inst.scale))), integer);
    const col = { name: S.name, x0, w: g.pw, X, range, bands: [], rows: [] };
    for (const b of g.bands) {
      // what the band's module leaves for hover and clicks: hits (Gantt), subs (slots: a grid per engine), series (util)
      const band = { ...b, x: x0, w: g.pw, yticks: [], ytitle: "", hits: [], subs: [], series: null };
      ctx.fillStyle = C.plot;
      ctx.fillRect(band.x, band.y, band.w, band.h);
      Axes.xGrid(ctx, X, ticks, band);
      if (fc.axis === "time") drawPauses(ctx, inst, fc, X, band, b.view === "gantt");
      ctx.save();
      ctx.beginPath();
      ctx.rect(band.x, band.y, band.w, band.h);
      ctx.clip();
      BANDS[b.view].draw(ctx, inst, S, fc, X, band, col);
      ctx.restore();
      Axes.yAxis(ctx, inst, band);
      Axes.frameBand(ctx, band);
      if (b.labels) Axes.xLabels(ctx, inst, X, ticks, band, b === g.last ? xTitle(fc) : "");
      col.bands.push(band);
    }
    return col;
  }

  // The service's pauses: hatched, and named on the Gantt (bars that cross one stretch over it; the
  // metric cards leave that time out).
  function drawPauses(ctx, inst, fc, X, band, label) {
    for (const p of inst.state.pauses) {
      const t1 = p.t1 ?? Math.max(fc.now ?? p.t0, inst.serviceClock() ?? p.t0);
      const xa = Math.max(band.x, X(p.t0)), xb = Math.min(band.x + band.w, X(t1));
      if (xb - xa < 1) continue;
      ctx.fillStyle = Common.hatchPattern(ctx, C.muted, inst.scale);
      ctx.globalAlpha = 0.35;
      ctx.fillRect(xa, band.y, xb - xa, band.h);
      ctx.globalAlpha = 1;
      if (label && xb - xa > 40 * inst.scale) {
        ctx.fillStyle = C.muted;
        ctx.font = Axes.font(inst, 12);
        ctx.fillText("paused", xa + 4 * inst.scale, band.y + 12 * inst.scale);
      }
    }
  }

  // A column's rows as text, names included (an attribute: never markup).
  function rowLabels(inst, col) {
    const S = inst.state.by.get(col.name);
    return col.rows.map((r) => Common.reqLabel(S.reqs.get(r) || { rid: r }, 40)).join(", ");
  }

  function xTitle(fc) {
    return fc.axis === "time" ? "service time (s)" : "iteration (the lane's forward passes, counted by its engine)";
  }

  function frameContext(inst, tl) {
    const axis = inst.cfg.axis;
    const open = computing(inst.state);
    const now = open ? serviceNow(inst) : inst.state.latestT;
    const fc = { axis, now, open, time: null, it: new Map(), rows: new Map() };
    const whole = open ? null : runExtent(inst.state);  // an ended run: every lane whole, on one axis
    if (axis === "time") {
      const right = now ?? inst.serviceClock() ?? WINDOW_S;
      const left = Math.max(-0.3, right - WINDOW_S * 0.96);  // the service clock starts at 0
      const follow = whole ? padded(Math.max(whole.t0, whole.t1 - WHOLE_MAX_S), whole.t1) : [left, left + WINDOW_S];
      fc.time = tl.zoom.time || follow;
      const rows = Gantt.rows([...inst.state.by.values()], fc.time, "time", fc);
      for (const name of inst.state.by.keys()) fc.rows.set(name, rows);
    } else {
      for (const S of inst.state.by.values()) {
        const right = S.lastIt + 1;
        const left = Math.max(-0.5, right - WINDOW_IT * 0.96);
        const follow = whole ? padded(Math.max(whole.it0, whole.it1 - WHOLE_MAX_IT) - 0.5, whole.it1 + 0.5)
          : [left, left + WINDOW_IT];
        const range = tl.zoom[`it:${S.name}`] || follow;
        fc.it.set(S.name, range);
        fc.rows.set(S.name, Gantt.rows([S], range, "iterations", fc));
      }
    }
    return fc;
  }

  // [a, b] with a margin of 2% each side (and at least a small span)
  function padded(a, b) {
    const m = Math.max((b - a) * 0.02, 0.5);
    return [a - m, b + m];
  }

  function xRange(fc, S) {
    return fc.axis === "time" ? fc.time : fc.it.get(S.name);
  }

  function tlLocate(tl, e) {
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
    return at.band ? BANDS[at.band.view].hit(inst, at.band, at.x, at.y, at.col) : null;
  }

  function tlMove(inst, tl, e) {
    const at = tlLocate(tl, e);
    if (tl.drag) {
      const d = tl.drag, x = Math.max(d.col.x0, Math.min(d.col.x0 + d.col.w, e.clientX - tl.canvas.getBoundingClientRect().left));
      d.x1 = x;
      Object.assign(tl.zoombox.style, { left: `${Math.min(d.x0, x)}px`, width: `${Math.abs(x - d.x0)}px`,
                                        top: `${d.col.bands[0].y}px`,
                                        height: `${d.col.bands[d.col.bands.length - 1].y + d.col.bands[d.col.bands.length - 1].h - d.col.bands[0].y}px` });
      tl.zoombox.hidden = Math.abs(x - d.x0) < DRAG_MIN_PX;
      inst.tip.hide();
      return;
    }
    const hit = at && tlHit(inst, at);
    tl.canvas.style.cursor = hit && hit.rid != null ? "pointer" : at && at.band ? "crosshair" : "";
    if (hit) inst.tip.show(e, hit.tip, hit.color);
    else inst.tip.hide();
  }

  function tlDown(tl, e) {
    const at = tlLocate(tl, e);
    if (!at || !at.band || e.button !== 0) return;
    tl.drag = { col: at.col, x0: at.x, x1: at.x, at };
    e.preventDefault();
  }

  function tlUp(inst, tl, e) {
    const d = tl.drag;
    if (!d) return;
    if (Math.abs(d.x1 - d.x0) < DRAG_MIN_PX) {  // a click: pick the request under the pointer
      tlEndDrag(inst, tl, null);
      const hit = tlHit(inst, d.at);
      if (hit && hit.rid != null) inst.pick(hit.rid);
      return;
    }
    const a = d.col.X.invert(Math.min(d.x0, d.x1)), b = d.col.X.invert(Math.max(d.x0, d.x1));
    tlEndDrag(inst, tl, [a, b], d.col.name);
  }

  function tlEndDrag(inst, tl, range, name) {
    tl.drag = null;
    tl.zoombox.hidden = true;
    if (!range) return;
    tl.zoom[zoomKey(inst, name)] = range;
    inst.markDirty();
  }

  // Double-click: back to following "now" (time axis: both columns; iterations: this column).
  function tlFollow(inst, tl, e) {
    const at = tlLocate(tl, e);
    if (!at) return;
    delete tl.zoom[zoomKey(inst, at.col.name)];
    inst.markDirty();
  }

  function zoomKey(inst, name) {
    return inst.cfg.axis === "time" ? "time" : `it:${name}`;
  }

  // The service clock "now" while requests wait (their bars grow to it): the synced clock while
  // connected, never behind the latest event.
  function serviceNow(inst) {
    const latest = inst.state.latestT, now = inst.link.conn === "live" ? inst.serviceClock() : null;
    if (now == null) return latest;
    return latest == null ? now : Math.max(latest, now);
  }

  // The time axis follows "now" while requests are in flight (the window scrolls at the frame rate).
  // tl: null when the layout has no timeline.
  function following(inst, tl) {
    return inst.cfg.axis === "time" && !(tl && tl.zoom.time) && computing(inst.state);
  }

  // Some range is zoomed (the badge says how to follow again); tl: null when there is no timeline.
  const zoomed = (tl) => !!tl && Object.keys(tl.zoom).length > 0;

  // Back to following "now" everywhere (the axis changed: the ranges no longer apply).
  function unzoom(tl) {
    if (tl) tl.zoom = {};
  }

  return { build, draw, following, zoomed, unzoom, firstScreen };
});
