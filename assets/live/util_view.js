// Timeline bands: utilization (busy slots, token budget, KV blocks, GPU samples, in %; the prefix
// cache hit rate where the lane caches prefixes) and tokens/s below it, one point per iteration.

const UtilView = (() => {
  const { C, FONT, fmt, pct, rgba } = Common;
  const { HIT_WINDOW_S, maxBatch, prefixOn } = LiveState;
  const UTIL_LINES = [
    { key: "busy", name: "busy slots", color: "#F8FAFC", dash: [], width: 2.8 },
    { key: "budget", name: "token budget", color: "#FBBF24", dash: [2, 3], width: 2.3 },
    { key: "kv", name: "KV blocks", color: "#22D3EE", dash: [7, 4], width: 2.3 },
  ];
  const HIT_LINE = { key: "hit", name: "prefix cache hit rate", color: "#F0ABFC", dash: [4, 2, 1, 2], width: 2.3 };
  const TPS_COLOR = "#C084FC";
  const GPU_LINES = [  // NVML samples, time axis only
    { key: "util", name: "GPU utilization", color: "#4ADE80", dash: [], width: 2 },
    { key: "mem", name: "GPU memory", color: "#F97316", dash: [5, 3], width: 2 },
  ];
  const seriesCache = new WeakMap();  // lane state -> { key, series } (both bands draw one series)

  // Per-iteration series inside the window (plus one point either side so lines reach the edges);
  // an idle gap over 1 s breaks the lines instead of bridging it.
  function utilSeries(inst, S, fc, range) {
    const timeMode = fc.axis === "time";
    const maxB = maxBatch(S, inst.laneConfig(S.name));
    const out = { x: [], st: [], busy: [], budget: [], kv: [], hit: [], tps: [], top: 100, tpsTop: 10,
                  prefix: prefixOn(S, inst.laneConfig(S.name)) };
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
        for (const key of ["busy", "budget", "kv", "hit", "tps"]) out[key].push(null);
      }
      prev = st;
      const v = { busy: pct(st.busy, maxB || Math.max(st.rows, 1)), budget: pct(st.used, st.budget),
                  kv: pct(st.kvUsed, st.kvBlocks), hit: st.hitRecent == null ? null : 100 * st.hitRecent, tps: st.tps };
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
    let c = seriesCache.get(S);
    if (!c || c.key !== key) seriesCache.set(S, (c = { key, series: utilSeries(inst, S, fc, range) }));
    return c.series;
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

  function valueTicks(Y, top, n, suffix) {
    return Axes.niceTicks(0, top, n, false).map((t) => ({ y: Y(t.v), label: `${Number(t.label)}${suffix}`, v: t.v }));
  }

  function draw(ctx, inst, S, fc, X, band) {
    const k = inst.scale;
    const u = utilCache(inst, S, fc, X, band);
    const top = u.top * 1.06, Y = Axes.yScale(band, top);
    band.yticks = valueTicks(Y, top, 4, "%");
    Axes.yGrid(ctx, band);
    for (const l of u.prefix ? [...UTIL_LINES, HIT_LINE] : UTIL_LINES) {
      ctx.strokeStyle = l.color;
      ctx.lineWidth = l.width * k;
      ctx.setLineDash(l.dash.map((d) => d * l.width * k));
      stepLine(ctx, X, Y, u.x, u[l.key], false);
      ctx.stroke();
    }
    ctx.setLineDash([]);
    if (fc.axis === "time") drawGpu(ctx, inst, X, Y);
    if (u.prefix) drawHitRate(ctx, inst, S, band);
    band.series = u;
  }

  // The hit rate in words, top left: over the whole stream and recently (the line shows the recent one).
  function drawHitRate(ctx, inst, S, band) {
    const k = inst.scale, last = S.steps[S.steps.length - 1];
    const text = `prefix cache hits: ${hitText(S.prefix.hits, S.prefix.queries)} all · `
      + `${last && last.hitRecent != null ? fmt(100 * last.hitRecent, 0) + "%" : "–"} last ${HIT_WINDOW_S} s`;
    ctx.font = `600 ${Math.round(12 * k)}px ${FONT}`;
    ctx.textBaseline = "top";
    ctx.textAlign = "left";
    const w = ctx.measureText(text).width;
    ctx.fillStyle = rgba(C.plot, 0.85);
    ctx.fillRect(band.x + 4 * k, band.y + 4 * k, w + 10 * k, 18 * k);
    ctx.fillStyle = HIT_LINE.color;
    ctx.fillText(text, band.x + 9 * k, band.y + 7 * k);
  }

  function hitText(hits, queries) {
    return queries ? `${fmt(pct(hits, queries), 0)}% of ${queries.toLocaleString()} tokens` : "none looked up yet";
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
    const top = u.tpsTop * 1.15, Y = Axes.yScale(band, top);
    band.yticks = valueTicks(Y, top, 3, "");
    band.ytitle = "tok/s";
    Axes.yGrid(ctx, band);
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
    if (u.prefix) {
      lines.push(`prefix cache: ${st.hits} of ${st.queries} tokens hit this iteration`,
                 `hit rate ${st.hitRecent != null ? fmt(100 * st.hitRecent, 0) + "%" : "–"} last ${HIT_WINDOW_S} s · `
                 + `${st.hitAll != null ? fmt(100 * st.hitAll, 0) + "%" : "–"} all`);
    }
    const g = nearestGpu(inst.state.gpu, st.t1);
    if (g) lines.push(`GPU ${fmt(g.util, 0)}% · memory ${fmt(g.mem, 0)}% (NVML at ${fmt(g.t)} s)`);
    return lines;
  }

  function nearestGpu(samples, t) {
    let best = null;
    for (const p of samples) if (Math.abs(p.t - t) < 1 && (!best || Math.abs(p.t - t) < Math.abs(best.t - t))) best = p;
    return best;
  }

  // The iteration nearest to x: { rid: null, tip: [lines], color } or null.
  function hit(inst, band, x, y, col) {
    const u = band.series;
    if (!u) return null;
    const v = col.X.invert(x);
    let best = -1;
    for (let i = 0; i < u.x.length; i++) {
      if (u.x[i] != null && (best < 0 || Math.abs(u.x[i] - v) < Math.abs(u.x[best] - v))) best = i;
    }
    return best < 0 ? null : { rid: null, tip: utilTip(inst, u, best), color: C.muted };
  }

  return { draw, drawTps, hit };
})();
