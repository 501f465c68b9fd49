// Scales, ticks and axes of the timeline's bands (canvas drawing helpers, no state).

defineLive("Axes", ["Common"], () => {
  const { C, FONT } = Common;

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

  function yScale(band, top) {
    return (v) => band.y + band.h - (v / top) * band.h;
  }

  return { xScale, niceTicks, xGrid, frameBand, xLabels, yAxis, yGrid, yScale, font };
});
