// Timeline bands: utilization (busy slots, token budget, KV blocks, GPU samples, in %; memory-bandwidth
// and compute utilization from the steps' roofline numbers; the prefix cache hit rate where the lane
// caches prefixes) and tokens/s below it, one point per iteration. A remote lane's band shows its
// server's own gauges instead (polled from its /metrics: time axis only, they have no iterations).

defineLive("UtilView", ["Axes", "Common", "LiveState"], () => {
  const { C, FONT, fmt, pct, rgba } = Common;
  const { HIT_WINDOW_S, maxBatch, engineSteps, prefixOn, isRemote } = LiveState;
  const UTIL_LINES = [
    { key: "busy", name: "busy slots", color: "#F8FAFC", dash: [], width: 2.8 },
    { key: "budget", name: "token budget", color: "#FBBF24", dash: [2, 3], width: 2.3 },
    { key: "kv", name: "KV blocks", color: "#22D3EE", dash: [7, 4], width: 2.3 },
  ];
  const HIT_LINE = { key: "hit", name: "prefix cache hit rate", color: "#F0ABFC", dash: [4, 2, 1, 2], width: 2.3 };
  const ROOF_LINES = [  // shares of the device's measured peaks (engine/telemetry/roofline.py)
    { key: "mem", name: "memory bandwidth", color: "#60A5FA", dash: [], width: 2.3 },
    { key: "compute", name: "compute", color: "#FB7185", dash: [3, 2], width: 2.3 },
  ];
  // A remote server's gauges: the colors of their local counterparts (busy slots, queue, KV blocks).
  const SERVER_LINES = [
    { key: "running", name: "running", color: "#F8FAFC", dash: [], width: 2.8 },
    { key: "waiting", name: "waiting", color: "#FBBF24", dash: [2, 3], width: 2.3 },
  ];
  const SERVER_KV = "#22D3EE";
  const TPS_COLOR = "#C084FC";
  const GPU_LINES = [  // NVML samples, time axis only
    { key: "util", name: "GPU utilization", color: "#4ADE80", dash: [], width: 2 },
    { key: "mem", name: "GPU memory", color: "#F97316", dash: [5, 3], width: 2 },
  ];
  const SERIES = ["busy", "budget", "kv", "hit", "mem", "compute", "tps"];
  const seriesCache = new WeakMap();  // lane state -> { key, series } (both bands draw one series)

  // Per-iteration series inside the window (plus one point either side so lines reach the edges);
  // an idle gap over 1 s breaks the lines instead of bridging it.
  function utilSeries(inst, S, fc, range) {
    const timeMode = fc.axis === "time";
    const cfg = inst.laneConfig(S.name), maxB = maxBatch(S, cfg);
    const budgeted = !cfg || cfg.strategy === "continuous";  // a static batch prefills all its rows, budget or not
    const out = { x: [], st: [], busy: [], budget: [], kv: [], hit: [], mem: [], compute: [], tps: [],
                  tpsTop: 10, prefix: prefixOn(S, cfg), roof: false, budgeted, over: {} };
    // a disaggregated lane: the decode engine's iterations (its batch, budget and pool; the prefill
    // engine's are in the slots and the KV map); tokens/s counts both
    const steps = engineSteps(S, inst.contract)[0];
    let prev = null;
    for (let i = 0; i < steps.length; i++) {
      const st = steps[i];
      const x = timeMode ? st.t1 : st.it;
      const nextX = i + 1 < steps.length ? (timeMode ? steps[i + 1].t1 : steps[i + 1].it) : x;
      if (nextX < range[0] || (prev && (timeMode ? prev.t1 : prev.it) > range[1])) continue;  // off screen
      if (prev && timeMode && st.t0 - prev.t1 > 1.0) {
        out.x.push(null);
        out.st.push(null);
        for (const key of SERIES) out[key].push(null);
      }
      prev = st;
      const r = st.roof && st.roof.mem != null ? st.roof : null;
      const v = { busy: pct(st.busy, maxB || Math.max(st.rows, 1)), budget: budgeted ? pct(st.used, st.budget) : null,
                  kv: pct(st.kvUsed, st.kvBlocks), hit: st.hitRecent == null ? null : 100 * st.hitRecent,
                  mem: r ? 100 * r.mem : null, compute: r ? 100 * r.compute : null, tps: st.tps };
      out.roof = out.roof || r != null;
      out.x.push(x);
      out.st.push(st);
      const shown = x >= range[0] && x <= range[1];
      for (const key in v) out[key].push(key === "tps" ? v[key] : capped(out, key, v[key], shown));
      if (shown) out.tpsTop = Math.max(out.tpsTop, v.tps);
    }
    return out;
  }

  // A share drawn at most at 100% (the axis's top); what went past it is noted on the chart.
  function capped(out, key, value, shown) {
    if (value == null || value <= 100) return value;
    if (shown) out.over[key] = Math.max(out.over[key] || 0, value);
    return 100;
  }

  // "compute 130% of the measured peak, drawn at 100%: ...", or null. Only the roofline's shares can pass
  // 100% (a device measured below what an iteration reached); anything else past it is named as it is.
  function overNote(u) {
    const keys = Object.keys(u.over);
    if (!keys.length) return null;
    const name = (k) => [...UTIL_LINES, HIT_LINE, ...ROOF_LINES].find((l) => l.key === k).name;
    const what = keys.map((k) => `${name(k)} ${fmt(u.over[k], 0)}%`).join(", ");
    return keys.every((k) => k === "mem" || k === "compute")
      ? `${what} of the measured peak, drawn at 100%: the peak measured at start is below what these iterations reached`
      : `${what}, drawn at 100%`;
  }

  // The utilization and tokens/s bands share one series per frame.
  function utilCache(inst, S, fc, X, band) {
    const range = [X.invert(band.x), X.invert(band.x + band.w)];
    const key = `${S.rev}|${range}|${inst.server.rev}|${fc.axis}`;
    let c = seriesCache.get(S);
    if (!c || c.key !== key) seriesCache.set(S, (c = { key, series: utilSeries(inst, S, fc, range) }));
    return c.series;
  }

  // A stepped line (each value holds until the next iteration ends); null breaks the line. Iterations
  // less than a pixel apart share one vertical stroke, from their lowest value to their highest, ending at
  // the last: at a GPU's pace a window holds several iterations a pixel, and the canvas rasterizes every
  // vertex it is given (the same pixels, a few times fewer vertices).
  function stepLine(ctx, X, Y, xs, ys, close) {
    let open = false, firstX = 0, colX = 0, lo = 0, hi = 0, last = 0, lastX = 0;  // the open pixel column
    const flush = () => {
      if (lo < hi) { ctx.lineTo(colX, lo); ctx.lineTo(colX, hi); ctx.lineTo(colX, last); }
    };
    const end = () => {  // the piece ends at its last iteration, as a line through every vertex would
      if (!open) return;
      flush();
      if (lastX > colX) ctx.lineTo(lastX, last);
      if (close) closeArea(ctx, firstX, lastX, Y(0));
      open = false;
    };
    ctx.beginPath();
    for (let i = 0; i < xs.length; i++) {
      if (xs[i] == null || ys[i] == null) { end(); continue; }
      const x = X(xs[i]), y = Y(ys[i]);
      lastX = x;
      if (!open) { ctx.moveTo(x, y); firstX = x; open = true; }
      else if (x >= colX && x - colX < 1) { lo = Math.min(lo, y); hi = Math.max(hi, y); last = y; continue; }
      else { flush(); ctx.lineTo(x, last); ctx.lineTo(x, y); }
      colX = x; lo = hi = last = y;
    }
    end();
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
    if (isRemote(S, inst.laneConfig(S.name))) return drawServer(ctx, inst, S, fc, X, band);
    const u = utilCache(inst, S, fc, X, band);
    const top = 106, Y = Axes.yScale(band, top);
    band.yticks = valueTicks(Y, top, 4, "%");
    Axes.yGrid(ctx, band);
    const lines = [...UTIL_LINES, ...(u.prefix ? [HIT_LINE] : []), ...(u.roof ? ROOF_LINES : [])];
    for (const l of lines) strokeLine(ctx, inst, l, () => stepLine(ctx, X, Y, u.x, u[l.key], false));
    if (fc.axis === "time") drawGpu(ctx, inst, X, Y);
    let row = 0;
    if (!u.budgeted) noteBox(ctx, inst, band, row++, "no token budget line: a static batch prefills all its rows at once", UTIL_LINES[1].color);
    if (S.pools) noteBox(ctx, inst, band, row++, "the decode engine's slots, budget and KV; tokens/s: both engines", C.transfer);
    const over = overNote(u);
    if (over) noteBox(ctx, inst, band, row++, over, ROOF_LINES[1].color);
    if (u.prefix) noteBox(ctx, inst, band, row++, hitNote(S), HIT_LINE.color);
    const roof = lastRoof(S);
    if (roof) noteBox(ctx, inst, band, row++, roofNote(roof), ROOF_LINES[0].color);
    band.series = u;
  }

  // One line of the band in its style; path() builds the path.
  function strokeLine(ctx, inst, l, path) {
    const k = inst.scale;
    ctx.strokeStyle = l.color;
    ctx.lineWidth = l.width * k;
    ctx.setLineDash(l.dash.map((d) => d * l.width * k));
    path();
    ctx.stroke();
    ctx.setLineDash([]);
  }

  // A line of text on a dark box, top left of the band (row 0, 1, ... downwards).
  function noteBox(ctx, inst, band, row, text, color) {
    const k = inst.scale, y = band.y + (4 + 22 * row) * k;
    ctx.font = `600 ${Math.round(12 * k)}px ${FONT}`;
    ctx.textBaseline = "top";
    ctx.textAlign = "left";
    const w = Math.min(ctx.measureText(text).width, band.w - 18 * k);
    ctx.fillStyle = rgba(C.plot, 0.85);
    ctx.fillRect(band.x + 4 * k, y, w + 10 * k, 18 * k);
    ctx.fillStyle = color;
    ctx.fillText(text, band.x + 9 * k, y + 3 * k, w);
  }

  // The hit rate in words: over the whole stream and recently (the line shows the recent one).
  function hitNote(S) {
    const last = S.steps[S.steps.length - 1];
    return `prefix cache hits: ${hitText(S.prefix.hits, S.prefix.queries)} all · `
      + `${last && last.hitRecent != null ? fmt(100 * last.hitRecent, 0) + "%" : "–"} last ${HIT_WINDOW_S} s`;
  }

  function lastRoof(S) {
    for (let i = S.steps.length - 1; i >= 0; i--) if (S.steps[i].roof && S.steps[i].roof.mem != null) return S.steps[i].roof;
    return null;
  }

  // Small shares need decimals to read as more than 0.
  const share = (x) => `${fmt(100 * x, x < 0.1 ? 2 : 0)}%`;

  function roofNote(r) {
    return `last iteration: memory bandwidth ${share(r.mem)} · compute ${share(r.compute)} of peak`;
  }

  // A remote server's gauges on the time axis: requests running and waiting (left axis), its KV cache
  // usage as a shaded area (0-100% of the band's height, labelled on the right).
  function drawServer(ctx, inst, S, fc, X, band) {
    const pts = S.server.filter((p, i, a) => fc.axis === "time" && (i + 1 === a.length || X(a[i + 1].t) >= band.x));
    const top = Math.max(4, ...pts.map((p) => Math.max(p.running ?? 0, p.waiting ?? 0))) * 1.15;
    const Y = Axes.yScale(band, top), Ykv = Axes.yScale(band, 100);
    band.yticks = Axes.niceTicks(0, top, 4, true).map((t) => ({ y: Y(t.v), label: t.label, v: t.v }));
    band.ytitle = "requests";
    Axes.yGrid(ctx, band);
    const xs = pts.map((p) => p.t);
    ctx.fillStyle = rgba(SERVER_KV, 0.16);
    stepLine(ctx, X, Ykv, xs, pts.map((p) => p.kv), true);
    ctx.fill();
    strokeLine(ctx, inst, { color: SERVER_KV, dash: [], width: 1.6 }, () => stepLine(ctx, X, Ykv, xs, pts.map((p) => p.kv), false));
    for (const l of SERVER_LINES) strokeLine(ctx, inst, l, () => stepLine(ctx, X, Y, xs, pts.map((p) => p[l.key]), false));
    noteBox(ctx, inst, band, 0, serverNote(S, fc), C.text);
    kvScale(ctx, inst, band, Ykv);
    band.series = { server: pts };
  }

  // The KV usage's own scale, inside the band's right edge.
  function kvScale(ctx, inst, band, Ykv) {
    ctx.font = `600 ${Math.round(11 * inst.scale)}px ${FONT}`;
    ctx.fillStyle = SERVER_KV;
    ctx.textAlign = "right";
    for (const v of [0, 50, 100]) {
      ctx.textBaseline = v === 100 ? "top" : v === 0 ? "bottom" : "middle";
      ctx.fillText(`KV ${v}%`, band.x + band.w - 4 * inst.scale, Ykv(v));
    }
  }

  function serverNote(S, fc) {
    const g = S.server[S.server.length - 1];
    if (!g) return "no gauges from the server's /metrics (it may not export vLLM or SGLang metrics)";
    const text = `server's /metrics: ${gaugeText(g)}`;
    return fc.axis === "time" ? text : `${text} (lines on the time axis)`;
  }

  function gaugeText(g) {
    return [g.running != null ? `${fmt(g.running, 0)} running` : null, g.waiting != null ? `${fmt(g.waiting, 0)} waiting` : null,
            g.kv != null ? `KV cache ${fmt(g.kv, 0)}%` : null].filter(Boolean).join(" · ") || "none of its gauges known";
  }

  function hitText(hits, queries) {
    return queries ? `${fmt(pct(hits, queries), 0)}% of ${queries.toLocaleString()} tokens` : "none looked up yet";
  }

  // The device's utilization and memory (shared by every engine): straight lines between samples.
  function drawGpu(ctx, inst, X, Y) {
    const samples = inst.state.gpu;
    if (!samples.length) return;
    for (const l of GPU_LINES) {
      strokeLine(ctx, inst, l, () => {
        ctx.beginPath();
        samples.forEach((p, i) => (i ? ctx.lineTo(X(p.t), Y(p[l.key])) : ctx.moveTo(X(p.t), Y(p[l.key]))));
      });
    }
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
                   `busy slots ${fmt(u.busy[i], 0)}% · `
                   + (u.budgeted ? `token budget ${fmt(u.budget[i], 0)}%` : `${st.used} tokens (no token budget)`),
                   `KV blocks ${fmt(u.kv[i], 0)}% · ${fmt(u.tps[i], 0)} tokens/s`];
    if (u.prefix) {
      lines.push(`prefix cache: ${st.hits} of ${st.queries} tokens hit this iteration`,
                 `hit rate ${st.hitRecent != null ? fmt(100 * st.hitRecent, 0) + "%" : "–"} last ${HIT_WINDOW_S} s · `
                 + `${st.hitAll != null ? fmt(100 * st.hitAll, 0) + "%" : "–"} all`);
    }
    if (st.roof && st.roof.mem != null) {
      lines.push(`memory bandwidth ${share(st.roof.mem)} · compute ${share(st.roof.compute)} of peak`
                 + ` · ${fmt(st.roof.intensity, 1)} FLOPs/byte`);
    }
    const g = nearestGpu(inst.state.gpu, st.t1);
    if (g) lines.push(`GPU ${fmt(g.util, 0)}% · memory ${fmt(g.mem, 0)}% (NVML at ${fmt(g.t)} s)`);
    return lines;
  }

  function nearestGpu(samples, t) {
    const p = nearest(samples, t);
    return p && Math.abs(p.t - t) < 1 ? p : null;
  }

  function nearest(samples, t) {
    let best = null;
    for (const p of samples) if (!best || Math.abs(p.t - t) < Math.abs(best.t - t)) best = p;
    return best;
  }

  // The iteration nearest to x: { rid: null, tip: [lines], color } or null.
  function hit(inst, band, x, y, col) {
    const u = band.series;
    if (!u) return null;
    const v = col.X.invert(x);
    if (u.server) {
      const g = nearest(u.server, v);
      return g ? { rid: null, tip: [`server gauges at ${fmt(g.t)} s`, gaugeText(g), "polled from its /metrics"], color: C.muted } : null;
    }
    let best = -1;
    for (let i = 0; i < u.x.length; i++) {
      if (u.x[i] != null && (best < 0 || Math.abs(u.x[i] - v) < Math.abs(u.x[best] - v))) best = i;
    }
    return best < 0 ? null : { rid: null, tip: utilTip(inst, u, best), color: C.muted };
  }

  return { draw, drawTps, hit, stepLine };  // (stepLine: tests/js/util_lines_test.js)
});
