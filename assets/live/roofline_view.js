// View: the roofline of recent iterations, every lane on one log-log chart: arithmetic intensity
// (FLOPs per byte moved) across, achieved FLOP/s up, under the device's roof
// min(peak bandwidth × intensity, peak FLOP/s), the peaks measured by engine/telemetry/device_peaks.py and sent
// with each step's roofline numbers (engine/telemetry/roofline.py). One color per lane; older iterations fade.

defineLive("RooflineView", ["Common"], () => {
  const { C, FONT, fmt, el, setText, canvasContext, PALETTE } = Common;
  const LANE_COLORS = PALETTE.slice(0, 4);  // by lane order; not request colors here
  const RECENT = 60;  // iterations placed per lane

  function build(inst, cell) {
    const caption = el("div", "ifl-caption", "");
    const wrap = el("div", "ifl-canvas-wrap");
    const canvas = el("canvas", "ifl-canvas");
    canvas.setAttribute("role", "img");
    wrap.appendChild(canvas);
    cell.append(caption, wrap);
    inst.observe(wrap);
    return { cell, caption, wrap, canvas };
  }

  const laneColor = (i) => LANE_COLORS[i % LANE_COLORS.length];

  // The roofline points of the last RECENT iterations that have one, oldest first (from the end: a lane keeps
  // thousands of iterations).
  function recent(steps) {
    const pts = [];
    for (let k = steps.length - 1; k >= 0 && pts.length < RECENT; k--) {
      const r = steps[k].roof;
      if (r && r.intensity > 0 && r.flopsPerS > 0) pts.push(r);
    }
    return pts.reverse();
  }

  // Each lane's recent points and the peaks its steps came with.
  function lanes(inst) {
    return inst.cfg.lanes.map((name, i) => {
      const S = inst.state.by.get(name);
      return { name, color: laneColor(i), pts: S ? recent(S.steps) : [], peaks: S ? S.peaks : null,
               remote: !!(S && S.remote) };
    });
  }

  function draw(inst, view) {
    const size = inst.sizes.get(view.wrap);
    const revs = inst.cfg.lanes.map((n) => (inst.state.by.get(n) || {}).rev).join(",");
    if (inst.offscreen(view.wrap) || !inst.changed(view.canvas, `${revs}|${size ? size.w + "x" + size.h : ""}`)) return;
    const c = canvasContext(inst.sizes, view);
    if (!c) return;
    c.ctx.fillStyle = C.bg;
    c.ctx.fillRect(0, 0, c.W, c.H);
    const ls = lanes(inst);
    setText(view.caption, caption(ls));
    if (!ls.some((l) => l.pts.length)) return;
    const g = frame(inst, c, ls);
    axes(c.ctx, inst, g);
    for (const peaks of distinctPeaks(ls)) roof(c.ctx, inst, g, peaks);
    ls.forEach((l) => points(c.ctx, inst, g, l));
    legend(c.ctx, inst, g, ls);
    view.canvas.setAttribute("aria-label", ls.map((l) => `${l.name}: ${l.pts.length} iterations`).join("; "));
  }

  function caption(ls) {
    const p = ls.find((l) => l.peaks);
    if (!ls.some((l) => l.pts.length)) {
      const far = ls.filter((l) => l.remote).map((l) => l.name);
      return "no roofline numbers yet: they come with the first iteration"
        + (far.length ? ` (${far.join(", ")}: a remote server's FLOPs and bytes are not visible from here)` : "");
    }
    if (!p) return "the device's peaks are not measured: iterations placed without the roof";
    return `the device's measured peaks: ${si(p.peaks.bytesPerS)}B/s memory bandwidth · ${si(p.peaks.flopsPerS)}FLOP/s`
      + ` · ridge ${fmt(p.peaks.flopsPerS / p.peaks.bytesPerS, 1)} FLOPs/byte (left of it a step is memory-bound)`
      + ` · last ${RECENT} iterations per lane`;
  }

  // Decade-aligned log ranges covering the points and the roof's corner.
  function frame(inst, c, ls) {
    const k = inst.scale, xs = [], ys = [];
    for (const l of ls) {
      for (const p of l.pts) { xs.push(p.intensity); ys.push(p.flopsPerS); }
      if (l.peaks) { xs.push(l.peaks.flopsPerS / l.peaks.bytesPerS); ys.push(l.peaks.flopsPerS); }
    }
    const lo = (v) => Math.floor(Math.log10(Math.min(...v)) - 0.3), hi = (v) => Math.ceil(Math.log10(Math.max(...v)) + 0.3);
    const x0 = Math.round(84 * k), y1 = c.H - Math.round(40 * k), x1 = c.W - Math.round(16 * k), y0 = Math.round(10 * k);
    const lx = [lo(xs), hi(xs)], ly = [lo(ys), hi(ys)];
    const X = (v) => x0 + ((Math.log10(v) - lx[0]) / (lx[1] - lx[0])) * (x1 - x0);
    const Y = (v) => y1 - ((Math.log10(v) - ly[0]) / (ly[1] - ly[0])) * (y1 - y0);
    return { x0, x1, y0, y1, lx, ly, X, Y };
  }

  function axes(ctx, inst, g) {
    const k = inst.scale;
    ctx.fillStyle = C.plot;
    ctx.fillRect(g.x0, g.y0, g.x1 - g.x0, g.y1 - g.y0);
    ctx.font = `${Math.round(13 * k)}px ${FONT}`;
    ctx.fillStyle = C.muted;
    ctx.strokeStyle = C.grid;
    ctx.lineWidth = 1;
    ctx.beginPath();
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    for (let e = g.lx[0]; e <= g.lx[1]; e++) {
      const x = Math.round(g.X(10 ** e)) + 0.5;
      ctx.moveTo(x, g.y0);
      ctx.lineTo(x, g.y1);
      ctx.fillText(e < 0 ? String(+(10 ** e).toFixed(-e)) : si(10 ** e), x, g.y1 + 5 * k);
    }
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (let e = g.ly[0]; e <= g.ly[1]; e++) {
      const y = Math.round(g.Y(10 ** e)) + 0.5;
      ctx.moveTo(g.x0, y);
      ctx.lineTo(g.x1, y);
      ctx.fillText(si(10 ** e), g.x0 - 6 * k, y);
    }
    ctx.stroke();
    ctx.save();
    ctx.translate(g.x0 - 62 * k, (g.y0 + g.y1) / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "center";
    ctx.fillText("achieved FLOP/s (log)", 0, 0);
    ctx.restore();
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    ctx.fillText("arithmetic intensity (FLOPs per byte moved, log)", (g.x0 + g.x1) / 2, g.y1 + 22 * k);
  }

  function distinctPeaks(ls) {
    const seen = new Map();
    for (const l of ls) if (l.peaks) seen.set(`${l.peaks.bytesPerS}|${l.peaks.flopsPerS}`, l.peaks);
    return [...seen.values()];
  }

  // The roof: the bandwidth slope up to the ridge, then flat at the peak FLOP/s; the ridge dotted.
  function roof(ctx, inst, g, p) {
    const k = inst.scale, ridge = p.flopsPerS / p.bytesPerS, xa = 10 ** g.lx[0], xb = 10 ** g.lx[1];
    ctx.save();
    ctx.beginPath();
    ctx.rect(g.x0, g.y0, g.x1 - g.x0, g.y1 - g.y0);
    ctx.clip();
    ctx.strokeStyle = C.text;
    ctx.lineWidth = 2.5 * k;
    ctx.beginPath();
    ctx.moveTo(g.X(xa), g.Y(p.bytesPerS * xa));
    ctx.lineTo(g.X(ridge), g.Y(p.flopsPerS));
    ctx.lineTo(g.X(xb), g.Y(p.flopsPerS));
    ctx.stroke();
    ctx.setLineDash([2 * k, 4 * k]);
    ctx.lineWidth = 1.2 * k;
    ctx.beginPath();
    ctx.moveTo(g.X(ridge), g.Y(p.flopsPerS));
    ctx.lineTo(g.X(ridge), g.y1);
    ctx.stroke();
    ctx.setLineDash([]);
    ctx.font = `600 ${Math.round(12 * k)}px ${FONT}`;
    ctx.fillStyle = C.text;
    ctx.textAlign = "left";
    ctx.textBaseline = "bottom";
    ctx.fillText(`peak ${si(p.flopsPerS)}FLOP/s: compute-bound`, Math.min(g.X(ridge) + 8 * k, g.x1 - 230 * k), g.Y(p.flopsPerS) - 4 * k);
    slopeLabel(ctx, k, g, [g.X(xa), g.Y(p.bytesPerS * xa)], [g.X(ridge), g.Y(p.flopsPerS)],
               `memory-bound: ${si(p.bytesPerS)}B/s × intensity`);
    ctx.restore();
  }

  // Text along the roof's slope, under it, ending just left of the ridge.
  function slopeLabel(ctx, k, g, a, b, text) {
    ctx.save();
    ctx.translate(b[0] - 12 * k * Math.cos(Math.atan2(b[1] - a[1], b[0] - a[0])), b[1]);
    ctx.rotate(Math.atan2(b[1] - a[1], b[0] - a[0]));
    ctx.textAlign = "right";
    ctx.textBaseline = "top";
    ctx.fillText(text, 0, 5 * k);
    ctx.restore();
  }

  // Oldest faint, newest solid and ringed.
  function points(ctx, inst, g, l) {
    const k = inst.scale, n = l.pts.length;
    l.pts.forEach((p, i) => {
      const last = i === n - 1;
      ctx.globalAlpha = last ? 1 : 0.2 + (0.6 * (i + 1)) / n;
      ctx.fillStyle = l.color;
      ctx.beginPath();
      ctx.arc(g.X(p.intensity), g.Y(p.flopsPerS), (last ? 6 : 3.5) * k, 0, 2 * Math.PI);
      ctx.fill();
      if (last) {
        ctx.strokeStyle = C.white;
        ctx.lineWidth = 2 * k;
        ctx.stroke();
      }
    });
    ctx.globalAlpha = 1;
  }

  function legend(ctx, inst, g, ls) {
    const k = inst.scale;
    ctx.font = `600 ${Math.round(13 * k)}px ${FONT}`;
    ctx.textAlign = "left";
    ctx.textBaseline = "middle";
    ls.forEach((l, i) => {
      const y = g.y0 + (14 + 20 * i) * k, x = g.x0 + 12 * k;
      ctx.fillStyle = l.color;
      ctx.beginPath();
      ctx.arc(x, y, 5 * k, 0, 2 * Math.PI);
      ctx.fill();
      ctx.fillText(l.pts.length ? l.name : `${l.name} (no roofline numbers)`, x + 12 * k, y);
    });
  }

  // 1.5e9 -> "1.5 G" (a unit follows it).
  function si(v) {
    const units = ["", "k", "M", "G", "T", "P", "E"];
    let i = 0;
    while (Math.abs(v) >= 1000 && i < units.length - 1) { v /= 1000; i++; }
    return `${+v.toPrecision(3)} ${units[i]}`;
  }

  return { build, draw };
});
