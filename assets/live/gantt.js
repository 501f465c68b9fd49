// Timeline band: the Gantt chart, one row per request (newest on top), one bar per phase run.

defineLive("Gantt", ["Common", "LiveState", "Waits"], () => {
  const { C, FONT, fmt, rgba, mix, reqColor, reqLabel, hatchPattern, stallTip, drawStall } = Common;
  const { KIND } = LiveState;
  const MAX_ROWS = 26;  // rows: the newest requests that touch the visible window, those that ran first
  const MIN_ROWS = 8;   // rows are never taller than 1/MIN_ROWS of the plot
  const NAME_CHARS = 10;  // a participant's name in a row label (the timeline widens its margin for it)
  const SEG_H = { queued: 0.24, preempted: 0.34, swapped: 0.34, transfer: 0.5, prefill: 0.8, recompute: 0.8, decode: 0.8, held: 0.8, cached: 0.8,
                  finish: 0.92 };
  const SEG_LABEL = { queued: "queued", prefill: "prefill chunk", decode: "decode", preempted: "preempted",
                      swapped: "swapped out (preempted; its KV in the host pool)",
                      transfer: "KV hand-off (prefill engine -> decode engine)",
                      cached: "from cache (prefill a prefix hit skipped)",
                      recompute: "recompute (prefill after preemption)", held: "finished, held in batch (padding)" };

  // Extent of a request on the x axis, open waits extended to "now" (time) / the latest iteration.
  function reqExtent(R, axis, fc, S) {
    const first = R.segs[0];
    if (axis === "time") {
      const a = R.arrival ?? first?.t0 ?? R.open?.t0;
      const b = R.open ? fc.now : Math.max(R.endT ?? -Infinity, R.finishT ?? -Infinity);
      return [a, b];
    }
    const a = first ? first.x0 : R.open?.x0;
    const b = R.open ? S.lastIt + 0.5 : Math.max(R.segs.length ? R.segs[R.segs.length - 1].x1 : -Infinity,
                                                R.finishX ?? -Infinity);
    return [a, b];
  }

  // Rows: the newest requests that touch the window (shared by both columns on the time axis, so a
  // request sits at the same height on both sides). Rows are request ids: a row never moves.
  function rows(lanes, range, axis, fc) {
    const ids = new Set();
    for (const S of lanes) {
      for (const R of S.reqs.values()) {
        const [a, b] = reqExtent(R, axis, fc, S);
        if (a == null || b == null) continue;
        if (b >= range[0] && a <= range[1]) ids.add(R.rid);
      }
    }
    // requests that have run first (a queue of a thousand would hide them), then the newest
    const ran = new Set();
    for (const S of lanes) {
      for (const rid of ids) if (S.reqs.has(rid) && S.reqs.get(rid).state !== KIND.queued) ran.add(rid);
    }
    return [...ids].sort((a, b) => ran.has(b) - ran.has(a) || b - a).slice(0, MAX_ROWS);
  }

  // Phase shading, the same language as the slots grid: decode = the request's color, prefill = a light
  // tint of it, padding (finished, still held) = grey tinted by it; waits are thin bars.
  function segFill(kind, color, reason) {
    switch (kind) {
      case "queued": return rgba(color, 0.5);
      case "prefill": case "recompute": return mix(color, C.white, 0.5);
      case "preempted": return C.preempt;
      case "swapped": return C.swapped;
      case "transfer": return C.transfer;
      case "held": return mix(C.held, color, 0.25);
      case "finish": return reason === "abort" || reason === "error" ? C.preempt : C.white;
      default: return color;
    }
  }

  // A bar's lines; a wait (queued, preempted) says why, from the scheduler's reasons over the stretch
  // (one still open lasts until now, on the service clock, even while the axis stands still).
  function segTip(R, s, contract, now) {
    const its = s.it0 != null ? (s.it0 === s.it1 ? `iteration ${s.it0}` : `iterations ${s.it0}–${s.it1}`) : "";
    const end = s.open ? now ?? s.t1 : s.t1;
    const why = s.whys ? Waits.lines(contract, s.whys, end, now) : [];
    const span = s.open ? `${fmt(s.t0)} s – now (${fmt(end - s.t0, 1)} s)`
      : `${fmt(s.t0)}–${fmt(s.t1)} s (${fmt(s.t1 - s.t0, 3)} s)`;
    return [`${reqLabel(R, 40)} · ${SEG_LABEL[s.kind]}`, span, copyLine(s), ...why, s.open ? "still waiting" : its,
            draftLine(s)].filter(Boolean);
  }

  // A hand-off's copy, as the decode engine timed it (the rest of the stretch: waiting to be admitted there).
  function copyLine(s) {
    if (!s.copy) return "";
    return `${s.copy.blocks} blocks, ${fmt(s.copy.bytes / 1e6, 2)} MB copied in ${fmt(1000 * s.copy.s, 2)} ms (measured)`;
  }

  // Speculative decoding on a decode bar: tokens gained per step, and the drafts accepted.
  function draftLine(s) {
    if (!s.drafted) return "";
    return `${s.tokens} tokens in ${s.n} steps (${fmt(s.tokens / s.n, 2)} per step) · ${s.accepted} of ${s.drafted} `
      + "drafted tokens accepted";
  }

  function cachedTip(R, s) {
    return [`${reqLabel(R, 40)} · ${SEG_LABEL.cached}`, `${s.cached.toLocaleString()} tokens served by the prefix cache at (re)admission`,
            `not computed; ${s.computed.toLocaleString()} computed in this iteration (the solid part)`,
            "the split is by tokens, not by time"];
  }

  // The admission bar of a prefix hit, split by tokens: the hatched part for the cached tokens
  // (they took no time), the solid part for the tokens computed. -> [[a, b, kind, tip], ...]
  function pieces(R, sg, a, b, tip) {
    if (!sg.cached) return [[a, b, sg.kind, tip]];
    const mid = a + ((b - a) * sg.cached) / (sg.cached + sg.computed);
    return [[a, mid, "cached", () => cachedTip(R, sg)], [mid, b, sg.kind, tip]];
  }

  // Hatched in the request's color, outlined, labelled where it fits.
  function cachedBar(ctx, k, color, xa, y, w, h) {
    ctx.fillStyle = C.idle;
    ctx.fillRect(xa, y, w, h);
    ctx.fillStyle = hatchPattern(ctx, color, k);
    ctx.fillRect(xa, y, w, h);
    ctx.strokeStyle = color;
    ctx.lineWidth = 1;
    ctx.strokeRect(xa + 0.5, y + 0.5, Math.max(w - 1, 0), Math.max(h - 1, 0));
    ctx.font = `600 ${Math.round(Math.min(12 * k, h * 0.7))}px ${FONT}`;
    if (h < 9 || ctx.measureText("from cache").width + 6 > w) return;
    ctx.fillStyle = C.text;
    ctx.textBaseline = "middle";
    ctx.textAlign = "left";
    ctx.fillText("from cache", xa + 3, y + h / 2);
  }

  // Speculative decoding: a decode bar's tokens per step, written on it where it fits.
  function perStep(ctx, k, sg, xa, xb, y, rowH) {
    const text = `${fmt(sg.tokens / sg.n, 1)} tok/step`;
    ctx.font = `600 ${Math.round(Math.min(12 * k, rowH * 0.55))}px ${FONT}`;
    if (rowH * SEG_H.decode < 10 || ctx.measureText(text).width + 6 > xb - xa) return;
    ctx.fillStyle = C.plot;
    ctx.textBaseline = "middle";
    ctx.textAlign = "left";
    ctx.fillText(text, xa + 3, y);
  }

  function finishTip(R) {
    return [`${reqLabel(R, 40)} · finished${R.reason ? ` (${R.reason})` : ""}`, `at ${fmt(R.finishT)} s`
      + (R.nOut ? ` · ${R.nOut} tokens` : ""), R.error ? String(R.error) : ""].filter(Boolean);
  }

  function draw(ctx, inst, S, fc, X, band, col) {
    const k = inst.scale, timeMode = fc.axis === "time";
    const ids = fc.rows.get(S.name) || [];
    const rowSet = new Set(ids);
    const top = ids.length ? ids[0] : 0;
    const bottom = ids.length ? Math.min(ids[ids.length - 1], top - MIN_ROWS + 1) : -MIN_ROWS + 1;
    const rowH = band.h / (top - bottom + 1);
    const Y = (rid) => band.y + (top + 0.5 - rid) * rowH;  // the row's center; newest on top
    if (inst.sel != null && rowSet.has(inst.sel)) {
      ctx.fillStyle = "rgba(255,255,255,0.08)";
      ctx.fillRect(band.x, Y(inst.sel) - rowH / 2, band.w, rowH);
    }
    const bar = (R, a, b, kind, tip) => {
      const h = SEG_H[kind] * rowH, y = Y(R.rid) - h / 2;
      const xa = X(a), xb = Math.max(X(b), xa + 1);
      const picked = inst.sel === R.rid;
      ctx.globalAlpha = inst.sel != null && !picked ? 0.16 : 1;
      if (kind === "cached") cachedBar(ctx, k, reqColor(R.rid), xa, y, xb - xa, h);
      else {
        ctx.fillStyle = segFill(kind, reqColor(R.rid), R.reason);
        ctx.fillRect(xa, y, xb - xa, h);
      }
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
    stalls(ctx, k, S, fc, X, band, range);
    for (const rid of ids) {
      const R = S.reqs.get(rid);
      if (!R) continue;
      const segs = R.open ? [...R.segs, { kind: R.open.kind, t0: R.open.t0, t1: fc.now, x0: R.open.x0,
                                          x1: S.lastIt + 0.5, it0: null, open: true, whys: R.open.whys }] : R.segs;
      for (const sg of segs) {
        const a = timeMode ? sg.t0 : sg.x0, b = timeMode ? sg.t1 : sg.x1;
        if (a == null || b == null || b < range[0] || a > range[1]) continue;
        const tip = () => segTip(R, sg, inst.contract, inst.serviceClock());
        for (const [pa, pb, kind, t] of pieces(R, sg, a, b, tip)) bar(R, pa, pb, kind, t);
        if (sg.drafted) perStep(ctx, k, sg, X(Math.max(a, range[0])), X(Math.min(b, range[1])), Y(R.rid), rowH);
      }
      const fx = timeMode ? R.finishT : R.finishX;
      if (fx != null && fx >= range[0] && fx <= range[1]) {
        const half = X.invert(X(fx) + 1.75 * k) - fx;  // a finish tick is ~3.5 px wide
        bar(R, fx - half, fx + half, "finish", () => finishTip(R));
      }
    }
    ctx.globalAlpha = 1;
    const every = Math.max(1, Math.ceil((15 * k) / rowH));  // labels that fit
    band.yticks = ids.filter((r) => r % every === 0 || r === inst.sel)
      .map((r) => ({ y: Y(r), label: reqLabel(S.reqs.get(r) || { rid: r }, NAME_CHARS), strong: r === inst.sel }));
    col.rows = ids.slice();
  }

  // Iterations whose decoding rows waited for a prefill: amber behind the bars, with a tooltip of their own
  // (pushed first: a bar over one still wins the hover).
  function stalls(ctx, k, S, fc, X, band, range) {
    for (const st of S.steps) {
      if (!st.stall) continue;
      const a = fc.axis === "time" ? st.t0 : st.it - 0.5, b = fc.axis === "time" ? st.t1 : st.it + 0.5;
      if (b < range[0] || a > range[1]) continue;
      const xa = X(Math.max(a, range[0])), xb = X(Math.min(b, range[1]));
      drawStall(ctx, k, xa, xb, band.y, band.h, `decodes waited ${fmt(st.stall.waited, 1)} s`);
      band.hits.push({ xa, xb: Math.max(xb, xa + 2), ya: band.y, yb: band.y + band.h, rid: null,
                       tip: () => stallTip(st), color: C.stall });
    }
  }

  // The bar under (x, y): { rid, tip: [lines], color } or null.
  function hit(inst, band, x, y) {
    for (let i = band.hits.length - 1; i >= 0; i--) {
      const h = band.hits[i];
      if (x >= h.xa - 1 && x <= h.xb + 1 && y >= h.ya && y <= h.yb) return { rid: h.rid, tip: h.tip(), color: h.color };
    }
    return null;
  }

  return { rows, draw, hit };
});
